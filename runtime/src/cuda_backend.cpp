// The CUDA backend of Context: forward_graph.h's ops on one CUDA device.
// The KvCache (host memory) stays the authority on the cache's contents: the device holds a
// mirror of positions < size(), valid while the cache's version() is the one this backend last
// wrote (truncate keeps it; any other writer or a new cache makes the next pass upload the
// prefix again), and every pass copies its new K/V rows back before committing them.
#include "cuda_backend.h"

#include "forward_graph.h"
#include "rewind/error.h"

#if defined(REWIND_HAVE_CUDA)

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv_storage.h"
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
    cuda::DeviceMatrix tok_embd, head;
    const float* head_norm = nullptr;
    const float* freq_factors = nullptr; // [n_rot / 2] or null
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
        head = upload_matrix(m.output, "output");
        head_norm = upload_vector(m.output_norm, hp.n_embd);
        freq_factors = upload_vector(m.rope_freqs, hp.n_rot / 2);
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
        if (kv_valid && KvStorage::version(cache) == kv_version) return; // truncation keeps the prefix
        kv_valid = false;
        const size_t used = static_cast<size_t>(cache.size()) * row;
        for (size_t il = 0; il < layers.size(); ++il) {
            const auto l = static_cast<int64_t>(il);
            cuda::copy_to_device(kd[il].data(), KvStorage::k_layer(cache, l), used, stream.get(), "KV upload");
            cuda::copy_to_device(vd[il].data(), KvStorage::v_layer(cache, l), used, stream.get(), "KV upload");
        }
        stream.synchronize();
        kv_valid = true;
        kv_version = KvStorage::version(cache);
    }

    // forward_graph.h's ops, each on this backend's stream.
    using Matrix = cuda::DeviceMatrix;
    const LlamaHparams& hparams() const { return m.hparams(); }
    PassBuffers buffers() {
        return PassBuffers{x.as<float>(),    xn.as<float>(),   q.as<float>(),    k.as<float>(),
                           v.as<float>(),    qkv.as<float>(),  attn.as<float>(), proj.as<float>(),
                           gate.as<float>(), up.as<float>(),   logits.as<float>(),
                           ids_h.data(),     pos_h.data(),     nullptr};
    }
    const Layer& layer(int64_t il) const { return layers[static_cast<size_t>(il)]; }
    const Matrix& output() const { return head; }
    const float* output_norm() const { return head_norm; }
    const float* rope_freqs() const { return freq_factors; }
    const int32_t* positions(const int32_t* host, int64_t n) {
        cuda::copy_to_device(pos.data(), host, static_cast<size_t>(n) * 4, stream.get(), "positions");
        return pos.as<int32_t>();
    }
    void embed(const int32_t* host_ids, int64_t n, float* out) {
        cuda::copy_to_device(ids.data(), host_ids, static_cast<size_t>(n) * 4, stream.get(), "token ids");
        cuda::get_rows(tok_embd.type, tok_embd.data, tok_embd.rows, m.hparams().n_embd, ids.as<int32_t>(), n, out,
                       stream.get());
    }
    void rms_norm(const float* in, const float* w, int64_t rows, int64_t cols, float eps, float* out) {
        cuda::rms_norm(in, w, rows, cols, eps, out, stream.get());
    }
    void matmul(const Matrix& w, const float* in, int64_t rows, float* out) {
        cuda::matmul(w, in, rows, out, stream.get());
    }
    void matmul_many(std::initializer_list<MatOut<Matrix>> outs, const float* in, int64_t rows) {
        for (const MatOut<Matrix>& o : outs) matmul(*o.w, in, rows, o.y);
    }
    void copy_cols(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t cols, int64_t rows) {
        cuda::copy_2d_on_device(dst, static_cast<size_t>(dst_stride) * 4, src, static_cast<size_t>(src_stride) * 4,
                                static_cast<size_t>(cols) * 4, static_cast<size_t>(rows), stream.get(),
                                "fused qkv split");
    }
    void add_bias(float* y, const float* bias, int64_t rows, int64_t cols) {
        cuda::add_bias(y, bias, rows, cols, stream.get());
    }
    void rope(float* y, const int32_t* p, int64_t rows, int64_t heads, int64_t head_dim, const RopeParams& rp) {
        cuda::rope(y, p, rows, heads, head_dim, rp, stream.get());
    }
    void scale(float* y, int64_t n, float s) { cuda::scale_inplace(y, n, s, stream.get()); }
    // Into the mirror (the pass's one cache); forward() copies the rows back to the host cache.
    void kv_store(KvCache& cache, int64_t il, int64_t pos0, int64_t rows, const float* kr, const float* vr) {
        const size_t row = cache.bytes_per_position();
        const int64_t n = rows * m.hparams().n_embd_kv();
        auto* kc = static_cast<std::byte*>(kd[static_cast<size_t>(il)].data()) + static_cast<size_t>(pos0) * row;
        auto* vc = static_cast<std::byte*>(vd[static_cast<size_t>(il)].data()) + static_cast<size_t>(pos0) * row;
        cuda::store_kv(kr, n, kv_type, kc, stream.get());
        cuda::store_kv(vr, n, kv_type, vc, stream.get());
    }
    // In launches of at most kAttnChunk queries (the split-K scratch grows with tokens x context).
    void attention(const AttnCall& call, const float* qr, float* out) {
        if (call.gather) // Context refuses token trees on a CUDA device first
            throw Error(ErrorCode::unsupported, "CUDA forward: token trees are not implemented on the device");
        const LlamaHparams& hp = m.hparams();
        const int64_t Q = hp.n_embd_q();
        for (int64_t c0 = 0; c0 < call.n; c0 += kAttnChunk) {
            const int64_t cn = std::min(kAttnChunk, call.n - c0);
            AttentionShape s{cn, call.pos0 + c0, hp.n_head, hp.n_head_kv, hp.head_dim()};
            s.window = call.window;
            s.scale = call.scale;
            cuda::attention(s, qr + c0 * Q, kd[static_cast<size_t>(call.layer)].data(),
                            vd[static_cast<size_t>(call.layer)].data(), kv_type, out + c0 * Q, att_scratch.as<float>(),
                            att_scratch_floats, stream.get());
        }
    }
    // A forward move: pieces no longer than the gap, so no copy overlaps its own source.
    void move_rows(float* dst, const float* src, int64_t n) {
        const int64_t gap = src - dst;
        if (gap == 0) return;
        if (gap < 0) throw Error(ErrorCode::argument, "CUDA move_rows: a backward move");
        for (int64_t i = 0; i < n; i += gap) {
            const int64_t c = std::min(gap, n - i);
            cuda::copy_on_device(dst + i, src + i, static_cast<size_t>(c) * 4, stream.get(), "output rows");
        }
    }
    void glu(FfnAct act, const float* g, const float* u, int64_t rows, int64_t cols, int64_t in_stride, float* out) {
        if (act == FfnAct::Silu) cuda::swiglu(g, u, rows, cols, in_stride, in_stride, out, cols, stream.get());
        else cuda::geglu(g, u, rows, cols, in_stride, in_stride, out, cols, stream.get());
    }
    void add(float* y, const float* in, int64_t n) { cuda::add_inplace(y, in, n, stream.get()); }
    void softcap(float* y, int64_t n, float c) { cuda::softcap(y, n, c, stream.get()); }

    // One pass of the forward graph per chunk of at most max_batch tokens, over the mirror.
    std::span<const float> forward(KvCache& cache, std::span<const TokenId> tokens, Logits which, int64_t out_row) {
        cuda::DeviceScope scope(dev);
        const auto n = static_cast<int64_t>(tokens.size());
        const int64_t n_vocab = m.n_vocab();
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
        for (int64_t done = 0; done < n;) {
            const int64_t nt = std::min(opts.max_batch, n - done);
            PassSegment seg{&cache, tokens.data() + done, nt, n0 + done, 0, done + nt == n ? which : Logits::None};
            run_forward(*this, &seg, 1, nt);
            if (seg.out_n > 0) {
                cuda::copy_to_host(logits_out, logits.data(), static_cast<size_t>(seg.out_n * n_vocab) * 4,
                                   stream.get(), "logits");
                out_rows = seg.out_n;
            }
            download_kv(cache, n0 + done, nt);
            done += nt;
        }
        stream.synchronize(); // a kernel fault surfaces here, before anything is committed
        KvStorage::commit(cache, n0 + n);
        kv_version = KvStorage::version(cache);
        kv_valid = true;
        return {logits_out, static_cast<size_t>(out_rows * n_vocab)};
    }

    // A pass's K/V rows [pos0, pos0 + rows) into the host cache (beyond size(): committed later).
    void download_kv(KvCache& cache, int64_t pos0, int64_t rows) {
        const size_t row = cache.bytes_per_position();
        const size_t off = static_cast<size_t>(pos0) * row, bytes = static_cast<size_t>(rows) * row;
        for (size_t il = 0; il < layers.size(); ++il) {
            cuda::copy_to_host(static_cast<std::byte*>(KvStorage::k_layer(cache, static_cast<int64_t>(il))) + off,
                               static_cast<const std::byte*>(kd[il].data()) + off, bytes, stream.get(), "KV download");
            cuda::copy_to_host(static_cast<std::byte*>(KvStorage::v_layer(cache, static_cast<int64_t>(il))) + off,
                               static_cast<const std::byte*>(vd[il].data()) + off, bytes, stream.get(), "KV download");
        }
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
