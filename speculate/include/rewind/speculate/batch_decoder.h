// Continuous batching with per-request speculation: many requests decode together, each with its
// own KV cache, sampler and (optional) guess source. Each step() is one batched forward pass
// (Context::forward_batch) that verifies every active request's guesses at once; each request's
// cache then rolls back to its own accepted prefix. Requests are admitted and retired between
// passes; a new request's prompt runs in chunks inside the same passes (mixed prefill + decode), so
// admitting one never stalls the others for a whole prompt. A request's tokens equal its own plain,
// unbatched generate_plain output (batch and query-count invariance plus exact verification),
// whoever else is in the batch and however its prompt was chunked.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/kv_cache.h"
#include "rewind/sampler.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/guess_source.h"

namespace rwd::speculate {

class PassCostModel; // speculate/src/pass_cost_model.h

struct BatchRequest {
    std::vector<TokenId> prompt;           // >= 1 token (BOS included if the model wants one)
    GenerateOptions generate;              // max tokens, sampler, stop strings: as generate_plain
    std::unique_ptr<GuessSource> source;   // null: plain decoding, one token per pass
    // Null: none. Otherwise this request's own constraint (a grammar, a schema), used from its
    // present state: every token is decided among those it allows and guesses it forbids are
    // cut, so the tokens equal constrained generate_plain's (exact mode).
    std::unique_ptr<TokenConstraint> constraint;
    int k = 8;                             // guesses per pass, [1, SpeculativeOptions::kMaxK]
    KPolicy k_policy = KPolicy::Fixed;
    // Exact: the tokens equal generate_plain's. Rejection: speculative sampling (a draft source
    // then proposes with its distributions), as SpeculativeDecoder does alone; the tokens drawn
    // depend on how many guesses each pass verifies, so they equal the decoder's alone while no
    // guess of the request is trimmed (pass_tokens, max_batch, cost_model).
    VerifyMode verify = VerifyMode::Exact;
    // Optional: a cache (of the decoder's model and BatchOptions::kv_type) whose first
    // prefix_tokens.size() positions hold the K/V of prefix_tokens, e.g. a finished request's
    // (BatchResult::cache). On admission its longest run that matches the prompt from position 0
    // (all but the last prompt token at most) is copied instead of computed, when it is longer
    // than what share_prefixes finds: the same bits. Read only inside submit(); the caller keeps
    // it. A prefix of another model or KvType is ignored (nothing copied).
    const KvCache* prefix_cache = nullptr;
    std::span<const TokenId> prefix_tokens;
};

struct BatchOptions {
    // Total bytes of KV cache all active requests may hold (0: no limit). A request's cache is
    // allocated on admission for min(model context, prompt + max_tokens) positions.
    uint64_t kv_budget_bytes = 0;
    KvType kv_type = KvType::F32;
    // Prompt tokens per pass, over all requests still prefilling (oldest first; >= 1). A prompt
    // longer than this takes several passes; each pass then costs about a chunk's prefill more.
    int64_t prefill_chunk = 64;
    // Tokens per pass (pending tokens + guesses; prompt chunks come on top): 0 = the context's
    // max_batch. When the guesses of all requests exceed it, guesses are dropped, least likely to
    // stand first (each request's own acceptance so far), so a pass stays where it is cheap.
    // Every request always keeps its own next token. Changes speed only, never a token.
    int64_t pass_tokens = 0;
    // On admission, copy the longest prompt prefix that an active request's cache already holds
    // (same tokens from position 0) instead of computing it again: the same bits, since a
    // position's K/V depend only on the tokens up to it.
    bool share_prefixes = true;
    // Keep a guess only while it pays for its row: the decoder fits a pass's time as a + b * rows
    // (its own decoding passes, recent ones weighted most) and keeps the next most likely guess
    // only if its chance to stand exceeds expected tokens * b / (a + b * rows) of the pass so
    // far, so with many requests (or a compute-bound model) unlikely guesses are dropped. Speed
    // only: never changes a token. Off: every guess within pass_tokens is verified.
    bool cost_model = false;
    // Hand each retired request's KV cache back in BatchResult::cache (with the tokens it holds),
    // so that a caller can keep it for later requests sharing its prefix (a server's prefix
    // cache). Off: the cache is freed on retirement.
    bool keep_caches = false;
    // The cost model's pass time, when both are > 0: a = fixed_seconds, b = row_seconds, instead
    // of the fit from this decoder's own passes. Makes its choices reproducible (tests, or a
    // cost curve measured once: `rewind bench --cost-curve`). Both 0: fitted. Speed only.
    double pass_fixed_seconds = 0;
    double pass_row_seconds = 0;
};

// The decoding passes (no prompt chunk) that carried `requests` requests: how many, their wall
// time (propose, verify, judge) and the tokens they emitted. Tells the throughput at a given
// concurrency apart from the tail of a run, where fewer requests are left.
struct DecodeLevel {
    int64_t passes = 0;
    double seconds = 0;
    int64_t tokens = 0;
    int64_t rows = 0; // tokens verified (pending tokens + guesses)
};

// A retired request.
struct BatchResult {
    uint64_t id = 0;
    std::vector<TokenId> tokens;           // generated ids (prompt excluded), as generate_plain
    std::vector<TokenLogprob> logprobs;    // [tokens] when generate.logprobs.enabled, else empty
    StopReason stop = StopReason::MaxTokens; // Cancelled: cancel() ended it
    bool failed = false;                   // it ended with its own error (below); tokens so far kept
    ErrorCode error_code = ErrorCode::state;
    std::string error;
    DecodeStats stats;                     // passes this request took part in, guesses, ...
    int64_t prompt_tokens_shared = 0;      // prompt positions copied from another request's cache
                                           // or from BatchRequest::prefix_cache
    // keep_caches: the request's cache, its first cache_tokens.size() positions holding the K/V of
    // cache_tokens (the prompt and generated tokens that were run); null otherwise.
    std::shared_ptr<KvCache> cache;
    std::vector<TokenId> cache_tokens;
    double queue_to_first_token_seconds = 0; // admission to its first token
    double latency_seconds = 0;            // admission to retirement
};

class BatchDecoder {
public:
    // Keeps a reference to ctx (it must outlive the decoder). Throws rwd::Error (state) if ctx
    // does not use Numerics::Exact (batch invariance needs it).
    BatchDecoder(Context& ctx, BatchOptions opts = {});
    ~BatchDecoder();
    BatchDecoder(const BatchDecoder&) = delete;
    BatchDecoder& operator=(const BatchDecoder&) = delete;

    // Admits a request: checks it, allocates its cache within the budget, copies the longest
    // prompt prefix an active request already holds (share_prefixes) and resets its source; the
    // rest of its prompt runs in the next passes (prefill_chunk tokens at a time). Returns its id
    // (ids count up from 1). Throws rwd::Error, admitting nothing and changing no other request:
    // argument (empty prompt, an id outside the vocabulary, k out of range, bad sampler options,
    // negative max_tokens, an empty stop string), capacity (a prompt longer than the model's
    // context; the KV budget would be exceeded; as many requests active as the context's
    // max_batch, since each needs a row in every pass). A request with nothing to generate
    // (max_tokens 0, or a prompt filling the context) retires at the next step().
    uint64_t submit(BatchRequest req);

    // Ends request `id` before the next pass (its tokens so far are kept, stop = Cancelled).
    // Returns false if no active request has that id or it has already finished otherwise.
    bool cancel(uint64_t id);

    // One pass over every active request: the next prompt chunk of those still prefilling (all
    // but the last prompt token, which is verified with the first guesses in the request's
    // first decoding pass, as SpeculativeDecoder does), and for the others propose, verify
    // all together in one forward_batch, judge, roll each cache back. Returns the requests
    // retired by this step (finished, cancelled or failed), in admission order. A request whose
    // source throws, or whose pass is refused, retires failed with its own error; the others go
    // on untouched. Guesses are trimmed to pass_tokens (and max_batch), so the pass always fits.
    std::vector<BatchResult> step();

    // What active request `id` has so far: its generated tokens and stats (stop, error and the
    // timings of its end are not final until step() retires it), or null if no active request
    // has that id. Valid until the next submit(), step() or the decoder's end. For callers that
    // show a request's progress (the C API's per-request query).
    const BatchResult* progress(uint64_t id) const;

    size_t active() const { return active_.size(); }
    bool idle() const { return active_.empty(); }
    uint64_t kv_bytes_in_use() const { return kv_in_use_; }
    // The bytes of cache a request of `positions` positions takes.
    uint64_t kv_bytes_for(int64_t positions) const;
    // Forward passes run by step() so far.
    int64_t passes() const { return passes_; }
    // Decoding alone: the passes that carried no prompt chunk, their wall time (propose,
    // verify, judge) and the tokens they emitted, so that decoding throughput can be told
    // apart from prompt processing.
    int64_t decode_passes() const { return decode_passes_; }
    double decode_seconds() const { return decode_seconds_; }
    int64_t decode_tokens() const { return decode_tokens_; }
    // The same, by the number of requests in the pass: [0, max_batch].
    std::span<const DecodeLevel> decode_levels() const { return decode_levels_; }

private:
    struct Request;
    void judge(Request& r, std::span<const float> logits);
    void prefill_chunks(int64_t decoding, int64_t& prefill_rows);
    void propose(Request& r, int64_t guess_budget);
    void run_pass(size_t first_decode, std::chrono::steady_clock::time_point t_start);
    std::vector<BatchResult> retire();
    void trim_guesses(int64_t budget, int64_t rows, size_t first);
    void fail(Request& r, ErrorCode code, const std::string& what);

    Context& ctx_;
    BatchOptions opts_;
    std::vector<std::unique_ptr<Request>> active_; // admission order
    std::vector<BatchItem> items_;
    std::vector<Request*> in_pass_;
    uint64_t next_id_ = 1;
    uint64_t kv_in_use_ = 0;
    int64_t passes_ = 0;
    int64_t decode_passes_ = 0, decode_tokens_ = 0;
    double decode_seconds_ = 0;
    std::vector<DecodeLevel> decode_levels_; // [max_batch + 1], sized once
    int64_t emitted_this_pass_ = 0;
    std::unique_ptr<PassCostModel> cost_; // the pass time, for BatchOptions::cost_model
};

} // namespace rwd::speculate
