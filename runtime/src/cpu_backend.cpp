// The CPU backend: forward_graph.h's ops on rewind's kernels, at the context's SIMD level, with
// its Numerics: Exact (rewind's fixed reduction orders, packed layouts, one activation
// quantization shared by the products of one input) or LlamaCpp (ggml-cpu's orders and layouts).
#include "cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "rewind/error.h"
#include "rewind/kernels/attention.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kernels/ggml_compat.h"
#include "rewind/kernels/matmul.h"
#include "rewind/kernels/moe.h"
#include "rewind/kernels/packed.h"
#include "kv_storage.h"

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

// The activation buffers are reserved, not written (RunBuffer); the kernels' own scratch stays
// zero-filled (small, and its padding contract is the kernels' business). Shapes: PassBuffers.
struct CpuBackend::Buffers {
    RunBuffer<float> x, xn, q, k, v, qkv, attn, proj, gate, up, logits;
    std::vector<int32_t> ids, pos, gather; // [B]
    std::vector<PassSegment> segs;      // [B]
    std::vector<float> att_scratch;     // attention_scratch_upto(numerics, att_capacity's calls, threads)
    int64_t att_capacity = 0;           // the longest cache att_scratch serves every call of
    std::vector<std::byte> mm_scratch;  // max matmul_scratch_bytes over the model's weights
    // Expert FFN (files with experts; else empty). NE = n_expert, K = n_expert_used, Fe = n_ff_exp.
    RunBuffer<float> router;            // [B, NE] router logits
    std::vector<int32_t> moe_ids;       // [B, K] each row's experts, by descending weight
    std::vector<float> moe_w;           // [B, K] their weights
    std::vector<int32_t> moe_off;       // [NE + 1] group_by_expert's offsets
    std::vector<int32_t> moe_pairs;     // [B * K] (row, slot) pairs grouped by expert
    RunBuffer<float> xe;                // [B, E] one expert's rows
    RunBuffer<float> ge, ue, de;        // [B * K, Fe], [B * K, Fe], [B * K, E] by moe_pairs' order
    RunBuffer<float> eo;                // [B, K, E] each (row, slot)'s expert output
    std::vector<std::byte> moe_qx;      // [B * K] rows of Q8_K blocks of width E, by moe_pairs' order
    std::vector<std::byte> moe_qg;      // kq_input_bytes(B * K, Fe): the down products' input
    struct Touched {
        Model::ExpertWeights w;
        int32_t p0 = 0, n = 0; // its pairs [p0, p0 + n) of moe_pairs
    };
    std::vector<Touched> moe_touched; // [NE] moe_experts_kq's experts of the layer, ascending
};

CpuBackend::CpuBackend(const Model& model, const ContextOptions& opts, std::shared_ptr<ThreadPool> pool)
    : m_(model), opts_(opts), pool_(std::move(pool)), buf_(std::make_unique<Buffers>()) {
    const LlamaHparams& hp = m_.hparams();
    const auto B = static_cast<size_t>(opts_.max_batch);
    const auto E = static_cast<size_t>(hp.n_embd), KV = static_cast<size_t>(hp.n_embd_kv());
    const auto Q = static_cast<size_t>(hp.n_embd_q()), F = static_cast<size_t>(hp.n_ff);
    bool fused_qkv = false, fused_up = false;
    for (const Model::Layer& l : m_.layers) {
        fused_qkv = fused_qkv || l.wqkv.data != nullptr;
        fused_up = fused_up || (l.ffn_gate.data == nullptr && !l.is_moe());
    }
    Buffers& b = *buf_;
    b.x.resize(B * E);
    b.xn.resize(B * E);
    b.q.resize(B * Q);
    b.k.resize(B * KV);
    b.v.resize(B * KV);
    if (fused_qkv) b.qkv.resize(B * (Q + 2 * KV));
    b.attn.resize(B * Q);
    b.proj.resize(B * E);
    if (!hp.is_moe()) { // an expert FFN has buffers of its own, below
        b.gate.resize(B * F);
        b.up.resize(B * F * (fused_up ? 2 : 1));
    } else {
        const auto NE = static_cast<size_t>(hp.n_expert), K = static_cast<size_t>(hp.n_expert_used);
        const auto Fe = static_cast<size_t>(hp.n_ff_exp);
        b.router.resize(B * NE);
        b.moe_ids.resize(B * K);
        b.moe_w.resize(B * K);
        b.moe_off.resize(NE + 1);
        b.moe_pairs.resize(B * K);
        b.xe.resize(B * E);
        b.ge.resize(B * K * Fe);
        b.ue.resize(B * K * Fe);
        b.de.resize(B * K * E);
        b.eo.resize(B * K * E);
        b.moe_touched.resize(NE);
        if (E % 256 == 0 && Fe % 256 == 0) { // what K-quant experts need; others never take the fused path
            b.moe_qx.resize(kq_input_bytes(static_cast<int64_t>(B * K), hp.n_embd));
            b.moe_qg.resize(kq_input_bytes(static_cast<int64_t>(B * K), hp.n_ff_exp));
        }
    }
    b.logits.resize(B * static_cast<size_t>(m_.n_vocab()));
    b.ids.resize(B);
    b.pos.resize(B);
    b.gather.resize(B);
    b.segs.resize(B);
    bufs_ = PassBuffers{b.x.data(),    b.xn.data(),   b.q.data(),    b.k.data(),    b.v.data(),
                        b.qkv.data(),  b.attn.data(), b.proj.data(), b.gate.data(), b.up.data(),
                        b.logits.data(), b.ids.data(), b.pos.data(), b.gather.data()};

    // Attention for the default cache length; a longer cache grows it (fit_attention).
    fit_attention(std::min<int64_t>(hp.n_ctx_train, kDefaultKvCapacity));

    size_t mm = 0;
    auto fit = [&](const MatrixView& w) { mm = std::max(mm, matmul_scratch_bytes(w.type, opts_.max_batch, w.cols)); };
    fit(m_.output);
    for (const Model::Layer& l : m_.layers) {
        for (const MatrixView* w : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down, &l.ffn_gate_inp})
            if (w->data) fit(*w);
        for (const std::vector<MatrixView>* ex : {&l.gate_exps, &l.up_exps, &l.down_exps})
            for (const MatrixView& w : *ex) fit(w);
    }
    b.mm_scratch.resize(mm);
}

CpuBackend::~CpuBackend() = default;

PassSegment* CpuBackend::segments() { return buf_->segs.data(); }
const float* CpuBackend::logits() const { return buf_->logits.data(); }

void CpuBackend::fit_attention(int64_t capacity) {
    // Every attention call of such a cache: up to max_batch tokens ending by its last position
    // (attention() still checks each call against the scratch). A shorter cache's calls are among
    // them, so once fitted a pass costs one comparison here.
    if (capacity <= buf_->att_capacity) return;
    const LlamaHparams& hp = m_.hparams();
    const int64_t n = std::min(opts_.max_batch, capacity);
    const AttentionShape s{n, capacity - n, hp.n_head, hp.n_head_kv, hp.head_dim()};
    const auto need = static_cast<size_t>(attention_scratch_upto(opts_.numerics, s, pool_->size()));
    if (need > buf_->att_scratch.size()) buf_->att_scratch.resize(need);
    buf_->att_capacity = capacity;
}

void CpuBackend::embed(const int32_t* ids, int64_t rows, float* x) {
    const MatrixView& te = m_.tok_embd;
    const int64_t E = m_.hparams().n_embd;
    const size_t row_bytes = dtype_row_bytes(te.type, E);
    for (int64_t r = 0; r < rows; ++r) {
        const auto* row = static_cast<const std::byte*>(te.data) + static_cast<size_t>(ids[r]) * row_bytes;
        dequantize_row(te.type, row, E, x + r * E);
    }
}

void CpuBackend::rms_norm(const float* x, const float* w, int64_t rows, int64_t cols, float eps, float* out) {
    rwd::rms_norm(x, w, rows, cols, eps, out);
}

// y = x · Wᵀ for n rows, in rewind's order or (Numerics::LlamaCpp, F32 weights) ggml's.
// LlamaCpp numerics keep Q8_0 in the file's layout: its per-lane block sums are ggml's order,
// closer to llama.cpp's logits than the packed bodies' (the original pages fault back in).
void CpuBackend::matmul(const Matrix& w, const float* x, int64_t rows, float* y) {
    const bool exact = opts_.numerics == Numerics::Exact;
    const std::span<std::byte> mm(buf_->mm_scratch);
    if (!exact && matmul_ggml_supports(w.type)) {
        matmul_ggml(w, x, rows, y, pool_.get(), opts_.simd);
    } else if (!exact && w.packed) {
        MatrixView plain = w;
        plain.packed = nullptr;
        rwd::matmul(plain, x, rows, y, mm, pool_.get(), opts_.simd);
    } else if (w.packed) {
        // The quantization and product matmul makes (a K-quant's tokens quantized over the pool).
        const PackedInput xq = quantize_packed(packed_layout(w.type), x, rows, w.cols, mm, pool_.get(), opts_.simd);
        matmul_packed(w, xq, y, pool_.get(), opts_.simd);
    } else {
        rwd::matmul(w, x, rows, y, mm, pool_.get(), opts_.simd);
    }
}

// The layout every one of outs is packed in, if they share one and their width (with Exact
// numerics, few enough for one pool job); else None.
PackedLayout CpuBackend::shared_layout(std::initializer_list<MatOut<Matrix>> outs) const {
    if (opts_.numerics != Numerics::Exact || outs.size() > kQ8PackedManyMax) return PackedLayout::None;
    const MatrixView& w0 = *outs.begin()->w;
    const PackedLayout layout = packed_layout(w0.type);
    for (const MatOut<Matrix>& o : outs)
        if (!o.w->packed || packed_layout(o.w->type) != layout || o.w->cols != w0.cols) return PackedLayout::None;
    return layout;
}

// Products of several matrices over one input (Q, K, V; gate, up): packed ones of one layout
// (Q8_0 and the widened Q4_0..Q5_1; or Q4_K, Q5_K and Q6_K, all reading Q8_K blocks) share a
// single quantization of x (the same one each would make alone, so the same bits).
void CpuBackend::matmul_many(std::initializer_list<MatOut<Matrix>> outs, const float* x, int64_t rows) {
    const PackedLayout layout = shared_layout(outs);
    if (layout == PackedLayout::None) {
        for (const MatOut<Matrix>& o : outs) matmul(*o.w, x, rows, o.y);
        return;
    }
    const int64_t cols = outs.begin()->w->cols;
    const PackedInput xq = quantize_packed(layout, x, rows, cols, buf_->mm_scratch, pool_.get(), opts_.simd);
    PackedOut packed[kQ8PackedManyMax];
    size_t n_out = 0;
    for (const MatOut<Matrix>& o : outs) packed[n_out++] = PackedOut{o.w, o.y};
    matmul_packed_many(std::span<const PackedOut>(packed, n_out), xq, pool_.get(), opts_.simd);
}

void CpuBackend::copy_cols(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t cols,
                           int64_t rows) {
    for (int64_t t = 0; t < rows; ++t)
        std::memcpy(dst + t * dst_stride, src + t * src_stride, static_cast<size_t>(cols) * 4);
}

void CpuBackend::add_bias(float* x, const float* bias, int64_t rows, int64_t cols) {
    rwd::add_bias(x, bias, rows, cols);
}

void CpuBackend::rope(float* x, const int32_t* pos, int64_t rows, int64_t heads, int64_t head_dim,
                      const RopeParams& p) {
    RopeParams rp = p;
    rp.fused = opts_.numerics != Numerics::Exact; // ggml-cpu's contracted products
    rwd::rope(x, pos, rows, heads, head_dim, rp);
}

void CpuBackend::scale(float* x, int64_t n, float s) { scale_inplace(x, n, s); }

void CpuBackend::kv_store(KvCache& cache, int64_t layer, int64_t pos0, int64_t rows, const float* k,
                          const float* v) {
    const int64_t KV = m_.hparams().n_embd_kv();
    const size_t kv_elem = dtype_row_bytes(cache.dtype(), 1);
    const size_t at = static_cast<size_t>(pos0 * KV) * kv_elem;
    auto* kc = static_cast<std::byte*>(KvStorage::k_layer(cache, layer)) + at;
    auto* vc = static_cast<std::byte*>(KvStorage::v_layer(cache, layer)) + at;
    if (cache.dtype() == DType::F32) {
        std::memcpy(kc, k, static_cast<size_t>(rows * KV) * 4);
        std::memcpy(vc, v, static_cast<size_t>(rows * KV) * 4);
        return;
    }
    auto* kh = reinterpret_cast<uint16_t*>(kc);
    auto* vh = reinterpret_cast<uint16_t*>(vc);
    for (int64_t i = 0; i < rows * KV; ++i) {
        kh[i] = fp32_to_fp16(k[i]);
        vh[i] = fp32_to_fp16(v[i]);
    }
}

void CpuBackend::attention(const AttnCall& call, const float* q, float* out) {
    const LlamaHparams& hp = m_.hparams();
    AttentionShape s{call.n, call.pos0, hp.n_head, hp.n_head_kv, hp.head_dim()};
    s.window = call.window;
    s.scale = call.scale;
    s.gather = call.gather;
    s.gather_from = call.gather_from;
    if (call.gather && opts_.numerics != Numerics::Exact) // Context refuses trees there first
        throw Error(ErrorCode::unsupported, "forward: token trees need Numerics::Exact");
    if (attention_scratch(opts_.numerics, s, pool_->size()) > static_cast<int64_t>(buf_->att_scratch.size()))
        throw Error(ErrorCode::shape, "forward: attention scratch too small (kernel contract changed?)");
    const KvCache& c = *call.cache;
    if (opts_.numerics == Numerics::Exact) {
        rwd::attention(s, q, KvStorage::k_layer(c, call.layer), KvStorage::v_layer(c, call.layer), c.dtype(), out,
                       buf_->att_scratch.data(), pool_.get(), opts_.simd);
    } else {
        // ggml picks its body from the rows of the whole pass (llama.cpp drops unused rows
        // only after the last layer's attention), not from the rows computed here.
        attention_ggml(s, ggml_fa_path(call.seg_rows, hp.head_dim()), q, KvStorage::k_layer(c, call.layer),
                       KvStorage::v_layer(c, call.layer), c.dtype(), out, buf_->att_scratch.data(), pool_.get());
    }
}

void CpuBackend::move_rows(float* dst, const float* src, int64_t n) {
    std::memmove(dst, src, static_cast<size_t>(n) * 4);
}

// out = act(gate) * up row by row: SiLU or GELU, with LlamaCpp numerics as ggml-cpu computes
// them (its vector expf, its F16 GELU table).
void CpuBackend::glu(FfnAct act, const float* gate, const float* up, int64_t rows, int64_t cols, int64_t in_stride,
                     float* out) {
    const bool exact = opts_.numerics == Numerics::Exact;
    for (int64_t t = 0; t < rows; ++t) {
        const float* g = gate + t * in_stride;
        const float* u = up + t * in_stride;
        float* o = out + t * cols;
        if (act == FfnAct::Silu) {
            if (exact) swiglu(g, u, cols, o, opts_.simd);
            else swiglu_ggml(g, u, cols, o);
        } else {
            if (exact) geglu(g, u, cols, o);
            else geglu_ggml(g, u, cols, o);
        }
    }
}

void CpuBackend::add(float* y, const float* x, int64_t n) { add_inplace(y, x, n); }

// ggml: scale by 1/c, tanh, scale by c.
void CpuBackend::softcap(float* x, int64_t n, float c) {
    scale_inplace(x, n, 1.0f / c);
    for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
    scale_inplace(x, n, c);
}

// Router logits (F32 routers, the converters' choice, by the portable product: the same bits on
// every machine and SIMD level, so no level picks other experts), softmax top-k renormalised,
// then each expert over the rows routed to it (packed K-quant experts: all of the layer's products
// as two pool jobs, moe_experts_kq; others expert by expert), its weights read once per pass;
// experts no row chose are never touched (nor packed: Model::expert packs on first use). Each
// (row, slot) output lands in eo, and a row's sum runs over its own slots in order: the same bits
// whatever else shares the pass.
void CpuBackend::moe_ffn(const Layer& L, const float* xn, int64_t rows, float* out) {
    const LlamaHparams& hp = m_.hparams();
    const int64_t E = hp.n_embd, NE = hp.n_expert, K = hp.n_expert_used, Fe = hp.n_ff_exp;
    Buffers& b = *buf_;
    if (L.ffn_gate_inp.type == DType::F32 && !L.ffn_gate_inp.packed && opts_.numerics == Numerics::Exact)
        matmul_f32_portable(static_cast<const float*>(L.ffn_gate_inp.data), NE, E, xn, rows, b.router.data(),
                            pool_.get());
    else
        matmul(L.ffn_gate_inp, xn, rows, b.router.data());
    route_top_k(b.router.data(), rows, NE, K, true, b.moe_ids.data(), b.moe_w.data());
    group_by_expert(b.moe_ids.data(), rows, K, NE, b.moe_off.data(), b.moe_pairs.data());
    const auto row_bytes = static_cast<size_t>(E) * sizeof(float);
    const int64_t il = &L - m_.layers.data();
    if (!moe_experts_kq(il, rows, xn)) {
        for (int64_t e = 0; e < NE; ++e) {
            const int32_t p0 = b.moe_off[static_cast<size_t>(e)], n = b.moe_off[static_cast<size_t>(e) + 1] - p0;
            if (n == 0) continue;
            ++experts_read_;
            const int32_t* pairs = b.moe_pairs.data() + p0;
            for (int32_t i = 0; i < n; ++i) std::memcpy(b.xe.data() + i * E, xn + (pairs[i] / K) * E, row_bytes);
            const Model::ExpertWeights w = m_.expert(il, e, pool_.get()); // packed on its first use
            matmul_many({{w.gate, b.ge.data()}, {w.up, b.ue.data()}}, b.xe.data(), n);
            glu(hp.arch->act, b.ge.data(), b.ue.data(), n, Fe, Fe, b.ge.data());
            matmul(*w.down, b.ge.data(), n, b.de.data());
            for (int32_t i = 0; i < n; ++i) std::memcpy(b.eo.data() + pairs[i] * E, b.de.data() + i * E, row_bytes);
        }
    }
    // llama.cpp's order: each slot's output times its weight, then added slot after slot.
    for (int64_t t = 0; t < rows; ++t) {
        float* o = out + t * E;
        const float* w = b.moe_w.data() + t * K;
        const float* eo = b.eo.data() + t * K * E;
        for (int64_t c = 0; c < E; ++c) o[c] = eo[c] * w[0];
        for (int64_t j = 1; j < K; ++j)
            for (int64_t c = 0; c < E; ++c) o[c] += eo[j * E + c] * w[j];
    }
}

// The products each expert would make alone, with the same inputs: every row's Q8_K blocks are
// computed from that row alone (kq_packed.h), so quantizing all rows once and taking each expert's
// rows from them, and quantizing every (row, slot)'s SwiGLU output at once, gives each expert the
// bits of its own quantization; each product then takes its rows through the same tiles.
bool CpuBackend::moe_experts_kq(int64_t il, int64_t rows, const float* xn) {
    const LlamaHparams& hp = m_.hparams();
    const int64_t E = hp.n_embd, NE = hp.n_expert, K = hp.n_expert_used, Fe = hp.n_ff_exp;
    Buffers& b = *buf_;
    if (opts_.numerics != Numerics::Exact || b.moe_qx.empty()) return false;
    auto kq = [](const MatrixView* w) { return w->packed && packed_layout(w->type) == PackedLayout::Kq; };
    size_t touched = 0;
    for (int64_t e = 0; e < NE; ++e) {
        const int32_t p0 = b.moe_off[static_cast<size_t>(e)], n = b.moe_off[static_cast<size_t>(e) + 1] - p0;
        if (n == 0) continue;
        const Model::ExpertWeights w = m_.expert(il, e, pool_.get()); // packed on its first use
        if (!kq(w.gate) || !kq(w.up) || !kq(w.down)) return false;
        b.moe_touched[touched++] = Buffers::Touched{w, p0, n};
    }
    if (2 * touched > kKqProductsMax) return false;
    experts_read_ += static_cast<int64_t>(touched);

    // [rows] blocks of xn, then each (row, slot) pair's copy in moe_pairs' order: expert e's
    // input is pairs [off[e], off[e + 1]).
    const KqInput all = quantize_kq_input(xn, rows, E, b.mm_scratch, pool_.get(), opts_.simd);
    const size_t ab = all.act_bytes;
    const int64_t pairs = rows * K;
    for (int64_t p = 0; p < pairs; ++p)
        std::memcpy(b.moe_qx.data() + p * ab, all.act + (b.moe_pairs[static_cast<size_t>(p)] / K) * ab, ab);

    KqInput in[kKqProductsMax / 2];
    KqProduct prods[kKqProductsMax];
    for (size_t i = 0; i < touched; ++i) {
        const Buffers::Touched& t = b.moe_touched[i];
        in[i] = KqInput{b.moe_qx.data() + t.p0 * ab, ab, t.n, E};
        prods[2 * i] = KqProduct{t.w.gate, &in[i], b.ge.data() + t.p0 * Fe};
        prods[2 * i + 1] = KqProduct{t.w.up, &in[i], b.ue.data() + t.p0 * Fe};
    }
    matmul_kq_packed_list(std::span<const KqProduct>(prods, 2 * touched), pool_.get(), opts_.simd);
    glu(hp.arch->act, b.ge.data(), b.ue.data(), pairs, Fe, Fe, b.ge.data());

    const KqInput g = quantize_kq_input(b.ge.data(), pairs, Fe, b.moe_qg, pool_.get(), opts_.simd);
    for (size_t i = 0; i < touched; ++i) {
        const Buffers::Touched& t = b.moe_touched[i];
        in[i] = KqInput{g.act + t.p0 * g.act_bytes, g.act_bytes, t.n, Fe};
        prods[i] = KqProduct{t.w.down, &in[i], b.de.data() + t.p0 * E};
    }
    matmul_kq_packed_list(std::span<const KqProduct>(prods, touched), pool_.get(), opts_.simd);
    const auto row_bytes = static_cast<size_t>(E) * sizeof(float);
    for (int64_t p = 0; p < pairs; ++p)
        std::memcpy(b.eo.data() + b.moe_pairs[static_cast<size_t>(p)] * E, b.de.data() + p * E, row_bytes);
    return true;
}

} // namespace rwd
