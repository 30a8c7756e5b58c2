// The hidden subcommands of validation children (commands.h: add_child_command).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "util/switches.h"

namespace spindle::cli {

CLI::App* add_child_command(CLI::App& app, const std::string& name, const std::string& description,
                            std::function<void()> run) {
  auto switch_args = std::make_shared<std::vector<std::string>>();  // NAME=VALUE each
  CLI::App* cmd = app.add_subcommand(name, description);
  cmd->group("");  // hidden from --help
  cmd->add_option("--switch", *switch_args);
  cmd->callback([switch_args, run = std::move(run)] {
    Switches values = switches();  // the environment's (main resolved it); the parent's win
    for (const std::string& s : *switch_args) apply_switch_argument(values, s);
    set_switches(std::move(values));
    run();
  });
  return cmd;
}

}  // namespace spindle::cli
