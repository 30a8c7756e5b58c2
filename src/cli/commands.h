// Each subcommand registers itself on the root CLI11 app; the callback runs the command.
#pragma once

#include <CLI/CLI.hpp>

namespace spindle::cli {

void add_info_command(CLI::App& app);
void add_doctor_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_plan_command(CLI::App& app);
// Sets exit_code to the child's verdict (0 pass, 1 mismatch, 2 error).
void add_check_attention_command(CLI::App& app, int& exit_code);
// The linear validation child (kernels/cpu/select/linear_check.h); exit code as above.
void add_check_linear_command(CLI::App& app, int& exit_code);

}  // namespace spindle::cli
