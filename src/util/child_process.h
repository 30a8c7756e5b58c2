// Running a child process to completion with a deadline (the validation children of
// attn/select and kernels/cpu/select): posix_spawn (fork+exec, nothing forked after
// initialisation), stdout and stderr captured, the child killed when the deadline passes.
#pragma once

#include <string>
#include <vector>

namespace spindle {

struct ChildRun {
  bool timed_out = false;  // killed with SIGKILL at the deadline
  bool signaled = false;   // ended by a signal (signal says which)
  int signal = 0;
  int exit_status = -1;    // when it exited normally
  std::string out, err;    // everything it wrote
};

// Spawns args[0] with args (the environment: util/switches.h process_environment_block()) and
// waits at most timeout_s. Throws spindle::Error when the child cannot be started.
ChildRun run_child_process(const std::vector<std::string>& args, double timeout_s);

// "SIGILL (Illegal instruction)".
std::string signal_description(int sig);
// The last line of `text` that is a JSON object ("" when none): a library may print after it.
std::string last_json_line(const std::string& text);
// The last non-empty line of `text`.
std::string last_line(const std::string& text);

}  // namespace spindle
