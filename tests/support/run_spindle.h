// One run of the spindle binary (spindle_binary.h) as a child, its output captured; the model and
// the greedy generate the CLI tests run it on.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "support/spindle_binary.h"
#include "util/mapped_file.h"

namespace spindle::testing {

// models/kjv-tiny (the repository's own small Llama).
inline const std::filesystem::path kKjvTinyDir =
    std::filesystem::path(SPINDLE_FIXTURES_DIR) / ".." / ".." / "models" / "kjv-tiny";

// `generate MODEL` arguments after the model: two prompts, 24 greedy tokens each, one thread, the
// text alone (no statistics), so that two runs compare byte for byte.
inline constexpr const char* kGreedyGenerateArgs =
    " -p 'And God said' -p 'In the beginning God' -n 24 --temperature 0 --threads 1 --no-stats";

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;      // the signal that ended it, else 0
  std::string out, err;
};

// Runs "<env> spindle <args>" through the shell (both are shell text, used as given), its stdout
// and stderr captured in temporary files that are removed afterwards.
inline RunResult run_spindle(const std::string& args, const std::string& env = "") {
  static int counter = 0;
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(counter++);
  const std::filesystem::path out = dir / ("spindle_test_out_" + tag), err = dir / ("spindle_test_err_" + tag);
  const std::string cmd = env + " " + spindle_binary() + " " + args + " > " + out.string() + " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  RunResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = read_text_file(out);
  r.err = read_text_file(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

}  // namespace spindle::testing
