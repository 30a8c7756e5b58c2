// Runs one (chat) completion against the engine and renders OpenAI responses: a whole JSON body,
// or server-sent-event chunks as the engine produces them.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/request_stream.h"
#include "server/openai_protocol.h"

namespace spindle::engine {
class DpGroup;
}

namespace spindle::server {

// Validates a parsed request against the engine (model name, context length, vocabulary),
// tokenizes it and submits it. Throws ApiError (400, 404, 503).
struct Submitted {
  std::shared_ptr<engine::RequestStream> stream;
  int num_prompt_tokens = 0;
  std::string prompt_text;  // for echo
};
Submitted submit_request(engine::DpGroup& engine, GenerationRequest& request);

// Collects the whole output and returns the response body. About every 200 ms `client_alive` is
// asked (when given); false cancels the request and returns null.
nlohmann::json complete(engine::DpGroup& engine, const GenerationRequest& request, Submitted& submitted,
                        const std::function<bool()>& client_alive = {});

// Streams: calls write(chunk) for every "data: ...\n\n" event; a false return means the client
// is gone, and the request is cancelled. Returns after [DONE] or cancellation.
void stream_completion(engine::DpGroup& engine, const GenerationRequest& request, Submitted& submitted,
                       const std::function<bool(const std::string&)>& write);

}  // namespace spindle::server
