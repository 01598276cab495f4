// A context runs a model: preallocated run buffers and a thread pool, and forward(), which
// appends any number of new tokens to a KV cache in one pass and returns their logits.
// The prefix already in the cache is never recomputed and never dropped.
// Threads: a Context (its buffers and thread pool) belongs to one thread at a time; give each
// thread its own. Contexts of one shared Model run in parallel and give the same bits as alone.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "rewind/kernels/thread_pool.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"

namespace rwd {

// How the forward pass rounds.
enum class Numerics {
    // rewind's own: fixed reduction orders, so a token's logits are the same bits whatever the
    // number of tokens in its pass and whatever the thread count. Speculative decoding needs this.
    Exact,
    // llama.cpp's CPU numerics (kernels/ggml_compat.h), to compare with llama.cpp's outputs: its
    // flash attention (with an F16 cache, passes under 64 tokens round Q and the V accumulator to
    // F16; longer passes work in F32 over 64-position tiles) and its dot-product order for F32
    // and F16 weights (other weight types keep rewind's order). A token's logits then depend on
    // its pass size, as in llama.cpp; set max_batch >= 512 to pass prompts whole as its default
    // ubatch does.
    LlamaCpp,
};

struct ContextOptions {
    int n_threads = 1;       // >= 1; the calling thread is one of them
    int64_t max_batch = 256; // tokens per internal pass (>= 1); longer inputs run in chunks.
                             // Clamped to the model's context length (no pass can be longer).
    Numerics numerics = Numerics::Exact;
};

// Which rows get logits: every new token (verification), the last one (prompt, decode), or none
// (pure prefill: the cache is filled, no output head is run and an empty span is returned).
enum class Logits { All, Last, None };

class Context {
public:
    // Sizes every run buffer once; forward() allocates nothing.
    Context(std::shared_ptr<const Model> model, ContextOptions opts = {});
    ~Context();

    const Model& model() const { return *model_; }
    std::shared_ptr<const Model> model_ptr() const { return model_; }
    const ContextOptions& options() const { return opts_; }

    // Runs tokens at positions cache.size() .. cache.size()+n-1 with causal attention over the
    // cached prefix and themselves, appends their K/V, and returns logits: [n, n_vocab] for
    // Logits::All, [1, n_vocab] (the last token) for Logits::Last, empty for Logits::None. The
    // span stays valid until the next call. Throws rwd::Error, the cache unchanged, if tokens
    // is empty, an id is outside the vocabulary, the cache would overflow its capacity, the
    // cache belongs to another model, or Logits::All is asked for more than max_batch tokens.
    // Row i's logits are bit-identical however the tokens were split across calls and whatever
    // the thread count (the kernels' fixed reduction order); with Numerics::LlamaCpp only the
    // thread count leaves them unchanged.
    std::span<const float> forward(KvCache& cache, std::span<const TokenId> tokens,
                                   Logits which = Logits::All);

    // Tokens run through forward() so far (tests use it to prove a prefix was reused).
    uint64_t tokens_processed() const { return tokens_processed_; }

private:
    struct Buffers;
    std::shared_ptr<const Model> model_;
    ContextOptions opts_;
    std::unique_ptr<ThreadPool> pool_;
    std::unique_ptr<Buffers> buf_;
    uint64_t tokens_processed_ = 0;
};

} // namespace rwd
