// The independent verdicts of Debian's python3-jsonschema on JSON instances, through
// tests/grammar/validate_instances.py: what the grammar, tool-call and constrained-engine tests
// check their outputs against.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/run_python.h"

namespace spindle::testing {

// tests/grammar/validate_instances.py `flags` over `jobs` (schema, instance text): its lines. Input
// and output pass through run_python's own temporary folder, so tests running at once (ctest -j)
// never read each other's cases.
template <typename Json>
std::vector<std::string> run_validate_instances(const std::vector<std::pair<Json, std::string>>& jobs,
                                                const std::string& flags) {
  const std::filesystem::path script =
      std::filesystem::path(SPINDLE_FIXTURES_DIR) / ".." / "grammar" / "validate_instances.py";
  std::ostringstream in;
  for (const auto& [schema, text] : jobs) {
    in << nlohmann::ordered_json{{"schema", schema}, {"instance", text}}.dump() << "\n";
  }
  return run_python(script.string() + (flags.empty() ? "" : " " + flags), in.str());
}

// python3-jsonschema's verdict on each (schema, instance text) job, one character a job: '1' valid,
// '0' invalid, 'P' the instance is not JSON (draft 2020-12 unless the schema names another;
// formats checked). A failed python3 run is a test failure and returns what it wrote.
inline std::string jsonschema_verdicts(const std::vector<std::pair<nlohmann::ordered_json, std::string>>& jobs) {
  std::string verdicts;
  for (const std::string& line : run_validate_instances(jobs, "")) verdicts += line;
  return verdicts;
}

}  // namespace spindle::testing
