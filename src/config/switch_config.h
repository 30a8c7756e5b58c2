// The environment's part of the configuration: config::resolve(Environment) turns the process's
// environment into the registry's values (util/switches.h) once, at start.
#pragma once

#include <string>
#include <vector>

#include "util/switches.h"

namespace spindle::config {

struct ResolvedSwitches {
  Switches values;
  std::vector<std::string> undeclared;  // SPINDLE_* names the registry does not declare
};

// Parses every declared variable of `environment` (throws spindle::Error naming a malformed
// one) and lists the SPINDLE_* variables nobody declared.
ResolvedSwitches resolve(const Environment& environment);

// At the start of main(): resolve(read_process_environment()), installed with set_switches.
ResolvedSwitches resolve_process_switches();

// "" when `undeclared` is empty, else one line naming each (the serve / generate warning; a
// retired A/B switch is named as such).
std::string undeclared_switches_warning(const std::vector<std::string>& undeclared);

}  // namespace spindle::config
