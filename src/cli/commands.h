#pragma once
// Each subcommand of the `pagoda` binary registers itself on the CLI11 app. A command's callback
// stores its exit status in `exit_code`; errors are thrown and turned into messages by main().
#include <CLI/CLI.hpp>

namespace pagoda::cli {

void register_generate_command(CLI::App& app, int& exit_code);
void register_tokenize_commands(CLI::App& app, int& exit_code);  // tokenize, detokenize
void register_chat_template_command(CLI::App& app, int& exit_code);
void register_bench_commands(CLI::App& app, int& exit_code);  // bench throughput
void register_serve_command(CLI::App& app, int& exit_code);
void register_router_command(CLI::App& app, int& exit_code);  // router --backend URL...

/// All of the above, in the order `pagoda --help` lists them.
void register_all_commands(CLI::App& app, int& exit_code);

}  // namespace pagoda::cli
