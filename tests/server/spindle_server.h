// End-to-end test support: the real `spindle serve` as a child process on loopback, a few HTTP
// helpers over cpp-httplib's client (JSON requests, SSE streams, Prometheus metrics), and running
// other commands (`spindle generate`, node) with their stdout captured.
#pragma once

#include <httplib.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace spindle::testing {

// A port nothing listens on right now (bind 127.0.0.1:0, read it back, close).
int free_loopback_port();

// A temporary file path under the test temp dir, unique in this process.
std::string temp_path(const std::string& stem);

struct ChildResult {
  int exit_code = -1;   // the exit status, or -(signal number); -1000 when it could not start
  bool timed_out = false;
  std::string out;      // its stdout
  std::string err;      // its stderr
};

// Runs argv (argv[0] is looked up in PATH when it has no '/'), killing it after `timeout`.
ChildResult run_child(const std::vector<std::string>& argv, std::chrono::seconds timeout);

// The executable `name` on PATH, or "" when there is none.
std::string find_on_path(const std::string& name);

// `spindle serve --port P --no-backend-cache --attention-backend-policy priority
// --enable-debug-routes ARGS...` (the debug route serves kv_settled's integrity check) with its
// output in a log file. Stopped (SIGTERM, then SIGKILL after 10 s) by stop() or the destructor,
// and killed when the thread that started it exits (start it from the main thread).
class SpindleServer {
 public:
  // Starts the server and waits (up to `timeout`) for /health to answer 200. On failure returns
  // null and says why in *error (with the server's log).
  static std::unique_ptr<SpindleServer> start(const std::vector<std::string>& args, std::string* error,
                                              std::chrono::seconds timeout = std::chrono::seconds(120),
                                              bool debug_routes = true);
  ~SpindleServer();
  SpindleServer(const SpindleServer&) = delete;
  SpindleServer& operator=(const SpindleServer&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string base_url() const;  // http://127.0.0.1:PORT
  // /health answered 503 (loading) at least once before 200.
  bool saw_loading() const { return saw_loading_; }
  // What GET /v1/models answered while the model loaded (status 0 when never probed then).
  const std::pair<int, std::string>& models_while_loading() const { return models_while_loading_; }
  // Still running (not exited).
  bool alive();
  // SIGTERM, wait up to 10 s, then SIGKILL. Returns the exit code (or -signal); true in *graceful
  // when it exited by itself (after this SIGTERM, or before the call), i.e. was not killed.
  int stop(bool* graceful = nullptr);
  std::string log() const;

  // A client for this server (read timeout `timeout_s`), sending `api_key` when not empty.
  std::unique_ptr<httplib::Client> client(int timeout_s = 60, const std::string& api_key = "") const;

 private:
  SpindleServer() = default;

  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
  bool saw_loading_ = false;
  std::pair<int, std::string> models_while_loading_{0, ""};
  std::optional<int> exit_code_;
};

struct JsonReply {
  int status = 0;         // 0: no HTTP response (connection error)
  std::string body;
  nlohmann::json json;    // discarded when the body is not JSON
  std::string content_type;
};

JsonReply get(httplib::Client& client, const std::string& path);
JsonReply post(httplib::Client& client, const std::string& path, const std::string& body,
               const std::string& content_type = "application/json");
inline JsonReply post(httplib::Client& client, const std::string& path, const nlohmann::json& body) {
  return post(client, path, body.dump());
}

// A server-sent-event response.
struct SseReply {
  int status = 0;
  std::string content_type;
  std::string raw;                      // the whole body as received
  std::vector<nlohmann::json> events;   // every "data: {...}" event, in order ([DONE] excluded)
  bool done = false;                    // "data: [DONE]" came, as the last event
  std::vector<std::string> problems;    // anything that is not well-formed SSE
  bool cancelled = false;               // the client hung up after `stop_after_events`
};

// POSTs a streaming request and parses the stream. With stop_after_events >= 0 the client closes
// the connection once that many data events arrived.
SseReply post_stream(httplib::Client& client, const std::string& path, const nlohmann::json& body,
                     int stop_after_events = -1);

// Prometheus text: "name value" lines of unlabelled samples.
std::map<std::string, double> parse_metrics(const std::string& text);

}  // namespace spindle::testing
