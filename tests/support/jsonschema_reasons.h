// python3-jsonschema's reason per (schema, text) case: "" where the text is valid JSON under the
// schema (draft 2020-12 unless the schema names another, formats not checked), else why ("BAD " +
// the validator's first line). For tests that report which output failed and why;
// jsonschema_verdicts.h gives one character a case.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "support/jsonschema_verdicts.h"

namespace spindle::testing {

inline std::vector<std::string> jsonschema_reasons(const std::vector<std::pair<nlohmann::json, std::string>>& cases) {
  std::vector<std::string> out = run_validate_instances(cases, "--reasons");
  for (std::string& s : out) {
    if (s == "OK") s.clear();
  }
  out.resize(cases.size(), "no verdict (python3-jsonschema: scripts/setup.sh)");
  return out;
}

}  // namespace spindle::testing
