// spindle <command>: the one binary. Errors a user can fix (bad flag, bad model folder) print
// their message and exit with status 1; CLI11 usage errors exit with its code.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "config/switch_config.h"
#include "platform/openmp_policy.h"
#include "util/build_info.h"
#include "util/error.h"
#include "util/log.h"

int main(int argc, char** argv) {
  try {
    spindle::config::resolve_process_switches();  // the environment, read once (util/switches.h)
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  spindle::default_openmp_wait_policy(argv);  // may re-execute this binary (platform/openmp_policy.h)
  spindle::init_logging();
  CLI::App app{"Spindle: an LLM inference server that configures itself", "spindle"};
  app.set_version_flag("--version", std::string(spindle::build_id()));
  app.require_subcommand(1);
  int exit_code = 0;
  spindle::cli::add_info_command(app);
  spindle::cli::add_doctor_command(app);
  spindle::cli::add_generate_command(app);
  spindle::cli::add_serve_command(app);
  spindle::cli::add_plan_command(app);
  spindle::cli::add_check_attention_command(app, exit_code);
  spindle::cli::add_check_linear_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const spindle::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return exit_code;
}
