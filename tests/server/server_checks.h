// Assertions shared by the end-to-end server suites: OpenAI error bodies, /metrics, the KV pool
// settling back (no page referenced, integrity check passing) after a scenario.
#pragma once

#include <gtest/gtest.h>


#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "spindle_server.h"
#include "support/run_python.h"  // run_python: the Python oracles of the tool tests

namespace spindle::testing {

inline std::map<std::string, double> server_metrics(httplib::Client& client) {
  const JsonReply r = get(client, "/metrics");
  return r.status == 200 ? parse_metrics(r.body) : std::map<std::string, double>{};
}

inline double metric(const std::map<std::string, double>& m, const std::string& name) {
  auto it = m.find(name);
  return it == m.end() ? -1 : it->second;
}

// {"error": {"message": "...", "type": "...", "param": ..., "code": status}} with `status`.
inline void expect_api_error(const JsonReply& r, int status, const std::string& param = "", const std::string& what = "") {
  SCOPED_TRACE(what + " -> " + r.body.substr(0, 300));
  EXPECT_EQ(r.status, status);
  ASSERT_TRUE(r.json.is_object() && r.json.contains("error") && r.json["error"].is_object());
  const auto& e = r.json["error"];
  ASSERT_TRUE(e.contains("message") && e["message"].is_string());
  EXPECT_FALSE(e["message"].get<std::string>().empty());
  EXPECT_TRUE(e.contains("type") && e["type"].is_string());
  EXPECT_EQ(e.value("code", 0), status);
  if (!param.empty()) {
    EXPECT_EQ(e.value("param", nlohmann::json()), param);
  }
}

// Waits (up to `timeout`) until no request runs or waits and no KV page is referenced, then runs
// the engine's KV integrity check.
inline ::testing::AssertionResult kv_settled(httplib::Client& client,
                                             std::chrono::seconds timeout = std::chrono::seconds(15)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::map<std::string, double> m;
  for (;;) {
    m = server_metrics(client);
    if (metric(m, "spindle_num_requests_running") == 0 && metric(m, "spindle_num_requests_waiting") == 0 &&
        metric(m, "spindle_kv_pages_in_use") == 0) {
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return ::testing::AssertionFailure() << "still running " << metric(m, "spindle_num_requests_running")
                                           << ", waiting " << metric(m, "spindle_num_requests_waiting")
                                           << ", KV pages in use " << metric(m, "spindle_kv_pages_in_use");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const JsonReply r = get(client, "/internal/kv_integrity");
  if (r.status != 200 || !r.json.is_object() || r.json.value("ok", false) != true) {
    return ::testing::AssertionFailure() << "KV integrity check: " << r.status << " " << r.body;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace spindle::testing
