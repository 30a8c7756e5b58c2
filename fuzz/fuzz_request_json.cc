// libFuzzer target: an HTTP request body -> parse_completion_request and parse_chat_request (the
// server's whole validation of client JSON), then the error body a refusal would send.
// Contract under test: any body is either a GenerationRequest whose fields are in range, or an
// ApiError with a 4xx status; nothing else may escape (an nlohmann exception would be a 500 the
// client could provoke at will), and rendering the error must not throw.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "server/openai_protocol.h"

namespace {

void check(const spindle::server::GenerationRequest& r) {
  const auto& s = r.sampling;
  if (r.n < 1 || r.n > spindle::server::kMaxChoices) std::abort();
  if (!(s.temperature >= 0 && s.temperature <= 2)) std::abort();
  if (!(s.top_p > 0 && s.top_p <= 1)) std::abort();
  if (r.chat && r.messages.empty()) std::abort();
  if (!r.chat && r.prompt.empty() && r.prompt_token_ids.empty()) {
    // an empty prompt string is allowed here (the handler refuses it after tokenizing)
  }
  for (auto id : r.prompt_token_ids) {
    if (id < 0) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (const bool chat : {false, true}) {
    try {
      const auto r = chat ? spindle::server::parse_chat_request(body, 1 << 20)
                          : spindle::server::parse_completion_request(body, 1 << 20);
      check(r);
    } catch (const spindle::server::ApiError& e) {
      if (e.status() < 400 || e.status() > 499) std::abort();
      (void)spindle::server::to_json_text(e.to_json());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "unexpected exception (%s): %s\n", chat ? "chat" : "completion", e.what());
      std::abort();
    }
  }
  return 0;
}
