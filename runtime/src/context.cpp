// Context: validates forward() and forward_batch() calls and cuts them into passes of the one
// forward graph (forward_graph.h) on the CPU backend, or hands them to the CUDA backend.
// forward() commits the cache's new length only when the whole pass has succeeded.
#include "rewind/context.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "cpu_backend.h"
#include "cuda_backend.h"
#include "forward_graph.h"
#include "rewind/error.h"
#include "kv_storage.h"

namespace rwd {

Context::Context(std::shared_ptr<const Model> model, ContextOptions opts) : model_(std::move(model)), opts_(opts) {
    if (!model_) throw Error("Context: no model");
    if (opts_.n_threads < 1) throw Error("Context: n_threads must be >= 1, got " + std::to_string(opts_.n_threads));
    if (opts_.max_batch < 1) throw Error("Context: max_batch must be >= 1, got " + std::to_string(opts_.max_batch));
    if (opts_.numerics != Numerics::Exact && opts_.numerics != Numerics::LlamaCpp)
        throw Error("Context: unknown Numerics value " + std::to_string(static_cast<int>(opts_.numerics)));
    try {
        require_simd(opts_.simd);
    } catch (const Error& e) {
        throw Error(e.code(), std::string("Context: ") + e.what());
    }
    const LlamaHparams& hp = model_->hparams();
    opts_.max_batch = std::min(opts_.max_batch, hp.n_ctx_train);
    require_device(opts_.device);
    if (opts_.device.kind == DeviceKind::Cuda) {
        if (opts_.numerics != Numerics::Exact)
            throw Error(ErrorCode::unsupported, "Context: Numerics::LlamaCpp is CPU-only (device " +
                                                    device_name(opts_.device) + ")");
        if (hp.is_moe())
            throw Error(ErrorCode::unsupported, "Context: mixture-of-experts models run on the CPU only (device " +
                                                    device_name(opts_.device) + ")");
        cuda_ = std::make_unique<CudaBackend>(*model_, opts_);
        return; // no CPU pool or buffers: opts.pool and n_threads do not apply
    }
    std::shared_ptr<ThreadPool> pool = opts_.pool;
    if (pool) opts_.n_threads = pool->size();
    else pool = std::make_shared<ThreadPool>(opts_.n_threads);
    cpu_ = std::make_unique<CpuBackend>(*model_, opts_, std::move(pool));
}

Context::~Context() = default;

int64_t Context::experts_read() const { return cpu_ ? cpu_->experts_read() : 0; }

namespace {

// The checks forward() and forward_batch() share, before anything changes. `seq` < 0: forward()'s
// wording; else "sequence seq" is named. Builds a message only when it throws (no allocation).
void check_sequence(const Model& m, const KvCache& cache, std::span<const TokenId> tokens, const char* fn,
                    int64_t seq) {
    auto where = [&] {
        std::string w = std::string(fn) + ": ";
        if (seq >= 0) w += "sequence " + std::to_string(seq) + ": ";
        return w;
    };
    const auto n = static_cast<int64_t>(tokens.size());
    if (n == 0) throw Error(where() + "no tokens given");
    if (!cache.belongs_to(m))
        throw Error(ErrorCode::state, where() + "the KV cache belongs to another model (architecture '" +
                                          cache.identity().architecture + "', " +
                                          std::to_string(cache.identity().n_layer) + " layers), not " + m.path());
    const int64_t n_vocab = m.n_vocab();
    for (int64_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            throw Error(where() + "token " + std::to_string(i) + " has id " + std::to_string(tokens[i]) +
                        ", outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
    }
}

void check_fits(const KvCache& cache, int64_t n, const char* fn, int64_t seq) {
    const int64_t n0 = cache.size();
    if (n > cache.capacity() - n0)
        throw Error(ErrorCode::capacity, std::string(fn) + ": " +
                                             (seq >= 0 ? "sequence " + std::to_string(seq) + ": " : std::string()) +
                                             std::to_string(n) + " tokens after " + std::to_string(n0) +
                                             " cached ones exceed the KV cache capacity " +
                                             std::to_string(cache.capacity()));
}

// A token tree's parents: one per token, each in [-1, i).
void check_parents(std::span<const int32_t> parents, int64_t n, const char* fn, int64_t seq) {
    auto where = [&] {
        return std::string(fn) + ": " + (seq >= 0 ? "sequence " + std::to_string(seq) + ": " : std::string());
    };
    if (static_cast<int64_t>(parents.size()) != n)
        throw Error(where() + std::to_string(parents.size()) + " parents for " + std::to_string(n) + " tokens");
    for (int64_t i = 0; i < n; ++i)
        if (parents[static_cast<size_t>(i)] < -1 || parents[static_cast<size_t>(i)] >= i)
            throw Error(where() + "token " + std::to_string(i) + " has parent " +
                        std::to_string(parents[static_cast<size_t>(i)]) + " (must be in [-1, " + std::to_string(i) +
                        "): parents come first)");
}

} // namespace

void Context::check_tree_support(const char* fn) const {
    if (cuda_)
        throw Error(ErrorCode::unsupported, std::string(fn) + ": token trees run on the CPU only (device " +
                                                device_name(opts_.device) + ")");
    if (opts_.numerics != Numerics::Exact)
        throw Error(ErrorCode::unsupported, std::string(fn) + ": token trees need Numerics::Exact");
}

std::span<const float> Context::forward_tree(KvCache& cache, std::span<const TokenId> tokens,
                                             std::span<const int32_t> parents) {
    const auto n = static_cast<int64_t>(tokens.size());
    check_sequence(*model_, cache, tokens, "forward_tree", -1);
    check_parents(parents, n, "forward_tree", -1);
    check_tree_support("forward_tree");
    if (n > opts_.max_batch)
        throw Error(ErrorCode::capacity, "forward_tree: a tree of " + std::to_string(n) +
                                             " tokens exceeds max_batch " + std::to_string(opts_.max_batch) +
                                             " (a tree is one pass)");
    check_fits(cache, n, "forward_tree", -1);
    cpu_->fit_attention(cache.capacity());
    cpu_->reset_experts_read();
    PassSegment seg{&cache, tokens.data(), n, cache.size(), 0, Logits::All};
    seg.parents = parents.data();
    run_forward(*cpu_, &seg, 1, n);
    KvStorage::commit(cache, seg.pos0 + n);
    tokens_processed_ += static_cast<uint64_t>(n);
    return {cpu_->logits(), static_cast<size_t>(seg.out_n * model_->n_vocab())};
}

std::span<const float> Context::forward(KvCache& cache, std::span<const TokenId> tokens, Logits which) {
    const auto n = static_cast<int64_t>(tokens.size());
    // Validate everything before the cache (or anything else) is touched.
    check_sequence(*model_, cache, tokens, "forward", -1);
    if (which != Logits::All && which != Logits::Last && which != Logits::None)
        throw Error("forward: unknown Logits value " + std::to_string(static_cast<int>(which)));
    if (which == Logits::All && n > opts_.max_batch)
        throw Error(ErrorCode::capacity, "forward: logits for all of " + std::to_string(n) + " tokens exceed max_batch " +
                    std::to_string(opts_.max_batch) + " (ask for Logits::Last or split the call)");
    check_fits(cache, n, "forward", -1);

    if (cuda_) {
        const std::span<const float> out = cuda_->forward(cache, tokens, which, 0);
        tokens_processed_ += static_cast<uint64_t>(n);
        return out;
    }
    cpu_->fit_attention(cache.capacity());
    cpu_->reset_experts_read();

    // Chunks of at most max_batch tokens, each one internal pass; logits from the final one.
    const int64_t n0 = cache.size();
    PassSegment seg;
    for (int64_t done = 0; done < n;) {
        const int64_t nt = std::min(opts_.max_batch, n - done);
        seg = PassSegment{&cache, tokens.data() + done, nt, n0 + done, 0, done + nt == n ? which : Logits::None};
        run_forward(*cpu_, &seg, 1, nt);
        done += nt;
    }
    KvStorage::commit(cache, n0 + n);
    tokens_processed_ += static_cast<uint64_t>(n);
    return {cpu_->logits(), static_cast<size_t>(seg.out_n * model_->n_vocab())};
}

void Context::forward_batch(std::span<BatchItem> items) {
    const auto n_items = static_cast<int64_t>(items.size());
    if (n_items == 0) throw Error("forward_batch: no sequences given");
    int64_t total = 0;
    for (int64_t i = 0; i < n_items; ++i) {
        const BatchItem& it = items[static_cast<size_t>(i)];
        if (!it.cache) throw Error("forward_batch: sequence " + std::to_string(i) + ": no KV cache (null)");
        check_sequence(*model_, *it.cache, it.tokens, "forward_batch", i);
        if (it.which != Logits::All && it.which != Logits::Last && it.which != Logits::None)
            throw Error("forward_batch: sequence " + std::to_string(i) + ": unknown Logits value " +
                        std::to_string(static_cast<int>(it.which)));
        check_fits(*it.cache, static_cast<int64_t>(it.tokens.size()), "forward_batch", i);
        if (!it.parents.empty()) {
            check_parents(it.parents, static_cast<int64_t>(it.tokens.size()), "forward_batch", i);
            check_tree_support("forward_batch");
        }
        for (int64_t j = 0; j < i; ++j) {
            if (items[static_cast<size_t>(j)].cache == it.cache)
                throw Error(ErrorCode::state, "forward_batch: sequences " + std::to_string(j) + " and " +
                                                  std::to_string(i) + " share one KV cache");
        }
        total += static_cast<int64_t>(it.tokens.size());
    }
    if (total > opts_.max_batch)
        throw Error(ErrorCode::capacity, "forward_batch: " + std::to_string(total) + " tokens in all exceed max_batch " +
                                             std::to_string(opts_.max_batch) + " (a batch is one pass; run fewer sequences or tokens)");

    if (cuda_) {
        // One device pass per sequence (validated above; only a device fault can fail now, and
        // then the sequences before it stay committed). Each token's logits are the bits a
        // batched pass would give (query-count invariance); each sequence's rows go to their
        // own place in the output, as the CPU's batched pass lays them out.
        int64_t row = 0;
        for (BatchItem& it : items) {
            it.logits = cuda_->forward(*it.cache, it.tokens, it.which, row);
            row += static_cast<int64_t>(it.tokens.size());
        }
        tokens_processed_ += static_cast<uint64_t>(total);
        return;
    }

    for (const BatchItem& it : items) cpu_->fit_attention(it.cache->capacity());
    cpu_->reset_experts_read();
    // Every item has >= 1 token and total <= max_batch, so the preallocated segments suffice.
    PassSegment* segs = cpu_->segments();
    int64_t off = 0;
    for (int64_t i = 0; i < n_items; ++i) {
        BatchItem& it = items[static_cast<size_t>(i)];
        const auto n = static_cast<int64_t>(it.tokens.size());
        segs[i] = PassSegment{it.cache, it.tokens.data(), n, it.cache->size(), off, it.which};
        segs[i].parents = it.parents.empty() ? nullptr : it.parents.data();
        off += n;
    }
    run_forward(*cpu_, segs, n_items, total);
    const int64_t V = model_->n_vocab();
    for (int64_t i = 0; i < n_items; ++i) {
        BatchItem& it = items[static_cast<size_t>(i)];
        const PassSegment& s = segs[i];
        KvStorage::commit(*it.cache, s.pos0 + s.n);
        it.logits = {cpu_->logits() + s.out_row * V, static_cast<size_t>(s.out_n * V)};
    }
    tokens_processed_ += static_cast<uint64_t>(total);
}

} // namespace rwd
