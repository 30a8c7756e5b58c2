// A stage of a request's stream between the output processor and the client: every event of the
// request passes through its transformers, in list order, before RequestStream::push. A tool-call
// or reasoning parser is one: it moves text out of RequestOutput::text into another field
// (reasoning_text), or holds text back until it knows where the text belongs.
//
// Contract: events arrive in order; the last has `finished` set (an end, an abort or an error),
// and after it nothing may stay held: a transformer releases what it holds into that event.
// Tokens, logprobs and counts are the engine's and are never changed.
#pragma once

#include "engine/request_stream.h"

namespace spindle::engine {

class StreamTransformer {
 public:
  virtual ~StreamTransformer() = default;
  virtual void transform(RequestOutput& out) = 0;
};

}  // namespace spindle::engine
