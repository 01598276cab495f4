// Flash-decoding attention on the device (rewind/kernels/cuda_attention.h). Pass 1: one block per
// (split of kCudaAttentionSplit positions, head, token) computes the split's scores, their max m,
// sum l of exp(score - m) and the unnormalised sum of exp * V. Pass 2: one block per (head, token)
// merges that token's splits in increasing order. Split boundaries are absolute positions, and
// every reduction has a fixed shape, so a token's output depends only on its own position and data.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "cuda_check.cuh"
#include "rewind/kernels/cuda_attention.h"

namespace rwd::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kSplit = kCudaAttentionSplit;

__device__ __forceinline__ float load_kv(const float* p) { return *p; }
__device__ __forceinline__ float load_kv(const __half* p) { return __half2float(*p); }

__device__ __forceinline__ int64_t visible_lo(int64_t p, int64_t window) {
    return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

template <class KT>
__global__ void __launch_bounds__(kThreads) attn_split_kernel(const float* __restrict__ q, const KT* __restrict__ k,
                                                             const KT* __restrict__ v, int64_t pos0, int64_t n_head,
                                                             int64_t n_head_kv, int64_t hd, int64_t window, float scale,
                                                             int64_t n_splits, float* __restrict__ part) {
    __shared__ float qs[kCudaAttentionMaxHeadDim];
    __shared__ float sc[kSplit];
    __shared__ float red[kThreads];
    const int64_t split = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
    const int64_t p = pos0 + t;
    const int64_t s_lo = split * kSplit;
    const int64_t lo = max(s_lo, visible_lo(p, window));
    const int64_t hi = min(s_lo + kSplit, p + 1);
    if (lo >= hi) return; // this split is not visible to the token (uniform over the block)
    const int64_t cnt = hi - lo, j0 = lo - s_lo;
    const int64_t kvh = h / (n_head / n_head_kv);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    for (int64_t d = tid; d < hd; d += kThreads) qs[d] = q[(t * n_head + h) * hd + d];
    __syncthreads();

    // Scores: warp w takes positions lo + w, lo + w + kWarps, ...; lanes stride over head_dim.
    for (int64_t pos = lo + warp; pos < hi; pos += kWarps) {
        const KT* kr = k + (pos * n_head_kv + kvh) * hd;
        float s = 0.0f;
        for (int64_t d = lane; d < hd; d += 32) s = fmaf(qs[d], load_kv(kr + d), s);
        for (int off = 16; off > 0; off >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
        if (lane == 0) sc[pos - s_lo] = __fmul_rn(s, scale);
    }
    __syncthreads();

    // Max over the split (fixed tree).
    float m = -INFINITY;
    for (int64_t j = tid; j < cnt; j += kThreads) m = fmaxf(m, sc[j0 + j]);
    red[tid] = m;
    __syncthreads();
    for (int off = kThreads / 2; off > 0; off >>= 1) {
        if (tid < off) red[tid] = fmaxf(red[tid], red[tid + off]);
        __syncthreads();
    }
    const float mx = red[0];
    __syncthreads();

    // exp(score - max) in place, and their sum (each thread's in order, then a fixed tree).
    float l = 0.0f;
    for (int64_t j = tid; j < cnt; j += kThreads) {
        const float e = expf(__fsub_rn(sc[j0 + j], mx));
        sc[j0 + j] = e;
        l = __fadd_rn(l, e);
    }
    red[tid] = l;
    __syncthreads();
    for (int off = kThreads / 2; off > 0; off >>= 1) {
        if (tid < off) red[tid] = __fadd_rn(red[tid], red[tid + off]);
        __syncthreads();
    }

    float* out = part + ((t * n_head + h) * n_splits + split) * (hd + 2);
    for (int64_t d = tid; d < hd; d += kThreads) {
        float o = 0.0f;
        for (int64_t j = 0; j < cnt; ++j) o = fmaf(sc[j0 + j], load_kv(v + ((lo + j) * n_head_kv + kvh) * hd + d), o);
        out[d] = o;
    }
    if (tid == 0) {
        out[hd] = mx;
        out[hd + 1] = red[0];
    }
}

__global__ void __launch_bounds__(kThreads) attn_merge_kernel(const float* __restrict__ part, int64_t pos0,
                                                             int64_t n_head, int64_t hd, int64_t window,
                                                             int64_t n_splits, float* __restrict__ out) {
    const int64_t h = blockIdx.x, t = blockIdx.y;
    const int64_t p = pos0 + t;
    const int64_t first = visible_lo(p, window) / kSplit, last = p / kSplit;
    const float* base = part + (t * n_head + h) * n_splits * (hd + 2);
    float mx = -INFINITY;
    for (int64_t s = first; s <= last; ++s) mx = fmaxf(mx, base[s * (hd + 2) + hd]);
    float l = 0.0f;
    for (int64_t s = first; s <= last; ++s) {
        const float* ps = base + s * (hd + 2);
        l = fmaf(ps[hd + 1], expf(__fsub_rn(ps[hd], mx)), l);
    }
    for (int64_t d = threadIdx.x; d < hd; d += kThreads) {
        float o = 0.0f;
        for (int64_t s = first; s <= last; ++s) {
            const float* ps = base + s * (hd + 2);
            o = fmaf(ps[d], expf(__fsub_rn(ps[hd], mx)), o);
        }
        out[(t * n_head + h) * hd + d] = __fdiv_rn(o, l);
    }
}

void check_shape(const AttentionShape& s) {
    const char* who = "cuda::attention";
    if (s.n_tokens <= 0 || s.pos0 < 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.head_dim <= 0 || s.window < 0)
        throw Error(ErrorCode::shape, std::string(who) + ": bad shape (a non-positive size or a negative position)");
    if (s.n_head % s.n_head_kv != 0)
        throw Error(ErrorCode::shape, std::string(who) + ": n_head " + std::to_string(s.n_head) +
                                          " is not a multiple of n_head_kv " + std::to_string(s.n_head_kv));
    if (s.head_dim > kCudaAttentionMaxHeadDim)
        throw Error(ErrorCode::unsupported, std::string(who) + ": head_dim " + std::to_string(s.head_dim) + " above " +
                                                std::to_string(kCudaAttentionMaxHeadDim));
    if (s.n_tokens > 65535 || s.n_head > 65535)
        throw Error(ErrorCode::shape, std::string(who) + ": more than 65535 tokens or heads in one call");
    if (!(s.scale >= 0.0f) || !std::isfinite(s.scale)) throw Error(std::string(who) + ": scale must be finite and >= 0");
}

int64_t n_splits_of(const AttentionShape& s) { return (s.pos0 + s.n_tokens + kSplit - 1) / kSplit; }

} // namespace

int64_t attention_scratch_floats(const AttentionShape& s) {
    check_shape(s);
    return s.n_tokens * s.n_head * n_splits_of(s) * (s.head_dim + 2);
}

void attention(const AttentionShape& s, const float* q, const void* k, const void* v, DType kv_type, float* out,
               float* scratch, int64_t scratch_floats, StreamHandle stream) {
    const char* who = "cuda::attention";
    check_shape(s);
    if (!q || !k || !v || !out || !scratch) throw Error(std::string(who) + ": null pointer");
    if (scratch_floats < attention_scratch_floats(s))
        throw Error(ErrorCode::shape, std::string(who) + ": scratch of " + std::to_string(scratch_floats) +
                                          " floats, need " + std::to_string(attention_scratch_floats(s)));
    if (kv_type != DType::F32 && kv_type != DType::F16)
        throw Error(ErrorCode::unsupported, std::string(who) + ": KV type must be F32 or F16");
    const int64_t n_splits = n_splits_of(s);
    if (n_splits >= (int64_t(1) << 31)) throw Error(ErrorCode::shape, std::string(who) + ": context too long");
    const float scale = s.scale == 0.0f ? 1.0f / std::sqrt(float(s.head_dim)) : s.scale;
    const dim3 g1(static_cast<unsigned>(n_splits), static_cast<unsigned>(s.n_head), static_cast<unsigned>(s.n_tokens));
    if (kv_type == DType::F32)
        attn_split_kernel<float><<<g1, kThreads, 0, stream>>>(q, static_cast<const float*>(k), static_cast<const float*>(v),
                                                             s.pos0, s.n_head, s.n_head_kv, s.head_dim, s.window, scale,
                                                             n_splits, scratch);
    else
        attn_split_kernel<__half><<<g1, kThreads, 0, stream>>>(q, static_cast<const __half*>(k),
                                                              static_cast<const __half*>(v), s.pos0, s.n_head,
                                                              s.n_head_kv, s.head_dim, s.window, scale, n_splits, scratch);
    check_launch(who);
    const dim3 g2(static_cast<unsigned>(s.n_head), static_cast<unsigned>(s.n_tokens));
    attn_merge_kernel<<<g2, kThreads, 0, stream>>>(scratch, s.pos0, s.n_head, s.head_dim, s.window, n_splits, out);
    check_launch(who);
}

} // namespace rwd::cuda
