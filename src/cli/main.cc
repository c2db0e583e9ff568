// The `pagoda` binary: one executable, one subcommand per task.
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "cli/commands.h"
#include "core/logging.h"
#include "core/status.h"

namespace {

/// vLLM's multi-letter short flags (-tp, -pp, -dp, -dcp), which CLI11 cannot declare, spelled
/// long.
std::vector<char*> spell_out_vllm_short_flags(int argc, char** argv) {
  static char tp[] = "--tensor-parallel-size", pp[] = "--pipeline-parallel-size",
              dp[] = "--data-parallel-size", dcp[] = "--decode-context-parallel-size";
  std::vector<char*> out(argv, argv + argc);
  for (char*& a : out) {
    if (std::strcmp(a, "-tp") == 0) a = tp;
    if (std::strcmp(a, "-pp") == 0) a = pp;
    if (std::strcmp(a, "-dp") == 0) a = dp;
    if (std::strcmp(a, "-dcp") == 0) a = dcp;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = spell_out_vllm_short_flags(argc, argv);
  CLI::App app{"pagoda: an LLM inference engine and OpenAI-compatible server"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warning or error")
      ->check(CLI::IsMember({"debug", "info", "warning", "error"}));
  int exit_code = 0;
  pagoda::cli::register_all_commands(app, exit_code);
  app.parse_complete_callback([&] { pagoda::init_logging(log_level); });
  try {
    app.parse(argc, args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const pagoda::InvalidArgument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const pagoda::NotFound& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return exit_code;
}
