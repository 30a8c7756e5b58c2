#include "server/http_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "engine/dp_group.h"
#include "server/completion_handler.h"
#include "util/error.h"

namespace spindle::server {

using nlohmann::json;

namespace {

// httplib 0.11 listens with a backlog of 5: a burst of concurrent connections overflows the accept
// queue and the kernel resets some of them (SYN cookies that fail). This gives the bound socket
// a real backlog (Linux lets listen() be called again on a listening socket to change it).
class ListeningServer : public httplib::Server {
 public:
  void raise_backlog() {
    const socket_t sock = svr_sock_;
    SPINDLE_CHECK(sock != INVALID_SOCKET && ::listen(sock, SOMAXCONN) == 0, "cannot raise the listen backlog: {}",
                  std::strerror(errno));
  }
};

void reply_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(to_json_text(e.to_json()), "application/json");
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options)
    : options_(std::move(options)), http_(std::make_unique<ListeningServer>()) {
  // httplib rejects larger bodies itself (413 without a body); ours gives the JSON error below it.
  http_->set_payload_max_length(options_.max_body_bytes * 2);
  const int threads = options_.num_http_threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // httplib's default socket options add SO_REUSEPORT, which lets a second server bind the same
  // port and the kernel split connections between the two: only SO_REUSEADDR (a restart may bind
  // over TIME_WAIT), so a port in use is an error at start.
  http_->set_socket_options([](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  http_->set_read_timeout(60, 0);
  http_->set_write_timeout(60, 0);
  install_routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::set_engine(engine::DpGroup* engine) { engine_.store(engine); }

int HttpServer::bind() {
  int port = options_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(options_.host);
  } else if (!http_->bind_to_port(options_.host, port)) {
    port = -1;
  }
  SPINDLE_CHECK(port > 0, "cannot listen on {}:{} (address in use or not available)", options_.host, options_.port);
  static_cast<ListeningServer&>(*http_).raise_backlog();
  return port;
}

void HttpServer::listen() { http_->listen_after_bind(); }

void HttpServer::stop() {
  if (http_) http_->stop();
}

void HttpServer::install_routes() {
  // Every /v1 route: auth, then the engine must be ready; ApiError and anything unexpected
  // become JSON errors.
  auto guarded = [this](auto handler) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      try {
        if (!options_.api_key.empty() && req.get_header_value("Authorization") != "Bearer " + options_.api_key) {
          throw ApiError(401, "authentication_error", "", "missing or invalid API key (Authorization: Bearer ...)");
        }
        engine::DpGroup* engine = engine_.load();
        if (engine == nullptr) throw ApiError(503, "server_loading", "", "the model is still loading");
        handler(*engine, req, res);
      } catch (const ApiError& e) {
        reply_error(res, e);
      } catch (const std::exception& e) {
        spdlog::error("request {} {} failed: {}", req.method, req.path, e.what());
        reply_error(res, ApiError(500, "internal_error", "", e.what()));
      }
    };
  };

  // The generation routes read their body through a ContentReader: httplib's own body reading
  // parses an application/x-www-form-urlencoded body (curl -d's default type) as a query string
  // and refuses one over 8 KiB with 413, whatever the limit.
  auto generation = [this, guarded](bool chat) {
    auto handler = [this, chat](engine::DpGroup& engine, const httplib::Request& req, httplib::Response& res,
                                const std::string& body) {
      auto request = std::make_shared<GenerationRequest>(chat ? parse_chat_request(body, options_.max_body_bytes)
                                                              : parse_completion_request(body, options_.max_body_bytes));
      auto submitted = std::make_shared<Submitted>(submit_request(engine, *request));
      if (!request->stream) {
        // Sent chunked so that a client that hangs up is noticed: while the answer is not ready,
        // a space (valid leading JSON whitespace) goes out every 200 ms, and a failed write
        // cancels the request. The status is 200 by then; a generation failure after it is
        // reported as an OpenAI error object in the body.
        res.set_chunked_content_provider(
            "application/json",
            [&engine, request, submitted](size_t, httplib::DataSink& sink) {
              std::string body;
              try {
                const json response = complete(engine, *request, *submitted, [&sink] {
                  return sink.is_writable() && sink.write(" ", 1);
                });
                if (response.is_null()) return false;  // the client is gone
                body = to_json_text(response);
              } catch (const ApiError& e) {
                body = to_json_text(e.to_json());
              } catch (const std::exception& e) {
                spdlog::error("completion failed: {}", e.what());
                body = to_json_text(ApiError(500, "internal_error", "", e.what()).to_json());
              }
              if (!sink.write(body.data(), body.size())) return false;
              sink.done();
              return true;
            },
            [submitted](bool success) {
              if (!success) submitted->stream->cancel();
            });
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [&engine, request, submitted](size_t, httplib::DataSink& sink) {
            // Runs on an httplib worker after the headers went out: an exception escaping here
            // would terminate the process, so it ends this stream (and request) instead.
            try {
              stream_completion(engine, *request, *submitted, [&sink](const std::string& chunk) {
                return sink.is_writable() && sink.write(chunk.data(), chunk.size());
              });
            } catch (const std::exception& e) {
              spdlog::error("stream failed: {}", e.what());
              submitted->stream->cancel();
              return false;
            }
            sink.done();
            return true;
          },
          [submitted](bool success) {
            if (!success) submitted->stream->cancel();
          });
    };
    return [guarded, handler](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
      if (req.is_multipart_form_data()) {
        // httplib's multipart reader needs callbacks we do not give it; the API takes JSON only.
        res.status = 415;
        res.set_content(to_json_text(ApiError(415, "invalid_request_error", "",
                                              "request bodies must be JSON (Content-Type: application/json)")
                                         .to_json()),
                        "application/json");
        return;
      }
      std::string body;
      const bool complete = reader([&](const char* data, size_t size) {
        body.append(data, size);
        return true;
      });
      guarded([&](engine::DpGroup& engine, const httplib::Request& r, httplib::Response& response) {
        if (!complete) {
          if (response.status == 413) throw ApiError(413, "invalid_request_error", "", "request body too large");
          bad_request("", "could not read the request body");
        }
        handler(engine, r, response, body);
      })(req, res);
    };
  };

  http_->Post("/v1/completions", generation(false));
  http_->Post("/v1/chat/completions", generation(true));
  http_->Get("/v1/models", guarded([](engine::DpGroup& engine, const httplib::Request&, httplib::Response& res) {
    json model = {{"id", engine.model_name()}, {"object", "model"}, {"created", static_cast<int64_t>(std::time(nullptr))},
                  {"owned_by", "spindle"}, {"max_model_len", engine.max_model_len()}};
    res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(), "application/json");
  }));
  // For tests: the KV pool's integrity check, run on the engine thread between steps.
  http_->Get("/internal/kv_integrity", guarded([](engine::DpGroup& engine, const httplib::Request&, httplib::Response& res) {
    res.set_content(json{{"ok", engine.kv_integrity_ok()}}.dump(), "application/json");
  }));
  // 200 while at least one DP rank serves: {"status": "ok"} or "degraded" with the failed ranks;
  // 503 while loading or once every rank failed ("failed").
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    engine::DpGroup* engine = engine_.load();
    if (engine == nullptr) {
      res.status = 503;
      res.set_content(json{{"status", "loading"}}.dump(), "application/json");
      return;
    }
    const engine::DpHealth health = engine->health();
    json body = {{"status", health.status}, {"dp_size", engine->dp_size()}};
    if (engine->dp_size() > 1) {
      json ranks = json::array();
      for (const auto& r : health.ranks) {
        json rank = {{"dp_rank", r.rank}, {"status", r.up ? "ok" : "failed"}};
        if (!r.up) rank["error"] = r.error;
        ranks.push_back(std::move(rank));
      }
      body["ranks"] = std::move(ranks);
    }
    res.status = health.status == "failed" ? 503 : 200;
    res.set_content(to_json_text(body), "application/json");
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    engine::DpGroup* engine = engine_.load();
    if (engine == nullptr) {
      res.status = 503;
      res.set_content("# loading\n", "text/plain");
      return;
    }
    res.set_content(engine->render_metrics(), "text/plain; version=0.0.4");
  });
  // Unknown routes and methods: OpenAI-style 404 JSON.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string message = res.status == 413   ? "request body too large"
                                : res.status == 404 ? fmt::format("no route for {} {}", req.method, req.path)
                                                    : fmt::format("{} {} failed with HTTP status {}", req.method,
                                                                  req.path, res.status);
    res.set_content(to_json_text(ApiError(res.status, "invalid_request_error", "", message).to_json()), "application/json");
  });
}

}  // namespace spindle::server
