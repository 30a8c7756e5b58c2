#include "config/switch_config.h"

#include <fmt/format.h>

namespace spindle::config {

ResolvedSwitches resolve(const Environment& environment) {
  ResolvedSwitches r;
  r.values = parse_switches(environment);
  r.undeclared = undeclared_spindle_variables(environment);
  return r;
}

ResolvedSwitches resolve_process_switches() {
  ResolvedSwitches r = resolve(read_process_environment());
  set_switches(r.values);
  return r;
}

std::string undeclared_switches_warning(const std::vector<std::string>& undeclared) {
  if (undeclared.empty()) return {};
  std::string names;
  for (const std::string& name : undeclared) {
    std::string note;
    for (const FormerSwitch& f : former_ab_switches()) {
      if (f.name == name && f.fate == SwitchFate::kDeleted) note = " (a retired A/B switch)";
    }
    names += fmt::format("{}{}{}", names.empty() ? "" : ", ", name, note);
  }
  return fmt::format("ignoring environment variable{} that Spindle does not declare: {} (`spindle info` lists "
                     "the declared ones)",
                     undeclared.size() == 1 ? "" : "s", names);
}

}  // namespace spindle::config
