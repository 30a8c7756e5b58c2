#include "spindle_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/spindle_binary.h"

extern char** environ;

namespace spindle::testing {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

std::string temp_path(const std::string& stem) {
  static std::atomic<int> counter{0};
  return (std::filesystem::path(::testing::TempDir()) /
          (stem + "." + std::to_string(::getpid()) + "." + std::to_string(counter++)))
      .string();
}

namespace {

std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (const auto& a : argv) out.push_back(const_cast<char*>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

ChildResult run_child(const std::vector<std::string>& argv, std::chrono::seconds timeout) {
  ChildResult result;
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return result;
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  pid_t pid = -1;
  auto args = c_argv(argv);
  const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    result.exit_code = -1000;
    result.err = std::string("posix_spawnp: ") + std::strerror(rc);
    return result;
  }
  const auto deadline = Clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      result.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    if (::poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 1000))) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = decode_status(status);
  return result;
}

std::unique_ptr<SpindleServer> SpindleServer::start(const std::vector<std::string>& args, std::string* error,
                                                    std::chrono::seconds timeout, bool debug_routes) {
  // A port picked here may be taken before the server binds it: retry a few times.
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::unique_ptr<SpindleServer> s(new SpindleServer());
    s->port_ = free_loopback_port();
    s->log_path_ = temp_path("spindle_serve.log");
    std::vector<std::string> argv;
    // If this test process dies (a crash, a ctest timeout), the server must not live on: setpriv
    // (util-linux) sets the parent-death signal, tied to the calling thread, then execs spindle.
    if (const std::string setpriv = find_on_path("setpriv"); !setpriv.empty()) {
      argv = {setpriv, "--pdeathsig", "KILL", "--"};
    }
    argv.insert(argv.end(), {spindle_binary(), "serve", "--port", std::to_string(s->port_), "--no-backend-cache",
                             "--attention-backend-policy", "priority"});
    if (debug_routes) argv.push_back("--enable-debug-routes");
    argv.insert(argv.end(), args.begin(), args.end());

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, s->log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    auto cargs = c_argv(argv);
    const int rc = ::posix_spawn(&s->pid_, cargs[0], &actions, nullptr, cargs.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      *error = "cannot start " + argv[0] + ": " + std::strerror(rc);
      return nullptr;
    }

    httplib::Client probe("127.0.0.1", s->port_);
    probe.set_connection_timeout(1, 0);
    probe.set_read_timeout(5, 0);
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (!s->alive()) break;
      // /v1/models first: readiness only ever turns on, so a 503 from /health after it means
      // the model was still loading when /v1/models answered.
      auto models = probe.Get("/v1/models");
      if (auto r = probe.Get("/health")) {
        if (r->status == 503) {
          s->saw_loading_ = true;
          if (models && s->models_while_loading_.first == 0) s->models_while_loading_ = {models->status, models->body};
        }
        if (r->status == 200) return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const bool port_taken = !s->alive() && s->log().find("cannot listen") != std::string::npos;
    s->stop();
    if (port_taken) continue;
    *error = "spindle serve did not become healthy (exit " + std::to_string(s->exit_code_.value_or(0)) + "); log:\n" + s->log();
    return nullptr;
  }
  *error = "spindle serve could not bind a free port three times";
  return nullptr;
}

SpindleServer::~SpindleServer() {
  stop();
  if (!log_path_.empty()) std::filesystem::remove(log_path_);
}

std::string SpindleServer::base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

bool SpindleServer::alive() {
  if (exit_code_) return false;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_code_ = decode_status(status);
    return false;
  }
  return r == 0;
}

int SpindleServer::stop(bool* graceful) {
  if (graceful) *graceful = false;
  if (pid_ <= 0) return -1;
  if (!alive()) {
    // It already exited by itself (a test that sent SIGTERM itself: the drain may finish before
    // this call): not killed, so graceful.
    if (graceful) *graceful = true;
    return *exit_code_;
  }
  ::kill(pid_, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    if (!alive()) {
      if (graceful) *graceful = true;
      return *exit_code_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  exit_code_ = decode_status(status);
  return *exit_code_;
}

std::string SpindleServer::log() const { return read_file(log_path_); }

std::unique_ptr<httplib::Client> SpindleServer::client(int timeout_s, const std::string& api_key) const {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
  c->set_connection_timeout(5, 0);
  c->set_read_timeout(timeout_s, 0);
  c->set_write_timeout(timeout_s, 0);
  if (!api_key.empty()) c->set_default_headers({{"Authorization", "Bearer " + api_key}});
  return c;
}

namespace {

JsonReply to_reply(const httplib::Result& r) {
  JsonReply reply;
  if (!r) {
    reply.body = "no response: " + httplib::to_string(r.error());
    return reply;
  }
  reply.status = r->status;
  reply.body = r->body;
  reply.content_type = r->get_header_value("Content-Type");
  reply.json = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  return reply;
}

}  // namespace

JsonReply get(httplib::Client& client, const std::string& path) { return to_reply(client.Get(path)); }

JsonReply post(httplib::Client& client, const std::string& path, const std::string& body,
               const std::string& content_type) {
  return to_reply(client.Post(path, body, content_type));
}

SseReply post_stream(httplib::Client& client, const std::string& path, const json& body, int stop_after_events) {
  SseReply reply;
  int num_data_events = 0;
  size_t scanned = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& res) {
    reply.status = res.status;
    reply.content_type = res.get_header_value("Content-Type");
    return true;
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    reply.raw.append(data, size);
    for (size_t end; (end = reply.raw.find("\n\n", scanned)) != std::string::npos; scanned = end + 2) {
      if (reply.raw.compare(scanned, 6, "data: ") == 0) ++num_data_events;
    }
    if (stop_after_events >= 0 && num_data_events >= stop_after_events) {
      reply.cancelled = true;
      return false;
    }
    return true;
  };
  auto result = client.send(req);
  if (!result && !reply.cancelled) reply.problems.push_back("request failed: " + httplib::to_string(result.error()));
  if (result) reply.status = result->status;

  // Parse the events: blocks separated by a blank line, each of "data: ..." or ": comment" lines.
  size_t pos = 0;
  while (pos < reply.raw.size()) {
    const size_t end = reply.raw.find("\n\n", pos);
    if (end == std::string::npos) {
      if (!reply.cancelled) reply.problems.push_back("unterminated event: " + reply.raw.substr(pos));
      break;
    }
    std::stringstream block(reply.raw.substr(pos, end - pos));
    pos = end + 2;
    for (std::string line; std::getline(block, line);) {
      if (line.starts_with(":")) continue;  // comment (keep-alive)
      if (!line.starts_with("data: ")) {
        reply.problems.push_back("not a data line: " + line);
        continue;
      }
      if (reply.done) reply.problems.push_back("event after [DONE]: " + line);
      const std::string payload = line.substr(6);
      if (payload == "[DONE]") {
        reply.done = true;
        continue;
      }
      json j = json::parse(payload, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) {
        reply.problems.push_back("not a JSON object: " + payload);
      } else {
        reply.events.push_back(std::move(j));
      }
    }
  }
  return reply;
}

std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> out;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    if (line.empty() || line[0] == '#' || line.find('{') != std::string::npos) continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    try {
      out[line.substr(0, space)] = std::stod(line.substr(space + 1));
    } catch (const std::exception&) {
    }
  }
  return out;
}

}  // namespace spindle::testing
