// The CPU backend of the forward graph (private to runtime): run buffers sized once, the thread
// pool, and the kernel-dispatch policy (Numerics, packed layouts, shared activation quantization)
// behind the ops forward_graph.h asks for.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "forward_graph.h"
#include "rewind/context.h"
#include "rewind/kernels/packed.h"

namespace rwd {

class CpuBackend {
public:
    using Matrix = MatrixView;
    using Layer = Model::Layer;

    // Sizes every run buffer for opts.max_batch rows (opts.pool or a pool of n_threads), and
    // attention's scratch for caches of up to min(n_ctx_train, kDefaultKvCapacity) positions.
    CpuBackend(const Model& model, const ContextOptions& opts, std::shared_ptr<ThreadPool> pool);
    ~CpuBackend();
    CpuBackend(const CpuBackend&) = delete;
    CpuBackend& operator=(const CpuBackend&) = delete;

    // Grows attention's scratch to serve every pass of a cache of `capacity` positions.
    void fit_attention(int64_t capacity);
    PassSegment* segments(); // [max_batch] forward_batch's sequences (each >= 1 token)
    const float* logits() const;

    // forward_graph.h's ops.
    const LlamaHparams& hparams() const { return m_.hparams(); }
    PassBuffers buffers() const { return bufs_; }
    const Layer& layer(int64_t il) const { return m_.layers[static_cast<size_t>(il)]; }
    const Matrix& output() const { return m_.output; }
    const float* output_norm() const { return m_.output_norm; }
    const float* rope_freqs() const { return m_.rope_freqs; }
    const int32_t* positions(const int32_t* pos, int64_t) { return pos; }
    void embed(const int32_t* ids, int64_t rows, float* x);
    void rms_norm(const float* x, const float* w, int64_t rows, int64_t cols, float eps, float* out);
    void matmul(const Matrix& w, const float* x, int64_t rows, float* y);
    void matmul_many(std::initializer_list<MatOut<Matrix>> outs, const float* x, int64_t rows);
    void copy_cols(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t cols, int64_t rows);
    void add_bias(float* x, const float* bias, int64_t rows, int64_t cols);
    void rope(float* x, const int32_t* pos, int64_t rows, int64_t heads, int64_t head_dim, const RopeParams& p);
    void scale(float* x, int64_t n, float s);
    void kv_store(KvCache& cache, int64_t layer, int64_t pos0, int64_t rows, const float* k, const float* v);
    void attention(const AttnCall& call, const float* q, float* out);
    void move_rows(float* dst, const float* src, int64_t n);
    void glu(FfnAct act, const float* gate, const float* up, int64_t rows, int64_t cols, int64_t in_stride, float* out);
    void add(float* y, const float* x, int64_t n);
    void softcap(float* x, int64_t n, float c);
    // The expert FFN of a layer with experts over `rows` normed rows xn, into out [rows, n_embd]
    // (forward_graph.h's graph::moe_ffn states the arithmetic).
    void moe_ffn(const Layer& L, const float* xn, int64_t rows, float* out);
    // Experts moe_ffn read (one per layer and pass each) since the last reset.
    int64_t experts_read() const { return experts_read_; }
    void reset_experts_read() { experts_read_ = 0; }

private:
    struct Buffers;
    PackedLayout shared_layout(std::initializer_list<MatOut<Matrix>> outs) const;
    // moe_ffn's experts when all the touched ones are packed K-quants (Exact numerics): every
    // gate and up product of the layer as one pool job, then every down product as another.
    // False (nothing written) when another layout is among them; the caller then runs them one
    // by one.
    bool moe_experts_kq(int64_t il, int64_t rows, const float* xn);

    const Model& m_;
    ContextOptions opts_; // the Context's, after its clamping (pool and n_threads settled)
    std::shared_ptr<ThreadPool> pool_;
    std::unique_ptr<Buffers> buf_;
    PassBuffers bufs_{};
    int64_t experts_read_ = 0;
};

} // namespace rwd
