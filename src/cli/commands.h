// Each subcommand registers itself on the root CLI11 app; the callback runs the command.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace spindle::cli {

void add_info_command(CLI::App& app);
void add_doctor_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_plan_command(CLI::App& app);
// A validation child's subcommand, hidden from --help. It takes --switch NAME=VALUE, the parent's
// registry values (util/switches.h switch_arguments), installs them over the environment's, then
// calls run.
CLI::App* add_child_command(CLI::App& app, const std::string& name, const std::string& description,
                            std::function<void()> run);
// Sets exit_code to the child's verdict (0 pass, 1 mismatch, 2 error).
void add_check_attention_command(CLI::App& app, int& exit_code);
// The linear validation child (kernels/cpu/select/linear_check.h); exit code as above.
void add_check_linear_command(CLI::App& app, int& exit_code);

}  // namespace spindle::cli
