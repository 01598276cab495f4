// A context runs a model: preallocated run buffers and a thread pool, and forward(), which
// appends any number of new tokens to a KV cache in one pass and returns their logits, and
// forward_batch(), which does the same for several sequences (each its own cache) in one pass.
// The prefix already in a cache is never recomputed and never dropped.
// Threads: a Context (its buffers and thread pool) belongs to one thread at a time; give each
// thread its own. Contexts of one shared Model run in parallel and give the same bits as alone.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "rewind/device.h"
#include "rewind/kernels/simd.h"
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
    // weights (other weight types keep rewind's order). A token's logits then depend on
    // its pass size, as in llama.cpp; set max_batch >= 512 to pass prompts whole as its default
    // ubatch does.
    LlamaCpp,
};

struct ContextOptions {
    int n_threads = 1;       // >= 1; the calling thread is one of them
    int64_t max_batch = 256; // tokens per internal pass (>= 1); longer inputs run in chunks.
                             // Clamped to the model's context length (no pass can be longer).
    Numerics numerics = Numerics::Exact;
    // Optional: a pool to share with other contexts of this process (target and draft), so two
    // spinning pools never fight over the cores. n_threads is then taken from pool->size().
    // Contexts sharing a pool must not run forward() at the same time from different threads
    // (a second concurrent caller would run its work serially on its own thread).
    std::shared_ptr<ThreadPool> pool{};
    // Where forward() runs. Cuda: weights are uploaded once (F32, F16, BF16, Q8_0), the KV cache
    // is mirrored in device memory (the KvCache stays the authority: every pass copies its new
    // rows back, so truncate/fork/save/load/import/export behave as on the CPU), and the kernels
    // keep Exact's promise among themselves: a token's logits are the same bits whatever the
    // number of tokens in its pass (they differ from the CPU's within rounding). Numerics::LlamaCpp
    // and n_threads do not apply there.
    Device device{};
    // The highest SIMD level the CPU kernels of this context may use (rewind/kernels/simd.h):
    // every kernel call of a pass (matrix products of every weight type, activation quantization,
    // attention, SwiGLU) runs the best body this level allows, so a machine can time a pass as a
    // CPU without its higher instruction sets would run it. Per context: two contexts of one
    // process (target and draft) may use different levels. With Numerics::Exact every level gives
    // the same bits for quantized weights (Q8_0 repacked, Q4_0 .. Q6_K); F32/F16/BF16 weights and
    // Q8_0 in the file's layout still sum in each level's own order (README: SIMD levels). At any
    // one level a token's logits never depend on the pass size or thread count. Weight layouts
    // repacked at load serve every level. Ignored by the CUDA device.
    SimdLevel simd = detect_simd();
};

// Which rows get logits: every new token (verification), the last one (prompt, decode), or none
// (pure prefill: the cache is filled, no output head is run and an empty span is returned).
enum class Logits { All, Last, None };

// One sequence of a batched pass (Context::forward_batch): new tokens to run on top of its own
// cache (a chain, or a token tree when parents is given: see Context::forward_tree), which rows
// get logits, and (filled by the call) those logits.
struct BatchItem {
    KvCache* cache = nullptr;
    std::span<const TokenId> tokens;
    Logits which = Logits::All;
    std::span<const float> logits; // out: as forward() returns them for this sequence alone
    std::span<const int32_t> parents{}; // empty (a chain) or one per token, as forward_tree's
};
class CpuBackend;  // runtime/src/cpu_backend.h
class CudaBackend; // runtime/src/cuda_backend.h

class Context {
public:
    // Sizes every run buffer once, attention's scratch for caches of up to min(the model's
    // context length, kDefaultKvCapacity) positions; forward() and forward_batch() allocate
    // nothing, except the first time one meets a longer KV cache: the scratch then grows to that
    // cache's capacity, once, before anything else changes (a file claiming a context of 2^31
    // positions costs nothing until such a cache exists). Throws rwd::Error (argument) on a
    // null model, n_threads or max_batch < 1, or an unknown Numerics or SimdLevel value;
    // (unsupported) for a SIMD level this CPU lacks (naming it and the CPU's best), when
    // opts.device cannot run here (rewind/device.h: require_device), or for the CUDA device with
    // Numerics::LlamaCpp or a weight type it lacks; (capacity) when device memory runs out.
    Context(std::shared_ptr<const Model> model, ContextOptions opts = {});
    ~Context();

    const Model& model() const { return *model_; }
    std::shared_ptr<const Model> model_ptr() const { return model_; }
    const ContextOptions& options() const { return opts_; }

    // Runs tokens at positions cache.size() .. cache.size()+n-1 with causal attention over the
    // cached prefix and themselves, appends their K/V, and returns logits: [n, n_vocab] for
    // Logits::All, [1, n_vocab] (the last token) for Logits::Last, empty for Logits::None. The
    // span stays valid until the next call. Throws rwd::Error, the cache unchanged, if tokens
    // is empty, an id is outside the vocabulary or `which` is no Logits value (argument), the
    // cache would overflow its capacity or Logits::All is asked for more than max_batch tokens
    // (capacity), or the cache belongs to another model (state).
    // Row i's logits are bit-identical however the tokens were split across calls and whatever
    // the thread count (the kernels' fixed reduction order); with Numerics::LlamaCpp only the
    // thread count leaves them unchanged.
    std::span<const float> forward(KvCache& cache, std::span<const TokenId> tokens,
                                   Logits which = Logits::All);

    // Verifies a token tree in one pass. Token i follows token parents[i] (in [-1, i), so parents
    // come first; -1: it follows the cached prefix): it sits at position cache.size() + depth(i)
    // (depth 0 for a -1 parent) and attends to the cached prefix and its own ancestors only,
    // never to its siblings or their subtrees. Its K/V go to slot cache.size() + i, and the
    // cache's size grows by tokens.size(): keep one root-to-node path with KvCache::keep_path
    // (the rows of a path already carry their final positions). Returns [n, n_vocab] logits
    // (Logits::All), each row bit-identical to the same token's row in forward() over its path
    // alone (parents -1, 0, 1, ... is a chain: forward() exactly). Throws rwd::Error, the cache
    // unchanged, as forward() does, and if parents has another size or a parent outside
    // [-1, i) (argument), tokens.size() > max_batch (capacity: a tree is one pass), or the
    // context uses Numerics::LlamaCpp or a CUDA device (unsupported).
    std::span<const float> forward_tree(KvCache& cache, std::span<const TokenId> tokens,
                                        std::span<const int32_t> parents);

    // Runs every item's tokens in one pass: each at positions item.cache->size() .. onward, with
    // causal attention over its own cache only, and each weight matrix applied once to the rows
    // of all items. Items may have different cache lengths and token counts. Fills each
    // item.logits as forward(*item.cache, item.tokens, item.which) would return them (the spans
    // stay valid until the next call) and commits each cache's new length.
    // Batch invariance: with Numerics::Exact an item's logits and cache contents are
    // bit-identical to running it alone, whatever the other items, their order and the thread
    // count (every kernel computes a row independently of the other rows in its call).
    // Items with parents are token trees (forward_tree's rules and results).
    // Throws rwd::Error, before any cache or counter changes: argument (no items, a null cache,
    // an item with no tokens, an id outside the vocabulary, an unknown Logits value, parents
    // that forward_tree refuses), unsupported (a tree where forward_tree refuses one), state (a
    // cache of another model, the same cache in two items), capacity (an item overflowing its
    // cache, more than max_batch tokens in all: the batch is one pass, never split).
    // Allocates nothing (but see the constructor: a cache longer than any before).
    void forward_batch(std::span<BatchItem> items);

    // Tokens run through forward() and forward_batch() so far (tests use it to prove a prefix was reused).
    uint64_t tokens_processed() const { return tokens_processed_; }
    // Mixture-of-experts models: how many experts the last forward, forward_tree or forward_batch
    // call read, summed over layers (each expert counts once per layer and internal pass, however
    // many of the pass's tokens chose it); divide by n_layer for experts per layer. 0 for a model
    // without experts, before any call, and on a CUDA device.
    int64_t experts_read() const;

private:
    void check_tree_support(const char* fn) const;

    std::shared_ptr<const Model> model_;
    ContextOptions opts_;
    std::unique_ptr<CpuBackend> cpu_;   // runs the forward graph on the CPU (unset for a CUDA device)
    std::unique_ptr<CudaBackend> cuda_; // set when opts_.device is a CUDA device
    uint64_t tokens_processed_ = 0;
};

} // namespace rwd
