// jinja_render JOBS.json: renders every job with Spindle's Jinja engine and prints the results as
// JSON, for tests/jinja/check_corpus.py to compare with jinja2 (the reference renderer).
//   JOBS.json: {"now": unix seconds for strftime_now,
//               "jobs": [{"name": "...", "source": "template text", "context": {...}}, ...]}
//   stdout:    [{"ok": true, "output": "..."} | {"ok": false, "kind": "...", "error": "..."}, ...]
#include "jinja/template.h"

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

namespace {

const char* kind_name(spindle::jinja::ErrorKind kind) {
  switch (kind) {
    case spindle::jinja::ErrorKind::kSyntax: return "syntax";
    case spindle::jinja::ErrorKind::kRender: return "render";
    case spindle::jinja::ErrorKind::kRaised: return "raised";
    case spindle::jinja::ErrorKind::kLimit: return "limit";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: jinja_render JOBS.json\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  const auto jobs = nlohmann::ordered_json::parse(text.str());
  spindle::jinja::RenderOptions options;
  const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(jobs.at("now").get<int64_t>()));
  options.now = [now] { return now; };
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const auto& job : jobs.at("jobs")) {
    nlohmann::ordered_json r;
    try {
      spindle::jinja::Template t(job.at("source").get<std::string>(), job.at("name").get<std::string>());
      r["ok"] = true;
      r["output"] = t.render(job.at("context"), options);
    } catch (const spindle::jinja::TemplateError& e) {
      r = {{"ok", false}, {"kind", kind_name(e.kind())}, {"error", e.message()}};
    }
    results.push_back(std::move(r));
  }
  std::cout << results.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  return 0;
}
