// The forward pass of every supported architecture, written once (private to runtime): embeddings,
// the layer block with arch.h's switches, output norm and head, over the ops of a backend
// (cpu_backend.h; the CUDA one in cuda_backend.cpp), which owns the buffers and kernel policy.
#pragma once
#include <cmath>
#include <concepts>
#include <cstdint>
#include <initializer_list>

#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/kernels/ops.h"

namespace rwd {

// One sequence's share of a pass: rows [off, off + n) of the run buffers are its tokens, whose
// K/V go to cache slots pos0 .. pos0 + n - 1. A chain (parents null): token t at position
// pos0 + t, causal. A tree: token t follows token parents[t] (in [-1, t); -1: the cached
// prefix), sits at position pos0 + depth(t) and sees the prefix and its ancestors only (the
// segment's mode is then Logits::All). After run_forward, its logits are rows
// [out_row, out_row + out_n) of the logits buffer.
struct PassSegment {
    KvCache* cache = nullptr;
    const TokenId* tokens = nullptr;
    int64_t n = 0, pos0 = 0, off = 0;
    Logits mode = Logits::None;
    int64_t out_row = 0, out_n = 0;
    const int32_t* parents = nullptr; // [n] or null (a chain)
};

// One attention call, its mask given as data: query i (at position pos0 + i) sees the positions
// p <= pos0 + i of `cache`'s layer, and with window > 0 only those with p > pos0 + i - window.
// With a gather map, positions p >= gather_from are read from slot gather[p - gather_from]: one
// root-to-leaf path of a token tree, seen as the causal sequence it stands for.
struct AttnCall {
    KvCache* cache = nullptr;
    int64_t layer = 0;
    int64_t pos0 = 0;     // position of the first query
    int64_t n = 0;        // queries: [n, n_head, head_dim]
    int64_t window = 0;   // sliding window (0: none)
    float scale = 0.0f;   // 0: 1/sqrt(head_dim); 1: the queries are prescaled
    int64_t seg_rows = 0; // rows of the query's segment in this pass (llama.cpp picks its body by them)
    const int32_t* gather = nullptr; // [pos0 + n - gather_from] host slots, or null (positions are slots)
    int64_t gather_from = 0;
};

// A pass's activations in the backend's memory (device pointers for CUDA: the graph only offsets
// them). B = max_batch, E = n_embd, Q = n_embd_q, KV = n_embd_kv, F = n_ff, V = n_vocab.
struct PassBuffers {
    float* x;      // [B, E]  residual stream
    float* xn;     // [B, E]  normed input of a sub-block
    float* q;      // [B, Q]  queries (n_head * head_dim)
    float* k;      // [B, KV] new keys before they enter the cache
    float* v;      // [B, KV] new values
    float* qkv;    // [B, Q + 2 KV] fused attn_qkv output (null unless fused)
    float* attn;   // [B, Q]  attention output
    float* proj;   // [B, E]  wo / ffn_down output, added to x
    float* gate;   // [B, F]  ffn_gate output, then act(gate) * up
    float* up;     // [B, F]  ffn_up output ([B, 2F]: [gate; up] when fused)
    float* logits; // [B, V]
    int32_t* ids;  // [B] host: each row's token id
    int32_t* pos;  // [B] host: each row's absolute position
    int32_t* gather; // [B] host: a tree path's slots for one attention call (AttnCall::gather)
};

// One output of matmul_many: y = x · wᵀ.
template <class Matrix>
struct MatOut {
    const Matrix* w;
    float* y;
};

// What the graph asks of a backend. Matrix / Layer: its prepared weights (Layer has
// Model::Layer's member names). Every op works on `rows` rows of the pass; x, y: PassBuffers rows.
template <class B>
concept ForwardBackend = requires(B& be, const B& cb, const typename B::Matrix& w, float* x, const float* cx,
                                  const int32_t* ids, int64_t n, float s, const RopeParams& rp, KvCache& cache,
                                  const AttnCall& call, FfnAct act, std::initializer_list<MatOut<typename B::Matrix>> outs) {
    { cb.hparams() } -> std::same_as<const LlamaHparams&>;
    { be.buffers() } -> std::same_as<PassBuffers>;
    { cb.layer(n) } -> std::same_as<const typename B::Layer&>;
    { cb.output() } -> std::same_as<const typename B::Matrix&>;
    { cb.output_norm() } -> std::same_as<const float*>;
    { cb.rope_freqs() } -> std::same_as<const float*>;
    { be.positions(ids, n) } -> std::same_as<const int32_t*>; // where the backend's rope reads them
    be.embed(ids, n, x);                                        // rows of the token embedding
    be.rms_norm(cx, cx, n, n, s, x);                            // (x, weight, rows, cols, eps, out)
    be.matmul(w, cx, n, x);
    be.matmul_many(outs, cx, n);                                // several weights over one input
    be.copy_cols(x, n, cx, n, n, n);                            // (dst, dst_stride, src, src_stride, cols, rows)
    be.add_bias(x, cx, n, n);
    be.rope(x, ids, n, n, n, rp);                               // (x, positions, rows, heads, head_dim, p)
    be.scale(x, n, s);
    be.kv_store(cache, n, n, n, cx, cx);                        // (cache, layer, pos0, rows, k, v)
    be.attention(call, cx, x);                                  // (call, q, out)
    be.move_rows(x, cx, n);                                     // forward move of n floats (dst <= src)
    be.glu(act, cx, cx, n, n, n, x);                            // (act, gate, up, rows, cols, in_stride, out)
    be.add(x, cx, n);
    be.softcap(x, n, s);
};

// Layer il's rope: the sliding-window layers of gemma3 have their own base and no scaling.
RopeParams layer_rope(const LlamaHparams& hp, int64_t il, const float* freq_factors);

// The rows of segment s whose output matters after the last layer's K/V write: all
// (Logits::All), its last token (Last) or none (None), as [first, first + count) of its own.
void output_rows(const PassSegment& s, int64_t& first, int64_t& count);

namespace graph {

// Each row's token id and position, its embedding into x (scaled for gemma3). Returns the
// positions where the backend's rope reads them.
template <ForwardBackend B>
const int32_t* embed(B& be, const PassBuffers& b, const PassSegment* segs, int64_t n_segs, int64_t nt) {
    const LlamaHparams& hp = be.hparams();
    for (int64_t is = 0; is < n_segs; ++is) {
        const PassSegment& sg = segs[is];
        for (int64_t t = 0; t < sg.n; ++t) {
            b.ids[sg.off + t] = static_cast<int32_t>(sg.tokens[t]);
            // A chain's token t sits at pos0 + t; a tree node one position after its parent (parents
            // come first), or at pos0 when it hangs off the cached prefix.
            const int32_t par = sg.parents ? sg.parents[t] : -1;
            b.pos[sg.off + t] = !sg.parents ? static_cast<int32_t>(sg.pos0 + t)
                                : par >= 0  ? b.pos[sg.off + par] + 1
                                            : static_cast<int32_t>(sg.pos0);
        }
    }
    const int32_t* pos = be.positions(b.pos, nt);
    be.embed(b.ids, nt, b.x);
    // ggml_scale(inpL, sqrtf(n_embd)) (gemma3): the input embeddings only, never the tied head.
    if (hp.arch->embd_scaled) be.scale(b.x, nt * hp.n_embd, std::sqrt(float(hp.n_embd)));
    return pos;
}

// x -> norm -> q, k, v (+ bias) -> (q/k norm) -> rope -> (prescale q), for all nt rows.
template <ForwardBackend B>
void qkv(B& be, const PassBuffers& b, int64_t il, const int32_t* pos, int64_t nt) {
    const LlamaHparams& hp = be.hparams();
    const typename B::Layer& L = be.layer(il);
    const int64_t E = hp.n_embd, KV = hp.n_embd_kv(), Q = hp.n_embd_q(), hd = hp.head_dim();
    be.rms_norm(b.x, L.attn_norm, nt, E, hp.rms_eps, b.xn);
    if (L.wqkv.data) {
        be.matmul(L.wqkv, b.xn, nt, b.qkv);
        const int64_t w = Q + 2 * KV;
        be.copy_cols(b.q, Q, b.qkv, w, Q, nt);
        be.copy_cols(b.k, KV, b.qkv + Q, w, KV, nt);
        be.copy_cols(b.v, KV, b.qkv + Q + KV, w, KV, nt);
    } else {
        be.matmul_many({{&L.wq, b.q}, {&L.wk, b.k}, {&L.wv, b.v}}, b.xn, nt);
    }
    if (L.bq) be.add_bias(b.q, L.bq, nt, Q);
    if (L.bk) be.add_bias(b.k, L.bk, nt, KV);
    if (L.bv) be.add_bias(b.v, L.bv, nt, KV);
    // Per-head RMSNorm: every head is a row of head_dim.
    if (L.q_norm) be.rms_norm(b.q, L.q_norm, nt * hp.n_head, hd, hp.rms_eps, b.q);
    if (L.k_norm) be.rms_norm(b.k, L.k_norm, nt * hp.n_head_kv, hd, hp.rms_eps, b.k);
    const RopeParams rp = layer_rope(hp, il, be.rope_freqs());
    // Every row carries its own position, so one call serves all segments.
    be.rope(b.q, pos, nt, hp.n_head, hd, rp);
    be.rope(b.k, pos, nt, hp.n_head_kv, hd, rp);
    if (hp.arch->q_prescaled) be.scale(b.q, nt * Q, hp.attn_scale);
}

// The attention of segment sg's rows [r0, r0 + n) into out: one call for a chain; for a tree,
// one call per run of rows that continue each other (row r's parent is r - 1), each over the
// path from the root to its last row, gathered from the slots the tree's rows were stored in.
// A linear chain is the one run whose path is its own slots: no gather, one call over its rows.
template <ForwardBackend B>
void attend_rows(B& be, const PassBuffers& b, const PassSegment& sg, AttnCall call, int64_t r0, int64_t n,
                 const float* q, float* out) {
    const int64_t Q = be.hparams().n_embd_q();
    if (!sg.parents) {
        call.pos0 = sg.pos0 + r0;
        call.n = n;
        be.attention(call, q, out);
        return;
    }
    for (int64_t c0 = r0; c0 < r0 + n;) {
        int64_t c1 = c0 + 1;
        while (c1 < r0 + n && sg.parents[c1] == c1 - 1) ++c1;
        // The path's slot at each depth 0 .. depth(c1 - 1), filled from the deepest up.
        const int64_t d0 = b.pos[sg.off + c0] - sg.pos0;
        int64_t d = d0 + (c1 - c0);
        for (int64_t r = c1 - 1; r >= c0; --r) b.gather[--d] = static_cast<int32_t>(sg.pos0 + r);
        for (int32_t a = sg.parents[c0]; a >= 0; a = sg.parents[a]) b.gather[--d] = static_cast<int32_t>(sg.pos0 + a);
        bool in_place = true;
        for (int64_t i = 0; i < d0 + (c1 - c0); ++i) in_place = in_place && b.gather[i] == sg.pos0 + i;
        call.pos0 = sg.pos0 + d0;
        call.n = c1 - c0;
        call.gather = in_place ? nullptr : b.gather;
        call.gather_from = sg.pos0;
        be.attention(call, q + (c0 - r0) * Q, out + (c0 - r0) * Q);
        c0 = c1;
    }
}

// Each segment's K/V into its cache, then its attention. In the last layer only the output rows
// feed anything further: each segment attends for those alone, and they (with their residual
// rows) are packed to the front, in segment order, so wo, the FFN and the head run on them
// alone. Returns the rows that go on: nt, or in the last layer the packed ones.
template <ForwardBackend B>
int64_t attend(B& be, const PassBuffers& b, int64_t il, PassSegment* segs, int64_t n_segs, int64_t nt, bool last) {
    const LlamaHparams& hp = be.hparams();
    const int64_t E = hp.n_embd, KV = hp.n_embd_kv(), Q = hp.n_embd_q();
    const int64_t window = hp.is_swa_layer(il) ? hp.n_swa : 0;
    int64_t packed = 0;
    for (int64_t is = 0; is < n_segs; ++is) {
        PassSegment& sg = segs[is];
        // At slots pos0.. (beyond cache.size(): not yet committed).
        be.kv_store(*sg.cache, il, sg.pos0, sg.n, b.k + sg.off * KV, b.v + sg.off * KV);
        int64_t a0 = 0, sn = sg.n;
        if (last) output_rows(sg, a0, sn);
        // Output rows: [dst, dst + sn) of attn (and of x in the last layer).
        const int64_t dst = last ? packed : sg.off;
        if (last) {
            sg.out_row = packed;
            sg.out_n = sn;
            packed += sn;
        }
        if (sn == 0) continue;
        const AttnCall call{sg.cache, il, 0, 0, window, hp.arch->q_prescaled ? 1.0f : 0.0f, sg.n};
        attend_rows(be, b, sg, call, a0, sn, b.q + (sg.off + a0) * Q, b.attn + dst * Q);
        // dst <= sg.off + a0, and earlier segments' rows lie below: a forward move is safe.
        if (last && dst != sg.off + a0) be.move_rows(b.x + dst * E, b.x + (sg.off + a0) * E, sn * E);
    }
    return last ? packed : nt;
}

// The expert FFN of the an rows in xn into proj: router logits (F32) -> softmax -> the top
// n_expert_used experts (ties: the lower index) with their weights renormalised to sum 1 -> for
// each expert some row chose, its rows gathered and run through gate, up, act(gate) * up, down
// (each touched expert's weights read once per pass, untouched ones never) -> each row's outputs
// times their weights, added in its own descending-weight order. A row's bits depend on that row
// alone. Backends without the op (CUDA) are refused such models before a pass (Context).
template <ForwardBackend B>
void moe_ffn(B& be, const PassBuffers& b, const typename B::Layer& L, int64_t an) {
    if constexpr (requires { be.moe_ffn(L, b.xn, an, b.proj); }) {
        be.moe_ffn(L, b.xn, an, b.proj);
    } else {
        throw Error(ErrorCode::unsupported, "forward: this backend does not run mixture-of-experts layers");
    }
}

// attn -> wo -> (post-norm) -> + x; x -> norm -> gate, up -> act(gate) * up -> down -> (post-norm) -> + x
// (or, with experts, norm -> moe_ffn -> + x).
template <ForwardBackend B>
void attn_out_and_ffn(B& be, const PassBuffers& b, int64_t il, int64_t an) {
    const LlamaHparams& hp = be.hparams();
    const typename B::Layer& L = be.layer(il);
    const int64_t E = hp.n_embd, F = hp.n_ff;
    be.matmul(L.wo, b.attn, an, b.proj);
    if (L.post_attn_norm) be.rms_norm(b.proj, L.post_attn_norm, an, E, hp.rms_eps, b.proj);
    be.add(b.x, b.proj, an * E);

    be.rms_norm(b.x, L.ffn_norm, an, E, hp.rms_eps, b.xn);
    if (hp.is_moe()) {
        moe_ffn(be, b, L, an);
    } else if (L.ffn_gate.data) {
        be.matmul_many({{&L.ffn_gate, b.gate}, {&L.ffn_up, b.up}}, b.xn, an);
        be.glu(hp.arch->act, b.gate, b.up, an, F, F, b.gate);
    } else {
        // Fused [gate; up] rows of 2F (phi3): each token's halves.
        be.matmul(L.ffn_up, b.xn, an, b.up);
        be.glu(hp.arch->act, b.up, b.up + F, an, F, 2 * F, b.gate);
    }
    if (!hp.is_moe()) be.matmul(L.ffn_down, b.gate, an, b.proj);
    if (L.post_ffn_norm) be.rms_norm(b.proj, L.post_ffn_norm, an, E, hp.rms_eps, b.proj);
    be.add(b.x, b.proj, an * E);
}

// x -> output norm -> head -> (softcap) for the an packed output rows.
template <ForwardBackend B>
void head(B& be, const PassBuffers& b, int64_t an) {
    const LlamaHparams& hp = be.hparams();
    be.rms_norm(b.x, be.output_norm(), an, hp.n_embd, hp.rms_eps, b.xn);
    be.matmul(be.output(), b.xn, an, b.logits);
    if (hp.final_logit_softcap > 0.0f) be.softcap(b.logits, an * hp.n_vocab, hp.final_logit_softcap);
}

} // namespace graph

// One pass over n_segs sequences holding nt rows in all (nt <= the backend's max_batch): writes
// their K/V beyond each cache's size (not committed) and their logits rows, compacted in segment
// order, at the start of the backend's logits buffer (each segment's out_row, out_n).
template <ForwardBackend B>
void run_forward(B& be, PassSegment* segs, int64_t n_segs, int64_t nt) {
    const PassBuffers b = be.buffers();
    const int32_t* pos = graph::embed(be, b, segs, n_segs, nt);
    const auto n_layer = static_cast<int64_t>(be.hparams().n_layer);
    int64_t an = nt; // rows that go on through wo and the FFN
    for (int64_t il = 0; il < n_layer; ++il) {
        graph::qkv(be, b, il, pos, nt);
        an = graph::attend(be, b, il, segs, n_segs, nt, il == n_layer - 1);
        if (an > 0) graph::attn_out_and_ffn(be, b, il, an);
    }
    if (an > 0) graph::head(be, b, an);
}

} // namespace rwd
