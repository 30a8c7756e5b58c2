// python3-jsonschema's reason per (schema, text) case: "" where the text is valid JSON under the
// schema (draft 2020-12, formats not checked), else why ("BAD " + the validator's first line). For
// tests that report which output failed and why; jsonschema_verdicts.h gives one character a case.
// `stem` names the case and script files in the test's temporary folder.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace spindle::testing {

inline std::vector<std::string> jsonschema_reasons(const std::vector<std::pair<nlohmann::json, std::string>>& cases,
                                                   const std::string& stem) {
  const std::string dir = ::testing::TempDir();
  nlohmann::json all = nlohmann::json::array();
  for (const auto& [schema, text] : cases) all.push_back({{"schema", schema}, {"text", text}});
  std::ofstream(dir + "/" + stem + "_cases.json") << all.dump();
  std::ofstream(dir + "/" + stem + "_validate.py")
      << "import json,sys,jsonschema\n"
         "for c in json.load(open(sys.argv[1])):\n"
         "  try:\n"
         "    jsonschema.Draft202012Validator(c['schema'], format_checker=None).validate(json.loads(c['text']))\n"
         "    print('OK')\n"
         "  except Exception as e:\n"
         "    print('BAD ' + str(e).splitlines()[0])\n";
  std::vector<std::string> out;
  FILE* p = ::popen(("python3 " + dir + "/" + stem + "_validate.py " + dir + "/" + stem + "_cases.json").c_str(), "r");
  char line[4096];
  while (p != nullptr && std::fgets(line, sizeof line, p) != nullptr) {
    std::string s(line);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    out.push_back(s == "OK" ? "" : s);
  }
  if (p != nullptr) ::pclose(p);
  out.resize(cases.size(), "no verdict (python3-jsonschema: scripts/setup.sh)");
  return out;
}

}  // namespace spindle::testing
