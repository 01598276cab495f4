// The CUDA backend of Context (private to runtime): weights uploaded once, a device mirror of
// the KV cache, run buffers, and the ops of the forward graph (forward_graph.h) on the kernels of
// rewind/kernels/cuda_*.h, for passes over 1..N tokens. Each backend owns its stream and buffers
// on its device (no process-global CUDA state), so several may share one GPU. Builds without
// CUDA get a constructor that throws rwd::Error (unsupported).
#pragma once
#include <memory>
#include <span>

#include "rewind/context.h"

namespace rwd {

class CudaBackend {
public:
    // Uploads the model's weights to opts.device. Throws rwd::Error: unsupported (no CUDA build or
    // device, a weight type the kernels lack), capacity (device memory).
    CudaBackend(const Model& model, const ContextOptions& opts);
    ~CudaBackend();
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    // Context::forward after its validation (tokens in range, the cache fits and belongs to the
    // model, Logits::All within max_batch). Writes the new K/V into `cache` and commits it. The
    // logits go to rows out_row.. of the backend's [max_batch, n_vocab] output (forward_batch
    // lays sequences side by side; out_row + returned rows <= max_batch); valid until the next
    // call that writes those rows.
    std::span<const float> forward(KvCache& cache, std::span<const TokenId> tokens, Logits which, int64_t out_row);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace rwd
