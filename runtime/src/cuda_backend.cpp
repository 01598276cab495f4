// The CUDA backend of Context: context.cpp's forward pass, step for step, on one CUDA device.
// The KvCache (host memory) stays the authority on the cache's contents: the device holds a
// mirror of positions < size(), valid while the cache's version() is the one this backend last
// wrote (truncate keeps it; any other writer or a new cache makes the next pass upload the
// prefix again), and every pass copies its new K/V rows back before committing them.
#include "cuda_backend.h"

#include "rewind/error.h"

#if defined(REWIND_HAVE_CUDA)

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "rewind/kernels/cuda_attention.h"
#include "rewind/kernels/cuda_device.h"
#include "rewind/kernels/cuda_matmul.h"
#include "rewind/kernels/cuda_ops.h"

namespace rwd {

namespace {
// Query tokens per attention launch: bounds the split-K scratch (it grows with tokens x context).
constexpr int64_t kAttnChunk = 32;
} // namespace

struct CudaBackend::Impl {
    struct Layer {
        const float* attn_norm = nullptr;
        cuda::DeviceMatrix wq, wk, wv, wo, wqkv, ffn_gate, ffn_down, ffn_up;
        const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr, *k_norm = nullptr;
        const float *post_attn_norm = nullptr, *ffn_norm = nullptr, *post_ffn_norm = nullptr;
    };

    const Model& m;
    ContextOptions opts;
    int dev;
    cuda::Stream stream;

    // Weights: one device copy per distinct host array (a tied head shares the embedding's).
    std::vector<cuda::DeviceBuffer> owned;
    std::unordered_map<const void*, const void*> uploaded;
    cuda::DeviceMatrix tok_embd, output;
    const float* output_norm = nullptr;
    const float* rope_freqs = nullptr;
    std::vector<Layer> layers;

    // Run buffers. B = max_batch, E = n_embd, Q = n_embd_q, KV = n_embd_kv, F = n_ff, V = n_vocab.
    cuda::DeviceBuffer x;      // [B, E]  residual stream
    cuda::DeviceBuffer xn;     // [B, E]  normed input of a sub-block
    cuda::DeviceBuffer q;      // [B, Q]
    cuda::DeviceBuffer k, v;   // [B, KV]
    cuda::DeviceBuffer qkv;    // [B, Q + 2 KV] fused attn_qkv output (empty unless fused)
    cuda::DeviceBuffer attn;   // [B, Q]
    cuda::DeviceBuffer proj;   // [B, E]
    cuda::DeviceBuffer gate;   // [B, F]
    cuda::DeviceBuffer up;     // [B, F] ([B, 2F] when gate and up are fused)
    cuda::DeviceBuffer logits; // [B, V]
    cuda::DeviceBuffer pos;    // [B] int32
    cuda::DeviceBuffer ids;    // [B] int32
    std::vector<int32_t> pos_h, ids_h; // [B] staging
    std::vector<float> logits_h;       // [B, V] what forward() returns

    // The KV mirror: per layer [capacity, n_head_kv, head_dim] of the cache's type.
    std::vector<cuda::DeviceBuffer> kd, vd;
    int64_t kv_capacity = 0;
    DType kv_type = DType::F32;
    uint64_t kv_version = 0;
    bool kv_valid = false;
    cuda::DeviceBuffer att_scratch; // attention_scratch_floats(kAttnChunk tokens at the end of the mirror)
    int64_t att_scratch_floats = 0;

    Impl(const Model& model, const ContextOptions& o) : m(model), opts(o), dev(o.device.index), stream(o.device.index) {
        cuda::DeviceScope scope(dev);
        const LlamaHparams& hp = m.hparams();
        tok_embd = upload_matrix(m.tok_embd, "token_embd");
        output = upload_matrix(m.output, "output");
        output_norm = upload_vector(m.output_norm, hp.n_embd);
        rope_freqs = upload_vector(m.rope_freqs, hp.n_rot / 2);
        bool fused_qkv = false, fused_up = false;
        for (size_t il = 0; il < m.layers.size(); ++il) {
            const Model::Layer& L = m.layers[il];
            const std::string blk = "blk." + std::to_string(il) + ".";
            Layer d;
            d.attn_norm = upload_vector(L.attn_norm, hp.n_embd);
            d.wq = upload_matrix(L.wq, (blk + "attn_q").c_str());
            d.wk = upload_matrix(L.wk, (blk + "attn_k").c_str());
            d.wv = upload_matrix(L.wv, (blk + "attn_v").c_str());
            d.wqkv = upload_matrix(L.wqkv, (blk + "attn_qkv").c_str());
            d.wo = upload_matrix(L.wo, (blk + "attn_output").c_str());
            d.bq = upload_vector(L.bq, hp.n_embd_q());
            d.bk = upload_vector(L.bk, hp.n_embd_kv());
            d.bv = upload_vector(L.bv, hp.n_embd_kv());
            d.q_norm = upload_vector(L.q_norm, hp.head_dim());
            d.k_norm = upload_vector(L.k_norm, hp.head_dim());
            d.post_attn_norm = upload_vector(L.post_attn_norm, hp.n_embd);
            d.ffn_gate = upload_matrix(L.ffn_gate, (blk + "ffn_gate").c_str());
            d.ffn_up = upload_matrix(L.ffn_up, (blk + "ffn_up").c_str());
            d.ffn_down = upload_matrix(L.ffn_down, (blk + "ffn_down").c_str());
            d.ffn_norm = upload_vector(L.ffn_norm, hp.n_embd);
            d.post_ffn_norm = upload_vector(L.post_ffn_norm, hp.n_embd);
            fused_qkv = fused_qkv || d.wqkv.data != nullptr;
            fused_up = fused_up || d.ffn_gate.data == nullptr;
            layers.push_back(d);
        }
        const auto B = static_cast<size_t>(opts.max_batch);
        const auto E = static_cast<size_t>(hp.n_embd), Q = static_cast<size_t>(hp.n_embd_q());
        const auto KV = static_cast<size_t>(hp.n_embd_kv()), F = static_cast<size_t>(hp.n_ff);
        const auto V = static_cast<size_t>(m.n_vocab());
        x = cuda::DeviceBuffer(dev, B * E * 4);
        xn = cuda::DeviceBuffer(dev, B * E * 4);
        q = cuda::DeviceBuffer(dev, B * Q * 4);
        k = cuda::DeviceBuffer(dev, B * KV * 4);
        v = cuda::DeviceBuffer(dev, B * KV * 4);
        if (fused_qkv) qkv = cuda::DeviceBuffer(dev, B * (Q + 2 * KV) * 4);
        attn = cuda::DeviceBuffer(dev, B * Q * 4);
        proj = cuda::DeviceBuffer(dev, B * E * 4);
        gate = cuda::DeviceBuffer(dev, B * F * 4);
        up = cuda::DeviceBuffer(dev, B * F * (fused_up ? 2 : 1) * 4);
        logits = cuda::DeviceBuffer(dev, B * V * 4);
        pos = cuda::DeviceBuffer(dev, B * 4);
        ids = cuda::DeviceBuffer(dev, B * 4);
        pos_h.resize(B);
        ids_h.resize(B);
        logits_h.resize(B * V);
    }

    const void* upload_bytes(const void* host, size_t bytes, const char* what) {
        if (const auto it = uploaded.find(host); it != uploaded.end()) return it->second;
        owned.push_back(cuda::upload(dev, host, bytes, stream.get(), what));
        uploaded.emplace(host, owned.back().data());
        return owned.back().data();
    }

    cuda::DeviceMatrix upload_matrix(const MatrixView& w, const char* name) {
        if (!w.data) return {};
        if (!cuda::matmul_supports(w.type))
            throw Error(ErrorCode::unsupported, m.path() + ": tensor '" + name + "' has type " + dtype_name(w.type) +
                                                    ", which the CUDA backend does not support (F32, F16, BF16, Q8_0)");
        // The file's layout (a Q8_0 matrix's repacked CPU copy is not used here).
        const size_t bytes = dtype_row_bytes(w.type, w.cols) * static_cast<size_t>(w.rows);
        return {w.type, upload_bytes(w.data, bytes, name), w.rows, w.cols};
    }

    const float* upload_vector(const float* host, int64_t n) {
        if (!host) return nullptr;
        return static_cast<const float*>(upload_bytes(host, static_cast<size_t>(n) * 4, "CUDA weight upload"));
    }

    // Makes the mirror hold the cache's positions < size() (uploading them unless the mirror is
    // current), sized for the cache's capacity and type.
    void sync_mirror(const KvCache& cache) {
        const LlamaHparams& hp = m.hparams();
        const size_t row = cache.bytes_per_position();
        if (kv_capacity != cache.capacity() || kv_type != cache.dtype() || kd.size() != layers.size()) {
            kv_valid = false;
            kd.clear();
            vd.clear();
            att_scratch = {};
            kv_capacity = 0;
            const size_t layer_bytes = static_cast<size_t>(cache.capacity()) * row;
            for (size_t il = 0; il < layers.size(); ++il) {
                kd.emplace_back(dev, layer_bytes);
                vd.emplace_back(dev, layer_bytes);
            }
            const int64_t nt = std::min<int64_t>(kAttnChunk, std::min<int64_t>(opts.max_batch, cache.capacity()));
            AttentionShape s{nt, cache.capacity() - nt, hp.n_head, hp.n_head_kv, hp.head_dim()};
            att_scratch_floats = cuda::attention_scratch_floats(s);
            att_scratch = cuda::DeviceBuffer(dev, static_cast<size_t>(att_scratch_floats) * 4);
            kv_capacity = cache.capacity();
            kv_type = cache.dtype();
        }
        if (kv_valid && cache.version() == kv_version) return; // truncation keeps the prefix
        kv_valid = false;
        const size_t used = static_cast<size_t>(cache.size()) * row;
        for (size_t il = 0; il < layers.size(); ++il) {
            cuda::copy_to_device(kd[il].data(), cache.k_layer(static_cast<int64_t>(il)), used, stream.get(), "KV upload");
            cuda::copy_to_device(vd[il].data(), cache.v_layer(static_cast<int64_t>(il)), used, stream.get(), "KV upload");
        }
        stream.synchronize();
        kv_valid = true;
        kv_version = cache.version();
    }

    void matmul(const cuda::DeviceMatrix& w, const float* in, int64_t rows, float* out) {
        cuda::matmul(w, in, rows, out, stream.get());
    }

    std::span<const float> forward(KvCache& cache, std::span<const TokenId> tokens, Logits which, int64_t out_row) {
        cuda::DeviceScope scope(dev);
        const LlamaHparams& hp = m.hparams();
        const ArchInfo& arch = *hp.arch;
        const auto n = static_cast<int64_t>(tokens.size());
        const int64_t E = hp.n_embd, KV = hp.n_embd_kv(), Q = hp.n_embd_q(), F = hp.n_ff, hd = hp.head_dim();
        const int64_t n_vocab = m.n_vocab();
        const float eps = hp.rms_eps;
        const auto S = stream.get();
        const size_t row = cache.bytes_per_position();
        const float embd_scale = std::sqrt(float(E));
        const auto n_layer = static_cast<int64_t>(layers.size());
        const int64_t out_rows_max = which == Logits::All ? n : (which == Logits::Last ? 1 : 0);
        if (out_row < 0 || out_row + out_rows_max > opts.max_batch)
            throw Error(ErrorCode::capacity, "CUDA forward: logits rows " + std::to_string(out_row) + " + " +
                                                 std::to_string(out_rows_max) + " exceed max_batch " +
                                                 std::to_string(opts.max_batch));
        float* const logits_out = logits_h.data() + out_row * n_vocab;

        sync_mirror(cache);
        kv_valid = false; // until this pass has succeeded: a failure leaves device rows undefined
        const int64_t n0 = cache.size();
        int64_t out_rows = 0;
        float* X = x.as<float>();
        float* XN = xn.as<float>();
        float* Qb = q.as<float>();
        float* Kb = k.as<float>();
        float* Vb = v.as<float>();
        for (int64_t done = 0; done < n;) {
            const int64_t nt = std::min(opts.max_batch, n - done);
            const int64_t pos0 = n0 + done;
            const bool final_chunk = done + nt == n;
            const Logits mode = final_chunk ? which : Logits::None;
            const int64_t r0 = mode == Logits::All ? 0 : nt - 1;
            const int64_t nr = mode == Logits::All ? nt : (mode == Logits::Last ? 1 : 0);

            for (int64_t t = 0; t < nt; ++t) {
                pos_h[static_cast<size_t>(t)] = static_cast<int32_t>(pos0 + t);
                ids_h[static_cast<size_t>(t)] = static_cast<int32_t>(tokens[static_cast<size_t>(done + t)]);
            }
            cuda::copy_to_device(pos.data(), pos_h.data(), static_cast<size_t>(nt) * 4, S, "positions");
            cuda::copy_to_device(ids.data(), ids_h.data(), static_cast<size_t>(nt) * 4, S, "token ids");
            cuda::get_rows(tok_embd.type, tok_embd.data, tok_embd.rows, E, ids.as<int32_t>(), nt, X, S);
            if (arch.embd_scaled) cuda::scale_inplace(X, nt * E, embd_scale, S);

            for (int64_t il = 0; il < n_layer; ++il) {
                const Layer& L = layers[static_cast<size_t>(il)];
                const bool swa = hp.is_swa_layer(il);
                cuda::rms_norm(X, L.attn_norm, nt, E, eps, XN, S);
                if (L.wqkv.data) {
                    float* QKV = qkv.as<float>();
                    matmul(L.wqkv, XN, nt, QKV);
                    const size_t pitch = static_cast<size_t>(Q + 2 * KV) * 4;
                    cuda::copy_2d_on_device(Qb, static_cast<size_t>(Q) * 4, QKV, pitch, static_cast<size_t>(Q) * 4,
                                            static_cast<size_t>(nt), S, "fused qkv split");
                    cuda::copy_2d_on_device(Kb, static_cast<size_t>(KV) * 4, QKV + Q, pitch, static_cast<size_t>(KV) * 4,
                                            static_cast<size_t>(nt), S, "fused qkv split");
                    cuda::copy_2d_on_device(Vb, static_cast<size_t>(KV) * 4, QKV + Q + KV, pitch,
                                            static_cast<size_t>(KV) * 4, static_cast<size_t>(nt), S, "fused qkv split");
                } else {
                    matmul(L.wq, XN, nt, Qb);
                    matmul(L.wk, XN, nt, Kb);
                    matmul(L.wv, XN, nt, Vb);
                }
                if (L.bq) cuda::add_bias(Qb, L.bq, nt, Q, S);
                if (L.bk) cuda::add_bias(Kb, L.bk, nt, KV, S);
                if (L.bv) cuda::add_bias(Vb, L.bv, nt, KV, S);
                if (L.q_norm) cuda::rms_norm(Qb, L.q_norm, nt * hp.n_head, hd, eps, Qb, S);
                if (L.k_norm) cuda::rms_norm(Kb, L.k_norm, nt * hp.n_head_kv, hd, eps, Kb, S);
                RopeParams rp;
                rp.mode = arch.rope;
                rp.n_rot = hp.n_rot;
                rp.freq_base = swa ? hp.rope_freq_base_swa : hp.rope_freq_base;
                rp.freq_scale = swa ? 1.0f : hp.rope_freq_scale;
                rp.freq_factors = rope_freqs;
                cuda::rope(Qb, pos.as<int32_t>(), nt, hp.n_head, hd, rp, S);
                cuda::rope(Kb, pos.as<int32_t>(), nt, hp.n_head_kv, hd, rp, S);
                if (arch.q_prescaled) cuda::scale_inplace(Qb, nt * Q, hp.attn_scale, S);

                auto* kc = static_cast<std::byte*>(kd[static_cast<size_t>(il)].data()) + static_cast<size_t>(pos0) * row;
                auto* vc = static_cast<std::byte*>(vd[static_cast<size_t>(il)].data()) + static_cast<size_t>(pos0) * row;
                cuda::store_kv(Kb, nt * KV, kv_type, kc, S);
                cuda::store_kv(Vb, nt * KV, kv_type, vc, S);

                const bool last_layer = il == n_layer - 1;
                const int64_t a0 = last_layer ? r0 : 0;
                const int64_t an = last_layer ? nr : nt;
                if (an == 0) continue;
                for (int64_t c0 = 0; c0 < an; c0 += kAttnChunk) {
                    const int64_t cn = std::min(kAttnChunk, an - c0);
                    AttentionShape s{cn, pos0 + a0 + c0, hp.n_head, hp.n_head_kv, hd};
                    s.window = swa ? hp.n_swa : 0;
                    s.scale = arch.q_prescaled ? 1.0f : 0.0f;
                    cuda::attention(s, Qb + (a0 + c0) * Q, kd[static_cast<size_t>(il)].data(),
                                    vd[static_cast<size_t>(il)].data(), kv_type, attn.as<float>() + (a0 + c0) * Q,
                                    att_scratch.as<float>(), att_scratch_floats, S);
                }
                float* P = proj.as<float>() + a0 * E;
                matmul(L.wo, attn.as<float>() + a0 * Q, an, P);
                if (L.post_attn_norm) cuda::rms_norm(P, L.post_attn_norm, an, E, eps, P, S);
                cuda::add_inplace(X + a0 * E, P, an * E, S);

                cuda::rms_norm(X + a0 * E, L.ffn_norm, an, E, eps, XN + a0 * E, S);
                float* G = gate.as<float>() + a0 * F;
                if (L.ffn_gate.data) {
                    float* U = up.as<float>() + a0 * F;
                    matmul(L.ffn_gate, XN + a0 * E, an, G);
                    matmul(L.ffn_up, XN + a0 * E, an, U);
                    if (arch.act == FfnAct::Silu) cuda::swiglu(G, U, an, F, F, F, G, F, S);
                    else cuda::geglu(G, U, an, F, F, F, G, F, S);
                } else {
                    float* GU = up.as<float>() + a0 * 2 * F;
                    matmul(L.ffn_up, XN + a0 * E, an, GU);
                    if (arch.act == FfnAct::Silu) cuda::swiglu(GU, GU + F, an, F, 2 * F, 2 * F, G, F, S);
                    else cuda::geglu(GU, GU + F, an, F, 2 * F, 2 * F, G, F, S);
                }
                matmul(L.ffn_down, G, an, P);
                if (L.post_ffn_norm) cuda::rms_norm(P, L.post_ffn_norm, an, E, eps, P, S);
                cuda::add_inplace(X + a0 * E, P, an * E, S);
            }

            if (nr > 0) {
                cuda::rms_norm(X + r0 * E, output_norm, nr, E, eps, XN, S);
                matmul(output, XN, nr, logits.as<float>());
                if (hp.final_logit_softcap > 0.0f) cuda::softcap(logits.as<float>(), nr * n_vocab, hp.final_logit_softcap, S);
                cuda::copy_to_host(logits_out, logits.data(), static_cast<size_t>(nr * n_vocab) * 4, S, "logits");
                out_rows = nr;
            }
            // This chunk's K/V rows into the host cache (beyond size(): committed below).
            for (int64_t il = 0; il < n_layer; ++il) {
                const size_t off = static_cast<size_t>(pos0) * row, bytes = static_cast<size_t>(nt) * row;
                cuda::copy_to_host(static_cast<std::byte*>(cache.k_layer(il)) + off,
                                   static_cast<const std::byte*>(kd[static_cast<size_t>(il)].data()) + off, bytes, S,
                                   "KV download");
                cuda::copy_to_host(static_cast<std::byte*>(cache.v_layer(il)) + off,
                                   static_cast<const std::byte*>(vd[static_cast<size_t>(il)].data()) + off, bytes, S,
                                   "KV download");
            }
            done += nt;
        }
        stream.synchronize(); // a kernel fault surfaces here, before anything is committed
        cache.commit(n0 + n);
        kv_version = cache.version();
        kv_valid = true;
        return {logits_out, static_cast<size_t>(out_rows * n_vocab)};
    }
};

CudaBackend::CudaBackend(const Model& model, const ContextOptions& opts) : impl_(std::make_unique<Impl>(model, opts)) {}
CudaBackend::~CudaBackend() = default;

std::span<const float> CudaBackend::forward(KvCache& cache, std::span<const TokenId> tokens, Logits which,
                                            int64_t out_row) {
    return impl_->forward(cache, tokens, which, out_row);
}

} // namespace rwd

#else // no CUDA in this build: Context refuses cuda devices before it gets here (require_device)

namespace rwd {

struct CudaBackend::Impl {};

CudaBackend::CudaBackend(const Model&, const ContextOptions& opts) {
    throw Error(ErrorCode::unsupported, "device " + device_name(opts.device) + ": this build of rewind has no CUDA backend");
}
CudaBackend::~CudaBackend() = default;

std::span<const float> CudaBackend::forward(KvCache&, std::span<const TokenId>, Logits, int64_t) {
    throw Error(ErrorCode::unsupported, "this build of rewind has no CUDA backend");
}

} // namespace rwd

#endif
