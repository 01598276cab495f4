// Context: the llama forward pass over any number of new tokens on top of a KV cache prefix.
// All run buffers are sized in the constructor; forward() validates, then computes without
// allocating, and commits the cache's new length only when the whole pass has succeeded.
#include "rewind/context.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "rewind/error.h"
#include "rewind/kernels/attention.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kernels/ggml_compat.h"
#include "rewind/kernels/matmul.h"
#include "rewind/kernels/ops.h"

namespace rwd {

namespace {

// Scratch floats the attention kernel of `numerics` needs for shape s.
int64_t attention_scratch(Numerics numerics, const AttentionShape& s, int n_threads) {
    return numerics == Numerics::Exact ? attention_scratch_floats(s, n_threads)
                                       : attention_ggml_scratch_floats(s, n_threads);
}

} // namespace

// B = max_batch (tokens per pass), E = n_embd, KV = n_embd_kv, F = n_ff, V = n_vocab.
struct Context::Buffers {
    std::vector<float> x;      // [B, E]  residual stream
    std::vector<float> xn;     // [B, E]  normed input of a sub-block
    std::vector<float> q;      // [B, E]  queries (n_head * head_dim)
    std::vector<float> k, v;   // [B, KV] new keys / values before they enter the cache
    std::vector<float> attn;   // [B, E]  attention output
    std::vector<float> proj;   // [B, E]  wo / ffn_down output, added to x
    std::vector<float> gate;   // [B, F]  ffn_gate output, then swiglu(gate, up)
    std::vector<float> up;     // [B, F]  ffn_up output
    std::vector<float> logits; // [B, V]
    std::vector<int32_t> pos;  // [B]     absolute positions
    std::vector<float> att_scratch;            // attention_scratch(numerics, longest pass, threads)
    std::vector<std::byte> mm_scratch;         // max matmul_scratch_bytes over the model's weights
};

Context::Context(std::shared_ptr<const Model> model, ContextOptions opts) : model_(std::move(model)), opts_(opts) {
    if (!model_) throw Error("Context: no model");
    if (opts_.n_threads < 1) throw Error("Context: n_threads must be >= 1, got " + std::to_string(opts_.n_threads));
    if (opts_.max_batch < 1) throw Error("Context: max_batch must be >= 1, got " + std::to_string(opts_.max_batch));
    if (opts_.numerics != Numerics::Exact && opts_.numerics != Numerics::LlamaCpp)
        throw Error("Context: unknown Numerics value " + std::to_string(static_cast<int>(opts_.numerics)));
    const LlamaHparams& hp = model_->hparams();
    opts_.max_batch = std::min(opts_.max_batch, hp.n_ctx_train);
    pool_ = std::make_unique<ThreadPool>(opts_.n_threads);

    const auto B = static_cast<size_t>(opts_.max_batch);
    const auto E = static_cast<size_t>(hp.n_embd);
    const auto KV = static_cast<size_t>(hp.n_embd_kv());
    const auto F = static_cast<size_t>(hp.n_ff);
    const auto V = static_cast<size_t>(model_->n_vocab());
    buf_ = std::make_unique<Buffers>();
    Buffers& b = *buf_;
    b.x.resize(B * E);
    b.xn.resize(B * E);
    b.q.resize(B * E);
    b.k.resize(B * KV);
    b.v.resize(B * KV);
    b.attn.resize(B * E);
    b.proj.resize(B * E);
    b.gate.resize(B * F);
    b.up.resize(B * F);
    b.logits.resize(B * V);
    b.pos.resize(B);

    // The longest attention call: max_batch tokens ending at the last position of the context.
    AttentionShape s{opts_.max_batch, hp.n_ctx_train - opts_.max_batch, hp.n_head, hp.n_head_kv, hp.head_dim()};
    b.att_scratch.resize(static_cast<size_t>(attention_scratch(opts_.numerics, s, opts_.n_threads)));

    size_t mm = 0;
    auto fit = [&](const MatrixView& w) { mm = std::max(mm, matmul_scratch_bytes(w.type, opts_.max_batch, w.cols)); };
    fit(model_->output);
    for (const Model::Layer& l : model_->layers) {
        for (const MatrixView* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) fit(*w);
    }
    b.mm_scratch.resize(mm);
}

Context::~Context() = default;

std::span<const float> Context::forward(KvCache& cache, std::span<const TokenId> tokens, Logits which) {
    const Model& m = *model_;
    const LlamaHparams& hp = m.hparams();
    const auto n = static_cast<int64_t>(tokens.size());

    // Validate everything before the cache (or anything else) is touched.
    if (n == 0) throw Error("forward: no tokens given");
    if (!cache.belongs_to(m))
        throw Error(ErrorCode::state, "forward: the KV cache belongs to another model (architecture '" + cache.identity().architecture +
                    "', " + std::to_string(cache.identity().n_layer) + " layers), not " + m.path());
    const int64_t n_vocab = m.n_vocab();
    for (int64_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            throw Error("forward: token " + std::to_string(i) + " has id " + std::to_string(tokens[i]) +
                        ", outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
    }
    if (which == Logits::All && n > opts_.max_batch)
        throw Error(ErrorCode::capacity, "forward: logits for all of " + std::to_string(n) + " tokens exceed max_batch " +
                    std::to_string(opts_.max_batch) + " (ask for Logits::Last or split the call)");
    const int64_t n0 = cache.size();
    if (n > cache.capacity() - n0)
        throw Error(ErrorCode::capacity, "forward: " + std::to_string(n) + " tokens after " + std::to_string(n0) +
                    " cached ones exceed the KV cache capacity " + std::to_string(cache.capacity()));

    Buffers& b = *buf_;
    ThreadPool* pool = pool_.get();
    const int64_t E = hp.n_embd, KV = hp.n_embd_kv(), F = hp.n_ff, hd = hp.head_dim();
    const float eps = hp.rms_eps;
    const std::span<std::byte> mm(b.mm_scratch);
    const bool exact = opts_.numerics == Numerics::Exact;
    // y = x · Wᵀ for n rows, in rewind's order or (Numerics::LlamaCpp, F32 weights) ggml's.
    // LlamaCpp numerics keep Q8_0 in the file's layout: its per-lane block sums are ggml's order,
    // closer to llama.cpp's logits than the packed bodies' (the original pages fault back in).
    auto matmul = [&](const MatrixView& w, const float* x, int64_t rows, float* y) {
        if (!exact && matmul_ggml_supports(w.type)) {
            matmul_ggml(w, x, rows, y, pool);
        } else if (!exact && w.packed) {
            MatrixView plain = w;
            plain.packed = nullptr;
            rwd::matmul(plain, x, rows, y, mm, pool);
        } else {
            rwd::matmul(w, x, rows, y, mm, pool);
        }
    };
    const size_t kv_elem = cache.dtype() == DType::F32 ? 4 : 2;
    const size_t tok_row_bytes = dtype_row_bytes(m.tok_embd.type, E);
    const auto n_layer = static_cast<int64_t>(m.layers.size());

    int64_t out_rows = 0;
    for (int64_t done = 0; done < n;) {
        const int64_t nt = std::min(opts_.max_batch, n - done);
        const int64_t pos0 = n0 + done;
        const bool final_chunk = done + nt == n;
        // Rows whose output matters after the last layer's K/V write: all (Logits::All), the
        // last token of the final chunk (Last), or none (None, or any earlier chunk).
        const Logits mode = final_chunk ? which : Logits::None;
        const int64_t r0 = mode == Logits::All ? 0 : nt - 1;
        const int64_t nr = mode == Logits::All ? nt : (mode == Logits::Last ? 1 : 0);

        for (int64_t t = 0; t < nt; ++t) {
            b.pos[t] = static_cast<int32_t>(pos0 + t);
            const auto* row = static_cast<const std::byte*>(m.tok_embd.data) +
                              static_cast<size_t>(tokens[done + t]) * tok_row_bytes;
            dequantize_row(m.tok_embd.type, row, E, b.x.data() + t * E);
        }

        for (int64_t il = 0; il < n_layer; ++il) {
            const Model::Layer& L = m.layers[il];
            // Attention block: x -> norm -> q, k, v -> rope -> cache -> attention -> wo -> + x.
            rms_norm(b.x.data(), L.attn_norm, nt, E, eps, b.xn.data());
            matmul(L.wq, b.xn.data(), nt, b.q.data());
            matmul(L.wk, b.xn.data(), nt, b.k.data());
            matmul(L.wv, b.xn.data(), nt, b.v.data());
            rope_norm(b.q.data(), b.pos.data(), nt, hp.n_head, hd, hp.n_rot, hp.rope_freq_base);
            rope_norm(b.k.data(), b.pos.data(), nt, hp.n_head_kv, hd, hp.n_rot, hp.rope_freq_base);

            // Write this chunk's K/V at positions pos0.. (beyond cache.size(): not yet committed).
            auto* kc = static_cast<std::byte*>(cache.k_layer(il)) + static_cast<size_t>(pos0 * KV) * kv_elem;
            auto* vc = static_cast<std::byte*>(cache.v_layer(il)) + static_cast<size_t>(pos0 * KV) * kv_elem;
            if (cache.dtype() == DType::F32) {
                std::memcpy(kc, b.k.data(), static_cast<size_t>(nt * KV) * 4);
                std::memcpy(vc, b.v.data(), static_cast<size_t>(nt * KV) * 4);
            } else {
                auto* kh = reinterpret_cast<uint16_t*>(kc);
                auto* vh = reinterpret_cast<uint16_t*>(vc);
                for (int64_t i = 0; i < nt * KV; ++i) {
                    kh[i] = fp32_to_fp16(b.k[static_cast<size_t>(i)]);
                    vh[i] = fp32_to_fp16(b.v[static_cast<size_t>(i)]);
                }
            }

            // In the last layer only rows [r0, r0 + nr) feed anything further.
            const bool last_layer = il == n_layer - 1;
            const int64_t a0 = last_layer ? r0 : 0;
            const int64_t an = last_layer ? nr : nt;
            if (an == 0) continue;
            const AttentionShape s{an, pos0 + a0, hp.n_head, hp.n_head_kv, hd};
            if (attention_scratch(opts_.numerics, s, pool->size()) > static_cast<int64_t>(b.att_scratch.size()))
                throw Error(ErrorCode::shape, "forward: attention scratch too small (kernel contract changed?)");
            if (exact) {
                attention(s, b.q.data() + a0 * E, cache.k_layer(il), cache.v_layer(il), cache.dtype(),
                          b.attn.data() + a0 * E, b.att_scratch.data(), pool);
            } else {
                // ggml picks its body from the rows of the whole pass (llama.cpp drops unused rows
                // only after the last layer's attention), not from the rows computed here.
                attention_ggml(s, ggml_fa_path(nt, hd), b.q.data() + a0 * E, cache.k_layer(il), cache.v_layer(il),
                               cache.dtype(), b.attn.data() + a0 * E, b.att_scratch.data(), pool);
            }
            matmul(L.wo, b.attn.data() + a0 * E, an, b.proj.data() + a0 * E);
            add_inplace(b.x.data() + a0 * E, b.proj.data() + a0 * E, an * E);

            // Feed-forward block: x -> norm -> gate, up -> swiglu -> down -> + x.
            rms_norm(b.x.data() + a0 * E, L.ffn_norm, an, E, eps, b.xn.data() + a0 * E);
            matmul(L.ffn_gate, b.xn.data() + a0 * E, an, b.gate.data() + a0 * F);
            matmul(L.ffn_up, b.xn.data() + a0 * E, an, b.up.data() + a0 * F);
            swiglu(b.gate.data() + a0 * F, b.up.data() + a0 * F, an * F, b.gate.data() + a0 * F);
            matmul(L.ffn_down, b.gate.data() + a0 * F, an, b.proj.data() + a0 * E);
            add_inplace(b.x.data() + a0 * E, b.proj.data() + a0 * E, an * E);
        }

        if (nr > 0) {
            rms_norm(b.x.data() + r0 * E, m.output_norm, nr, E, eps, b.xn.data());
            matmul(m.output, b.xn.data(), nr, b.logits.data());
            out_rows = nr;
        }
        done += nt;
    }

    cache.commit(n0 + n);
    tokens_processed_ += static_cast<uint64_t>(n);
    return {b.logits.data(), static_cast<size_t>(out_rows * n_vocab)};
}

} // namespace rwd
