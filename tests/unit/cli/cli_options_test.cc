// The command line of the `pagoda` binary, built as main() builds it. CLI11 releases after the
// Debian 12 one (2.1.2) refuse, when the app is built, a positional whose name is also a long
// option of the same command (`serve model` and `--model`): every command then aborted at start,
// `pagoda generate` too. The rule is checked here, whatever CLI11 the build has.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/status.h"

namespace pagoda::cli {
namespace {

void expect_distinct_names(const CLI::App* cmd, const std::string& path) {
  std::set<std::string> positional, long_names;
  for (const CLI::Option* opt : cmd->get_options()) {
    if (!opt->nonpositional()) positional.insert(opt->get_name(true, false));
    for (const std::string& l : opt->get_lnames()) {
      EXPECT_TRUE(long_names.insert(l).second) << path << ": --" << l << " declared twice";
    }
  }
  for (const std::string& p : positional) {
    EXPECT_EQ(long_names.count(p), 0u) << path << ": positional " << p << " is also --" << p;
  }
  for (const CLI::App* sub : cmd->get_subcommands({})) {
    expect_distinct_names(sub, path + " " + sub->get_name());
  }
}

TEST(CliOptions, NoPositionalSharesALongOptionName) {
  CLI::App app{"pagoda"};
  int exit_code = 0;
  ASSERT_NO_THROW(register_all_commands(app, exit_code));
  ASSERT_GE(app.get_subcommands({}).size(), 5u);
  expect_distinct_names(&app, "pagoda");
}

TEST(CliOptions, ServeTakesTheModelAsPositionalOrFlag) {
  for (const char* flag : {"", "--model"}) {
    CLI::App app{"pagoda"};
    int exit_code = 0;
    register_all_commands(app, exit_code);
    CLI::App* serve = app.get_subcommand("serve");
    // Parse only: the callback (which loads the model) runs on the final callback, so drop it.
    serve->callback([] {});
    std::vector<std::string> args = {"/models/x"};
    if (*flag) args.insert(args.begin(), flag);
    args.insert(args.begin(), "serve");
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses a reversed list
    ASSERT_NO_THROW(app.parse(reversed)) << flag;
    const CLI::Option* opt = serve->get_option(*flag ? "--model" : "model_dir");
    ASSERT_NE(opt, nullptr);
    EXPECT_EQ(opt->as<std::string>(), "/models/x");
  }
}

// --kv-offloading-size: GiB as vLLM takes it, or a size with a unit; anything else names the flag.
TEST(CliOptions, KvOffloadingSizeIsGibOrASize) {
  EXPECT_EQ(parse_kv_offloading_size("0"), 0);
  EXPECT_EQ(parse_kv_offloading_size("8"), int64_t{8} << 30);
  EXPECT_EQ(parse_kv_offloading_size("0.5"), int64_t{512} << 20);
  EXPECT_EQ(parse_kv_offloading_size("512M"), int64_t{512} << 20);
  EXPECT_EQ(parse_kv_offloading_size("2GiB"), int64_t{2} << 30);
  for (const char* bad : {"-1", "lots", ".", "1.2.3", "", "1e9999"}) {
    try {
      (void)parse_kv_offloading_size(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("--kv-offloading-size"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW((void)parse_kv_offloading_size("99999999999"), InvalidArgument);  // past 2^63 bytes
}

// -tp N picks the worker-process executor unless --distributed-executor-backend names one (uni is
// then refused by the executor, naming both flags); -pp and -dp stay refused here.
TEST(CliOptions, TensorParallelSizeImpliesWorkerProcesses) {
  EngineFlags f;
  EXPECT_EQ(f.to_engine_args().distributed_executor_backend, "uni");
  f.tensor_parallel_size = 2;
  EngineArgs a = f.to_engine_args();
  EXPECT_EQ(a.tensor_parallel_size, 2);
  EXPECT_EQ(a.distributed_executor_backend, "mp");
  f.distributed_executor_backend = "uni";
  EXPECT_EQ(f.to_engine_args().distributed_executor_backend, "uni");
  f.tensor_parallel_size = 0;
  EXPECT_THROW((void)f.to_engine_args(), InvalidArgument);
  EngineFlags dp;
  dp.data_parallel_size = 2;
  try {
    (void)dp.to_engine_args();
    ADD_FAILURE() << "-dp 2 accepted outside serve";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--data-parallel-size 2"), std::string::npos);
  }
}

TEST(CliOptions, DecodeContextParallelSizeDividesTheRanks) {
  EngineFlags f;
  f.tensor_parallel_size = 4;
  f.decode_context_parallel_size = 2;
  EXPECT_EQ(f.to_engine_args().decode_context_parallel_size, 2);
  f.decode_context_parallel_size = 3;
  try {
    (void)f.to_engine_args();
    ADD_FAILURE() << "-tp 4 -dcp 3 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "--decode-context-parallel-size 3: must divide --tensor-parallel-size 4");
  }
  f.decode_context_parallel_size = 0;
  EXPECT_THROW((void)f.to_engine_args(), InvalidArgument);
}

}  // namespace
}  // namespace pagoda::cli
