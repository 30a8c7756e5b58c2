// Speculative decoding, part 2: verification. A speculating sequence ran its last token and its
// k draft tokens d_1..d_k through the target in one step and got k + 1 logit rows: row i is the
// target's distribution of the token after d_i (row 0: after the last context token). What it
// emits is lossless by construction:
//   - q a point mass (greedy requests, the n-gram proposer, a greedy draft): row i is sampled
//     exactly as non-speculative decoding would sample it (same processing, same generator),
//     and d_{i+1} is accepted when the draw equals it; the first draw that differs is emitted in
//     its place and ends the sequence's step. With q = delta(d) this IS the standard rule
//     (accept with min(1, p(d)/q(d)) = p(d); the residual max(0, p - q) is p without d), and
//     every emitted token is the draw non-speculative decoding would have made, so with a seed the
//     output is identical to non-speculative decoding, token for token.
//   - q a distribution (a draft model sampling): accept d with probability min(1, p(d)/q(d)),
//     else emit a draw from the normalised max(0, p - q) and stop; p and q are both processed
//     (penalties, bias, temperature, top-k, top-p, min-p) with the request's parameters.
// After all k drafts are accepted, row k gives one more token (the bonus), sampled as usual.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/sampler.h"
#include "engine/speculative/proposer.h"

namespace spindle::engine::speculative {

struct Verified {
  std::vector<SampledToken> tokens;  // to append, in order: the accepted drafts, then one more
  int num_accepted_drafts = 0;       // tokens.size() - 1
};

// A constrained request's grammar mask of verify row i (the token after drafts d_1..d_i), asked
// for rows in increasing order, only for rows the verify reaches; an empty span: unconstrained.
using RowMask = std::function<std::span<const uint32_t>(size_t row)>;

// Host logits: rows [(k + 1) * vocab] (modified: scratch). prompt and output: the request's
// tokens before this step (penalties see output + the drafts before each row). mask_of (may be
// empty): each row's grammar mask, applied before anything else (as Sampler::sample applies it),
// so p is the constrained distribution: a draft the grammar refuses has p = 0 and is rejected.
Verified verify_on_host(Sampler& sampler, std::span<float> rows, int vocab, std::span<const TokenId> prompt,
                        std::span<const TokenId> output, const DraftProposal& draft, const RowMask& mask_of = {});

// Rows already sampled (a device sampler drew row i with the context output + d_1..d_i and the
// counter output.size() + i): the point-mass rule, comparing each draw with its draft token.
Verified verify_sampled(std::span<const SampledToken> drawn, std::span<const TokenId> draft);

// The rejection rule alone, for one draft token d ~ q against the target's processed p:
// u < p(d) / q(d) accepts (returns d); otherwise a draw from the normalised max(0, p - q) with
// the sampler's generator. Exposed for the statistical test.
struct RuleResult {
  TokenId token = 0;
  bool accepted = false;
};
RuleResult rejection_rule(Sampler& sampler, std::span<const TokenProb> p, std::span<const TokenProb> q, TokenId d);

}  // namespace spindle::engine::speculative
