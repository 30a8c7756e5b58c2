// The OpenAI-compatible HTTP server (cpp-httplib): /v1/completions, /v1/chat/completions (SSE
// streaming or not), /v1/models, /health, /metrics. Handlers only parse, validate, tokenize, post
// to the engine and relay its events; a bad request is a 4xx JSON error and never stops serving.
#pragma once

#include <atomic>
#include <memory>
#include <string>

namespace httplib {
class Server;
}

namespace spindle::engine {
class DpGroup;
}

namespace spindle::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;                  // empty: no auth
  size_t max_body_bytes = 4 << 20;
  int num_http_threads = 64;
};

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();

  // Until set, /health and /v1/* answer 503 (the model is loading).
  void set_engine(engine::DpGroup* engine);
  // Binds; returns the bound port (useful with port 0). Throws when the address is taken.
  int bind();
  // Serves until stop() (blocking).
  void listen();
  void stop();

 private:
  void install_routes();

  HttpServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<engine::DpGroup*> engine_{nullptr};
};

}  // namespace spindle::server
