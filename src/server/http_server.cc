#include "server/http_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <ctime>

#include "engine/engine.h"
#include "server/completion_handler.h"
#include "util/error.h"

namespace spindle::server {

using nlohmann::json;

namespace {

void reply_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(e.to_json().dump(), "application/json");
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options) : options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
  // httplib rejects larger bodies itself (413 without a body); ours gives the JSON error below it.
  http_->set_payload_max_length(options_.max_body_bytes * 2);
  const int threads = options_.num_http_threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_read_timeout(60, 0);
  http_->set_write_timeout(60, 0);
  install_routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::set_engine(engine::Engine* engine) { engine_.store(engine); }

int HttpServer::bind() {
  int port = options_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(options_.host);
  } else if (!http_->bind_to_port(options_.host, port)) {
    port = -1;
  }
  SPINDLE_CHECK(port > 0, "cannot listen on {}:{} (address in use or not available)", options_.host, options_.port);
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
        engine::Engine* engine = engine_.load();
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

  auto generation = [this](bool chat) {
    return [this, chat](engine::Engine& engine, const httplib::Request& req, httplib::Response& res) {
      auto request = std::make_shared<GenerationRequest>(chat ? parse_chat_request(req.body, options_.max_body_bytes)
                                                              : parse_completion_request(req.body, options_.max_body_bytes));
      auto submitted = std::make_shared<Submitted>(submit_request(engine, *request));
      if (!request->stream) {
        res.set_content(complete(engine, *request, *submitted).dump(), "application/json");
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [&engine, request, submitted](size_t, httplib::DataSink& sink) {
            stream_completion(engine, *request, *submitted,
                              [&sink](const std::string& chunk) { return sink.is_writable() && sink.write(chunk.data(), chunk.size()); });
            sink.done();
            return true;
          },
          [submitted](bool success) {
            if (!success) submitted->stream->cancel();
          });
    };
  };

  http_->Post("/v1/completions", guarded(generation(false)));
  http_->Post("/v1/chat/completions", guarded(generation(true)));
  http_->Get("/v1/models", guarded([](engine::Engine& engine, const httplib::Request&, httplib::Response& res) {
    json model = {{"id", engine.model_name()}, {"object", "model"}, {"created", static_cast<int64_t>(std::time(nullptr))},
                  {"owned_by", "spindle"}, {"max_model_len", engine.max_model_len()}};
    res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(), "application/json");
  }));
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool ready = engine_.load() != nullptr;
    res.status = ready ? 200 : 503;
    res.set_content(json{{"status", ready ? "ok" : "loading"}}.dump(), "application/json");
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    engine::Engine* engine = engine_.load();
    if (engine == nullptr) {
      res.status = 503;
      res.set_content("# loading\n", "text/plain");
      return;
    }
    res.set_content(engine->metrics().render(), "text/plain; version=0.0.4");
  });
  // Unknown routes and methods: OpenAI-style 404 JSON.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string message = res.status == 413 ? "request body too large"
                                                   : fmt::format("no route for {} {}", req.method, req.path);
    res.set_content(ApiError(res.status, "invalid_request_error", "", message).to_json().dump(), "application/json");
  });
}

}  // namespace spindle::server
