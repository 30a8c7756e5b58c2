#include "util/child_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "util/error.h"
#include "util/switches.h"

namespace spindle {
namespace {

// Drains whatever is readable from fd into out; false at EOF.
bool drain(int fd, std::string& out) {
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof(buf));
  if (n > 0) {
    out.append(buf, static_cast<size_t>(n));
    return true;
  }
  return n < 0 && (errno == EINTR || errno == EAGAIN);
}

// Reads both pipes until EOF or the deadline; true when the deadline passed.
bool read_until_done(int out_fd, int err_fd, double timeout_s, ChildRun& run) {
  bool out_open = true, err_open = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (out_open || err_open) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return true;
    pollfd fds[2] = {{out_open ? out_fd : -1, POLLIN, 0}, {err_open ? err_fd : -1, POLLIN, 0}};
    const int ready = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (out_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) out_open = drain(out_fd, run.out);
    if (err_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) err_open = drain(err_fd, run.err);
  }
  return false;
}

}  // namespace

ChildRun run_child_process(const std::vector<std::string>& args, double timeout_s) {
  SPINDLE_CHECK(!args.empty(), "run_child_process: no executable");
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int out_pipe[2], err_pipe[2];
  SPINDLE_CHECK(::pipe2(out_pipe, O_CLOEXEC) == 0 && ::pipe2(err_pipe, O_CLOEXEC) == 0, "pipe2 failed: {}",
                std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0].c_str(), &actions, nullptr, argv.data(), process_environment_block());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    SPINDLE_FAIL("cannot start child {}: {}", args[0], std::strerror(rc));
  }
  ChildRun run;
  run.timed_out = read_until_done(out_pipe[0], err_pipe[0], timeout_s, run);
  if (run.timed_out) ::kill(pid, SIGKILL);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  if (WIFSIGNALED(wstatus)) {
    run.signaled = true;
    run.signal = WTERMSIG(wstatus);
  } else if (WIFEXITED(wstatus)) {
    run.exit_status = WEXITSTATUS(wstatus);
  }
  return run;
}

std::string signal_description(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  const char* text = strsignal(sig);
  return fmt::format("SIG{} ({})", abbrev ? abbrev : std::to_string(sig).c_str(), text ? text : "?");
}

std::string last_json_line(const std::string& text) {
  size_t end = text.size();
  while (end > 0) {
    const size_t begin = text.rfind('\n', end - 1);
    const size_t start = begin == std::string::npos ? 0 : begin + 1;
    const std::string line = text.substr(start, end - start);
    if (!line.empty() && line.front() == '{' && nlohmann::json::accept(line)) return line;
    if (begin == std::string::npos) break;
    end = begin;
  }
  return "";
}

std::string last_line(const std::string& text) {
  const auto end = text.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const auto begin = text.rfind('\n', end);
  const size_t start = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(start, end - start + 1);
}

}  // namespace spindle
