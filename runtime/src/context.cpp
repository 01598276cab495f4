// Context: the one forward pass of every supported architecture (rewind/arch.h says which steps a
// model takes: biases, Q/K norms, fused QKV / gate+up, rope mode, GELU, post-norms, sliding window)
// over any number of new tokens on top of a KV cache prefix.
// All run buffers are sized in the constructor; forward() validates, then computes without
// allocating, and commits the cache's new length only when the whole pass has succeeded.
#include "rewind/context.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_backend.h"
#include "rewind/error.h"
#include "rewind/kernels/attention.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kernels/ggml_compat.h"
#include "rewind/kernels/kq_packed.h"
#include "rewind/kernels/matmul.h"
#include "rewind/kernels/ops.h"
#include "rewind/kernels/q8_packed.h"

namespace rwd {

namespace {

// Scratch floats the attention kernel of `numerics` needs for shape s.
int64_t attention_scratch(Numerics numerics, const AttentionShape& s, int n_threads) {
    return numerics == Numerics::Exact ? attention_scratch_floats(s, n_threads)
                                       : attention_ggml_scratch_floats(s, n_threads);
}
// Scratch floats enough for every call of at most s.n_tokens tokens ending by s.pos0 + s.n_tokens.
int64_t attention_scratch_upto(Numerics numerics, const AttentionShape& s, int n_threads) {
    // ggml's slot does not depend on the positions.
    return numerics == Numerics::Exact ? attention_scratch_floats_upto(s, n_threads)
                                       : attention_ggml_scratch_floats(s, n_threads);
}

// Allocator whose value-less construct() default-initialises, so that resize() of a vector of
// floats reserves memory without writing it: the pages of rows a pass never reaches (most of the
// [max_batch, n_vocab] logits when decoding: 128 MiB of a Llama 3 vocabulary at max_batch 256)
// then cost neither start-up time nor resident memory. Every such buffer is written before it is
// read (each op writes the rows of the pass it runs).
template <class T>
struct Uninit : std::allocator<T> {
    using value_type = T;
    Uninit() = default;
    template <class U>
    Uninit(const Uninit<U>&) noexcept {}
    template <class U>
    struct rebind {
        using other = Uninit<U>;
    };
    template <class U>
    void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
        ::new (static_cast<void*>(p)) U;
    }
    template <class U, class... A>
    void construct(U* p, A&&... a) {
        ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
    }
};

template <class T>
using RunBuffer = std::vector<T, Uninit<T>>;

} // namespace

// One sequence's share of a pass: rows [off, off + n) of the run buffers are its tokens at
// positions pos0 .. pos0 + n - 1 of its cache. After run_pass, its logits are rows
// [out_row, out_row + out_n) of the logits buffer.
struct Context::Segment {
    KvCache* cache = nullptr;
    const TokenId* tokens = nullptr;
    int64_t n = 0, pos0 = 0, off = 0;
    Logits mode = Logits::None;
    int64_t out_row = 0, out_n = 0;
};

// B = max_batch (tokens per pass), E = n_embd, Q = n_embd_q, KV = n_embd_kv, F = n_ff, V = n_vocab.
// The activation buffers are reserved, not written (RunBuffer); the kernels' own scratch stays
// zero-filled (small, and its padding contract is the kernels' business).
struct Context::Buffers {
    RunBuffer<float> x;      // [B, E]  residual stream
    RunBuffer<float> xn;     // [B, E]  normed input of a sub-block
    RunBuffer<float> q;      // [B, Q]  queries (n_head * head_dim)
    RunBuffer<float> k, v;   // [B, KV] new keys / values before they enter the cache
    RunBuffer<float> qkv;    // [B, Q + 2 KV] fused attn_qkv output (empty unless fused)
    RunBuffer<float> attn;   // [B, Q]  attention output
    RunBuffer<float> proj;   // [B, E]  wo / ffn_down output, added to x
    RunBuffer<float> gate;   // [B, F]  ffn_gate output, then act(gate) * up
    RunBuffer<float> up;     // [B, F]  ffn_up output ([B, 2F]: [gate; up] when fused)
    RunBuffer<float> logits; // [B, V]
    std::vector<int32_t> pos;  // [B]     absolute positions
    std::vector<Segment> segs; // [B]     forward_batch's sequences (each >= 1 token)
    std::vector<float> att_scratch;            // attention_scratch_upto(numerics, att_capacity's calls, threads)
    int64_t att_capacity = 0;                  // the longest cache att_scratch serves every call of
    std::vector<std::byte> mm_scratch;         // max matmul_scratch_bytes over the model's weights
};

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
        cuda_ = std::make_unique<CudaBackend>(*model_, opts_);
        return; // no CPU pool or buffers: opts.pool and n_threads do not apply
    }
    if (opts_.pool) {
        pool_ = opts_.pool;
        opts_.n_threads = pool_->size();
    } else {
        pool_ = std::make_shared<ThreadPool>(opts_.n_threads);
    }

    const auto B = static_cast<size_t>(opts_.max_batch);
    const auto E = static_cast<size_t>(hp.n_embd);
    const auto KV = static_cast<size_t>(hp.n_embd_kv());
    const auto Q = static_cast<size_t>(hp.n_embd_q());
    const auto F = static_cast<size_t>(hp.n_ff);
    const auto V = static_cast<size_t>(model_->n_vocab());
    bool fused_qkv = false, fused_up = false;
    for (const Model::Layer& l : model_->layers) {
        fused_qkv = fused_qkv || l.wqkv.data != nullptr;
        fused_up = fused_up || l.ffn_gate.data == nullptr;
    }
    buf_ = std::make_unique<Buffers>();
    Buffers& b = *buf_;
    b.x.resize(B * E);
    b.xn.resize(B * E);
    b.q.resize(B * Q);
    b.k.resize(B * KV);
    b.v.resize(B * KV);
    if (fused_qkv) b.qkv.resize(B * (Q + 2 * KV));
    b.attn.resize(B * Q);
    b.proj.resize(B * E);
    b.gate.resize(B * F);
    b.up.resize(B * F * (fused_up ? 2 : 1));
    b.logits.resize(B * V);
    b.pos.resize(B);
    b.segs.resize(B);

    // Attention for the default cache length; a longer cache grows it (fit_attention).
    fit_attention(std::min<int64_t>(hp.n_ctx_train, kDefaultKvCapacity));

    size_t mm = 0;
    auto fit = [&](const MatrixView& w) { mm = std::max(mm, matmul_scratch_bytes(w.type, opts_.max_batch, w.cols)); };
    fit(model_->output);
    for (const Model::Layer& l : model_->layers) {
        for (const MatrixView* w : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down})
            if (w->data) fit(*w);
    }
    b.mm_scratch.resize(mm);
}

Context::~Context() = default;

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

} // namespace

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
    fit_attention(cache.capacity());

    // Chunks of at most max_batch tokens, each one internal pass; logits from the final one.
    const int64_t n0 = cache.size();
    Segment seg;
    for (int64_t done = 0; done < n;) {
        const int64_t nt = std::min(opts_.max_batch, n - done);
        seg = Segment{&cache, tokens.data() + done, nt, n0 + done, 0, done + nt == n ? which : Logits::None};
        run_pass(&seg, 1, nt);
        done += nt;
    }
    cache.commit(n0 + n);
    tokens_processed_ += static_cast<uint64_t>(n);
    return {buf_->logits.data(), static_cast<size_t>(seg.out_n * model_->n_vocab())};
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

    for (const BatchItem& it : items) fit_attention(it.cache->capacity());
    // Every item has >= 1 token and total <= max_batch, so the preallocated segments suffice.
    Segment* segs = buf_->segs.data();
    int64_t off = 0;
    for (int64_t i = 0; i < n_items; ++i) {
        BatchItem& it = items[static_cast<size_t>(i)];
        const auto n = static_cast<int64_t>(it.tokens.size());
        segs[i] = Segment{it.cache, it.tokens.data(), n, it.cache->size(), off, it.which};
        off += n;
    }
    run_pass(segs, n_items, total);
    const int64_t V = model_->n_vocab();
    for (int64_t i = 0; i < n_items; ++i) {
        BatchItem& it = items[static_cast<size_t>(i)];
        const Segment& s = segs[i];
        it.cache->commit(s.pos0 + s.n);
        it.logits = {buf_->logits.data() + s.out_row * V, static_cast<size_t>(s.out_n * V)};
    }
    tokens_processed_ += static_cast<uint64_t>(total);
}

void Context::fit_attention(int64_t capacity) {
    // Every attention call of such a cache: up to max_batch tokens ending by its last position
    // (run_pass still checks each call against the scratch). A shorter cache's calls are among
    // them, so once fitted a pass costs one comparison here.
    if (capacity <= buf_->att_capacity) return;
    const LlamaHparams& hp = model_->hparams();
    const int64_t n = std::min(opts_.max_batch, capacity);
    const AttentionShape s{n, capacity - n, hp.n_head, hp.n_head_kv, hp.head_dim()};
    const auto need = static_cast<size_t>(attention_scratch_upto(opts_.numerics, s, pool_->size()));
    if (need > buf_->att_scratch.size()) buf_->att_scratch.resize(need);
    buf_->att_capacity = capacity;
}

void Context::run_pass(Segment* segs, int64_t n_segs, int64_t nt) {
    const Model& m = *model_;
    const LlamaHparams& hp = m.hparams();
    const int64_t n_vocab = m.n_vocab();
    Buffers& b = *buf_;
    ThreadPool* pool = pool_.get();
    const ArchInfo& arch = *hp.arch;
    const int64_t E = hp.n_embd, KV = hp.n_embd_kv(), Q = hp.n_embd_q(), F = hp.n_ff, hd = hp.head_dim();
    const float eps = hp.rms_eps;
    const std::span<std::byte> mm(b.mm_scratch);
    const bool exact = opts_.numerics == Numerics::Exact;
    const SimdLevel level = opts_.simd; // every kernel call below runs at this level
    // y = x · Wᵀ for n rows, in rewind's order or (Numerics::LlamaCpp, F32 weights) ggml's.
    // LlamaCpp numerics keep Q8_0 in the file's layout: its per-lane block sums are ggml's order,
    // closer to llama.cpp's logits than the packed bodies' (the original pages fault back in).
    auto matmul = [&](const MatrixView& w, const float* x, int64_t rows, float* y) {
        if (!exact && matmul_ggml_supports(w.type)) {
            matmul_ggml(w, x, rows, y, pool, level);
        } else if (!exact && w.packed) {
            MatrixView plain = w;
            plain.packed = nullptr;
            rwd::matmul(plain, x, rows, y, mm, pool, level);
        } else if (w.packed && kq_repackable(w.type)) {
            // Packed K-quant: the same quantization and product matmul makes, the tokens'
            // quantization split over the pool instead of on this thread.
            matmul_kq_packed(w, quantize_kq_input(x, rows, w.cols, mm, pool, level), y, pool, level);
        } else {
            rwd::matmul(w, x, rows, y, mm, pool, level);
        }
    };
    // out = act(gate) * up over one row of n_ff: SiLU or GELU, with LlamaCpp numerics as ggml-cpu
    // computes them (its vector expf, its F16 GELU table).
    auto ffn_act = [&](const float* gate, const float* up, int64_t count, float* out) {
        if (arch.act == FfnAct::Silu) {
            if (exact) swiglu(gate, up, count, out, level);
            else swiglu_ggml(gate, up, count, out);
        } else {
            if (exact) geglu(gate, up, count, out);
            else geglu_ggml(gate, up, count, out);
        }
    };
    // Products of several matrices over one input (Q, K, V; gate, up): packed Q8_0 matrices (the
    // widened Q4_0..Q5_1 ones among them: the same Q8_0 activations as their file layout's), or
    // packed K-quant ones (Q4_K, Q5_K and Q6_K alike: all read Q8_K blocks), share a single quantization
    // of x (the same one each would make alone, so the same bits).
    struct Out {
        const MatrixView* w;
        float* y;
    };
    auto matmul_shared = [&](std::initializer_list<Out> outs, const float* x, int64_t rows) {
        const int64_t cols = outs.begin()->w->cols;
        bool shared_q8 = exact && outs.size() <= kQ8PackedManyMax, shared_kq = exact;
        for (const Out& o : outs) {
            shared_q8 = shared_q8 && o.w->packed && q8_packable(o.w->type) && o.w->cols == cols;
            shared_kq = shared_kq && o.w->packed && kq_repackable(o.w->type) && o.w->cols == cols;
        }
        if (shared_q8) {
            const Q8Input xq = quantize_input(x, rows, cols, mm, level);
            // One pool job for all of them: fewer wake-ups and joins per layer.
            Q8PackedOut q8_outs[kQ8PackedManyMax];
            size_t n_out = 0;
            for (const Out& o : outs) q8_outs[n_out++] = Q8PackedOut{o.w, o.y};
            matmul_q8_packed_many(std::span<const Q8PackedOut>(q8_outs, n_out), xq, pool, q8_kernel_for(level));
        } else if (shared_kq) {
            const KqInput xq = quantize_kq_input(x, rows, cols, mm, pool, level);
            for (const Out& o : outs) matmul_kq_packed(*o.w, xq, o.y, pool, level);
        } else {
            for (const Out& o : outs) matmul(*o.w, x, rows, o.y);
        }
    };
    const size_t tok_row_bytes = dtype_row_bytes(m.tok_embd.type, E);
    const auto n_layer = static_cast<int64_t>(m.layers.size());
    // ggml_scale(inpL, sqrtf(n_embd)) (gemma3): the input embeddings only, never the tied head.
    const float embd_scale = std::sqrt(float(E));

    // The rows of segment s whose output matters after the last layer's K/V write: all
    // (Logits::All), its last token (Last) or none (None), as [first, first + count) of its own.
    auto out_rows = [](const Segment& s, int64_t& first, int64_t& count) {
        first = s.mode == Logits::All ? 0 : s.n - 1;
        count = s.mode == Logits::All ? s.n : (s.mode == Logits::Last ? 1 : 0);
    };

    for (int64_t is = 0; is < n_segs; ++is) {
        const Segment& sg = segs[is];
        for (int64_t t = 0; t < sg.n; ++t) {
            const int64_t r = sg.off + t;
            b.pos[r] = static_cast<int32_t>(sg.pos0 + t);
            const auto* row = static_cast<const std::byte*>(m.tok_embd.data) +
                              static_cast<size_t>(sg.tokens[t]) * tok_row_bytes;
            dequantize_row(m.tok_embd.type, row, E, b.x.data() + r * E);
        }
    }
    if (arch.embd_scaled) scale_inplace(b.x.data(), nt * E, embd_scale);

    // Rows that go on through wo and the FFN: all nt, except in the last layer (below).
    int64_t an = nt;
    for (int64_t il = 0; il < n_layer; ++il) {
        const Model::Layer& L = m.layers[il];
        const bool swa = hp.is_swa_layer(il);
        // Attention block: x -> norm -> q, k, v (+ bias) -> (q/k norm) -> rope -> cache ->
        // attention -> wo -> (post-norm) -> + x.
        rms_norm(b.x.data(), L.attn_norm, nt, E, eps, b.xn.data());
        if (L.wqkv.data) {
            matmul(L.wqkv, b.xn.data(), nt, b.qkv.data());
            for (int64_t t = 0; t < nt; ++t) {
                const float* r = b.qkv.data() + t * (Q + 2 * KV);
                std::memcpy(b.q.data() + t * Q, r, static_cast<size_t>(Q) * 4);
                std::memcpy(b.k.data() + t * KV, r + Q, static_cast<size_t>(KV) * 4);
                std::memcpy(b.v.data() + t * KV, r + Q + KV, static_cast<size_t>(KV) * 4);
            }
        } else {
            matmul_shared({{&L.wq, b.q.data()}, {&L.wk, b.k.data()}, {&L.wv, b.v.data()}}, b.xn.data(), nt);
        }
        if (L.bq) add_bias(b.q.data(), L.bq, nt, Q);
        if (L.bk) add_bias(b.k.data(), L.bk, nt, KV);
        if (L.bv) add_bias(b.v.data(), L.bv, nt, KV);
        // Per-head RMSNorm: every head is a row of head_dim.
        if (L.q_norm) rms_norm(b.q.data(), L.q_norm, nt * hp.n_head, hd, eps, b.q.data());
        if (L.k_norm) rms_norm(b.k.data(), L.k_norm, nt * hp.n_head_kv, hd, eps, b.k.data());
        RopeParams rp;
        rp.mode = arch.rope;
        rp.n_rot = hp.n_rot;
        rp.freq_base = swa ? hp.rope_freq_base_swa : hp.rope_freq_base;
        rp.freq_scale = swa ? 1.0f : hp.rope_freq_scale;
        rp.freq_factors = m.rope_freqs;
        rp.fused = !exact;
        // Every row carries its own position, so one call serves all segments.
        rope(b.q.data(), b.pos.data(), nt, hp.n_head, hd, rp);
        rope(b.k.data(), b.pos.data(), nt, hp.n_head_kv, hd, rp);
        if (arch.q_prescaled) scale_inplace(b.q.data(), nt * Q, hp.attn_scale);

        // In the last layer only the output rows feed anything further: each segment attends
        // for those alone, and they (with their residual rows) are packed to the front, in
        // segment order, so wo, the FFN and the head run on them alone.
        const bool last_layer = il == n_layer - 1;
        int64_t packed = 0;
        for (int64_t is = 0; is < n_segs; ++is) {
            Segment& sg = segs[is];
            KvCache& cache = *sg.cache;
            // Write this segment's K/V at positions pos0.. (beyond cache.size(): not yet committed).
            const size_t kv_elem = dtype_row_bytes(cache.dtype(), 1);
            auto* kc = static_cast<std::byte*>(cache.k_layer(il)) + static_cast<size_t>(sg.pos0 * KV) * kv_elem;
            auto* vc = static_cast<std::byte*>(cache.v_layer(il)) + static_cast<size_t>(sg.pos0 * KV) * kv_elem;
            const float* ks = b.k.data() + sg.off * KV;
            const float* vs = b.v.data() + sg.off * KV;
            if (cache.dtype() == DType::F32) {
                std::memcpy(kc, ks, static_cast<size_t>(sg.n * KV) * 4);
                std::memcpy(vc, vs, static_cast<size_t>(sg.n * KV) * 4);
            } else {
                auto* kh = reinterpret_cast<uint16_t*>(kc);
                auto* vh = reinterpret_cast<uint16_t*>(vc);
                for (int64_t i = 0; i < sg.n * KV; ++i) {
                    kh[i] = fp32_to_fp16(ks[i]);
                    vh[i] = fp32_to_fp16(vs[i]);
                }
            }

            int64_t a0 = 0, sn = sg.n;
            if (last_layer) out_rows(sg, a0, sn);
            // Output rows: [dst, dst + sn) of attn (and of x in the last layer).
            const int64_t dst = last_layer ? packed : sg.off;
            if (last_layer) {
                sg.out_row = packed;
                sg.out_n = sn;
                packed += sn;
            }
            if (sn == 0) continue;
            AttentionShape s{sn, sg.pos0 + a0, hp.n_head, hp.n_head_kv, hd};
            s.window = swa ? hp.n_swa : 0;
            s.scale = arch.q_prescaled ? 1.0f : 0.0f; // 0: 1/sqrt(head_dim)
            if (attention_scratch(opts_.numerics, s, pool->size()) > static_cast<int64_t>(b.att_scratch.size()))
                throw Error(ErrorCode::shape, "forward: attention scratch too small (kernel contract changed?)");
            const float* q = b.q.data() + (sg.off + a0) * Q;
            if (exact) {
                attention(s, q, cache.k_layer(il), cache.v_layer(il), cache.dtype(), b.attn.data() + dst * Q,
                          b.att_scratch.data(), pool, level);
            } else {
                // ggml picks its body from the rows of the whole pass (llama.cpp drops unused rows
                // only after the last layer's attention), not from the rows computed here.
                attention_ggml(s, ggml_fa_path(sg.n, hd), q, cache.k_layer(il), cache.v_layer(il), cache.dtype(),
                               b.attn.data() + dst * Q, b.att_scratch.data(), pool);
            }
            // dst <= sg.off + a0, and earlier segments' rows lie below: a forward move is safe.
            if (last_layer && dst != sg.off + a0)
                std::memmove(b.x.data() + dst * E, b.x.data() + (sg.off + a0) * E, static_cast<size_t>(sn * E) * 4);
        }
        if (last_layer) an = packed;
        if (an == 0) continue;

        float* proj = b.proj.data();
        matmul(L.wo, b.attn.data(), an, proj);
        if (L.post_attn_norm) rms_norm(proj, L.post_attn_norm, an, E, eps, proj);
        add_inplace(b.x.data(), proj, an * E);

        // Feed-forward block: x -> norm -> gate, up -> act(gate) * up -> down -> (post-norm) -> + x.
        rms_norm(b.x.data(), L.ffn_norm, an, E, eps, b.xn.data());
        float* gate = b.gate.data();
        if (L.ffn_gate.data) {
            float* up = b.up.data();
            matmul_shared({{&L.ffn_gate, gate}, {&L.ffn_up, up}}, b.xn.data(), an);
            for (int64_t t = 0; t < an; ++t) ffn_act(gate + t * F, up + t * F, F, gate + t * F);
        } else {
            // Fused [gate; up] rows of 2F (phi3): each token's halves.
            float* gu = b.up.data();
            matmul(L.ffn_up, b.xn.data(), an, gu);
            for (int64_t t = 0; t < an; ++t) ffn_act(gu + t * 2 * F, gu + t * 2 * F + F, F, gate + t * F);
        }
        matmul(L.ffn_down, gate, an, proj);
        if (L.post_ffn_norm) rms_norm(proj, L.post_ffn_norm, an, E, eps, proj);
        add_inplace(b.x.data(), proj, an * E);
    }

    if (an > 0) {
        rms_norm(b.x.data(), m.output_norm, an, E, eps, b.xn.data());
        matmul(m.output, b.xn.data(), an, b.logits.data());
        if (hp.final_logit_softcap > 0.0f) {
            // ggml: scale by 1/c, tanh, scale by c.
            const float c = hp.final_logit_softcap;
            float* l = b.logits.data();
            const int64_t cnt = an * n_vocab;
            scale_inplace(l, cnt, 1.0f / c);
            for (int64_t i = 0; i < cnt; ++i) l[i] = std::tanh(l[i]);
            scale_inplace(l, cnt, c);
        }
    }
}

} // namespace rwd
