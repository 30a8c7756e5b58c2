// Every field a request body may carry, as data: each is honoured, accepted as a documented no-op,
// or refused with a 400 naming it. A field in no list is a 400 too ("Unrecognized request argument
// supplied: foo", as OpenAI answers), so nothing a client sends is silently ignored.
//
// The lists cover the pinned openai client's CompletionCreateParamsBase and
// ChatCompletionCreateParamsBase, EmbeddingCreateParams and ResponseCreateParamsBase (tests/node),
// their message, input-item and text-part fields, stream_options,
// and the vLLM / SGLang / llama.cpp extensions Spindle reads or refuses by name.
// tests/server/request_fields_test.cc fails when the pinned client gains a field in no list.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace spindle::server {

enum class FieldUse : uint8_t {
  kHonoured,  // parsed and acted on (each has a test of its effect)
  kNoOp,      // accepted and documented to change nothing (a test shows the same output)
  kRefused,   // a 400 naming it, unless null or its `accepted` value (the value that turns it off)
};

// Where a field sits; a bit mask so that one row can serve both endpoints.
enum FieldScope : uint16_t {
  kCompletionBody = 1,    // POST /v1/completions, top level
  kChatBody = 2,          // POST /v1/chat/completions, top level
  kMessage = 4,           // an element of messages
  kContentPart = 8,       // an element of a message's content array
  kStreamOptions = 16,    // stream_options (both endpoints)
  kEmbeddingsBody = 32,   // POST /v1/embeddings, top level
  kResponsesBody = 64,    // POST /v1/responses, top level
  kResponsesItem = 128,   // an element of a /v1/responses input (message, function_call, ... items)
  kResponsesPart = 256,   // an element of an input message item's content array
  kBothBodies = kCompletionBody | kChatBody,
};

struct RequestField {
  uint16_t scopes;        // FieldScope bits
  std::string_view name;
  FieldUse use;
  // JSON text. kRefused: the one value let through because it asks for nothing (`"tools": []`);
  // kNoOp: the only value accepted (`"store": false`); "" for none (refused) or any (no-op).
  std::string_view accepted;
  // kHonoured: what it does; kNoOp: why nothing changes; kRefused: why, the 400's message.
  std::string_view note;
};

// The lists, in a stable order (the table in request_fields.cc).
std::span<const RequestField> request_fields();

// The row of `name` at `scope` (one FieldScope bit), or null when the name is in no list there.
const RequestField* find_request_field(FieldScope scope, std::string_view name);

std::string_view field_use_name(FieldUse use);  // "honoured", "no-op", "refused"

// Checks every key of `object` (a JSON object found at `scope`) against the lists; `path` prefixes
// the reported param ("" at the top level, "messages[2]." inside a message). Throws ApiError 400
// whose param is path + key: for a key in no list ("Unrecognized request argument supplied"), for a
// refused key whose value is neither null nor its accepted value, and for a no-op key restricted to
// one value that holds another. Honoured keys and their values are left to the parser.
void check_request_fields(FieldScope scope, const nlohmann::json& object, const std::string& path);

}  // namespace spindle::server
