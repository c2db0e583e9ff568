// The one list of the binary's subcommands (main() and the command-line tests build the same app).
#include "cli/commands.h"

namespace pagoda::cli {

void register_all_commands(CLI::App& app, int& exit_code) {
  register_generate_command(app, exit_code);
  register_tokenize_commands(app, exit_code);
  register_chat_template_command(app, exit_code);
  register_bench_commands(app, exit_code);
  register_serve_command(app, exit_code);
  register_router_command(app, exit_code);
}

}  // namespace pagoda::cli
