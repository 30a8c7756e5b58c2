// The Node client tests (tests/node/*.mjs, tests/node/harness.mjs) run by GoogleTest cases against
// a SpindleServer: why they cannot run here, and the run. A case reads
//   if (std::string why = node_client_unavailable({"openai"}); !why.empty()) GTEST_SKIP() << why;
//   expect_node_client_passes("openai_client_test", server->base_url() + "/v1");
// Needs SPINDLE_SOURCE_DIR (the repository root the scripts and tests/node/node_modules are in).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <initializer_list>
#include <string>

#include "spindle_server.h"

namespace spindle::testing {

inline std::filesystem::path node_tests_dir() { return std::filesystem::path(SPINDLE_SOURCE_DIR) / "tests" / "node"; }

// "" when node is on PATH and every npm package named is installed under tests/node/node_modules;
// else what is missing and how scripts/setup.sh installs it.
inline std::string node_client_unavailable(std::initializer_list<std::string> packages) {
  if (find_on_path("node").empty()) return "node is not installed (scripts/setup.sh installs nodejs and npm)";
  for (const std::string& package : packages) {
    if (!std::filesystem::exists(node_tests_dir() / "node_modules" / package / "package.json")) {
      return "the npm package " + package + " is not installed: npm ci --prefix tests/node (scripts/setup.sh runs it)";
    }
  }
  return "";
}

// Runs tests/node/SCRIPT.mjs against base_url (at most `timeout`): it must exit 0 and report no
// failing case (harness.mjs's last line).
inline void expect_node_client_passes(const std::string& script, const std::string& base_url,
                                      std::chrono::seconds timeout = std::chrono::seconds(120)) {
  const ChildResult r =
      run_child({find_on_path("node"), (node_tests_dir() / (script + ".mjs")).string(), base_url}, timeout);
  EXPECT_FALSE(r.timed_out) << script << " ran past " << timeout.count() << " s:\n" << r.out << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr(script + ": ")) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr(" ok, 0 failing")) << r.out << r.err;
}

}  // namespace spindle::testing
