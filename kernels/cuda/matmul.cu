// y = x · Wᵀ on the device for F32 / F16 / BF16 / Q8_0 weights (rewind/kernels/cuda_matmul.h).
// One warp per weight row and tile of up to kCudaMatmulTile tokens: lane l accumulates columns
// l*V .. l*V+V-1, then those + 32*V, ... (V elements per 16-byte load; Q8_0: block l, l+32, ...)
// with explicit fmaf in a fixed order, then a fixed xor butterfly sums the 32 lanes. A token's
// arithmetic never depends on the other tokens of the tile or the call.
#include <cuda_runtime.h>

#include <string>

#include "cuda_check.cuh"
#include "cuda_types.cuh"
#include "rewind/kernels/cuda_matmul.h"

namespace rwd::cuda {

namespace {

constexpr int kTile = kCudaMatmulTile;
constexpr int kWarps = 4; // rows per block
constexpr int kThreads = 32 * kWarps;

__device__ __forceinline__ float warp_sum(float v) {
    // Fixed butterfly: every lane ends with the same value (fp addition is commutative).
    for (int off = 16; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

template <DType T>
__device__ __forceinline__ float load_elem(const void* row, int64_t k) {
    if constexpr (T == DType::F32) return static_cast<const float*>(row)[k];
    else if constexpr (T == DType::F16) return half_bits_to_float(static_cast<const uint16_t*>(row)[k]);
    else return bf16_bits_to_float(static_cast<const uint16_t*>(row)[k]);
}

// Loads 8 consecutive elements starting at k (k a multiple of 8; 16-byte aligned for the 16-bit
// types, two 16-byte loads for F32).
template <DType T>
__device__ __forceinline__ void load8(const void* row, int64_t k, float w[8]) {
    if constexpr (T == DType::F32) {
        const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(row) + k);
        const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(row) + k + 4);
        w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
    } else {
        const uint4 u = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(row) + k);
        const uint32_t p[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint16_t lo = uint16_t(p[i] & 0xffffu), hi = uint16_t(p[i] >> 16);
            if constexpr (T == DType::F16) {
                w[2 * i] = half_bits_to_float(lo);
                w[2 * i + 1] = half_bits_to_float(hi);
            } else {
                w[2 * i] = bf16_bits_to_float(lo);
                w[2 * i + 1] = bf16_bits_to_float(hi);
            }
        }
    }
}

// Float weights. Vec: cols % 8 == 0 (16-byte loads); otherwise one element per step.
template <DType T, bool Vec>
__global__ void __launch_bounds__(kThreads) matmul_float_kernel(const void* __restrict__ w, int64_t rows, int64_t cols,
                                                               const float* __restrict__ x, int64_t n, float* __restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (r >= rows) return; // whole warps leave together: r is uniform in a warp
    const int64_t t0 = int64_t(blockIdx.y) * kTile;
    const int nt = int(n - t0 < kTile ? n - t0 : kTile);
    const size_t esz = T == DType::F32 ? 4 : 2;
    const void* row = static_cast<const char*>(w) + size_t(r) * size_t(cols) * esz;
    float acc[kTile];
#pragma unroll
    for (int j = 0; j < kTile; ++j) acc[j] = 0.0f;
    if constexpr (Vec) {
        for (int64_t k = int64_t(lane) * 8; k < cols; k += 32 * 8) {
            float wv[8];
            load8<T>(row, k, wv);
#pragma unroll
            for (int j = 0; j < kTile; ++j) {
                if (j < nt) {
                    const float* xr = x + (t0 + j) * cols + k;
                    const float4 a = *reinterpret_cast<const float4*>(xr);
                    const float4 b = *reinterpret_cast<const float4*>(xr + 4);
                    float s = acc[j];
                    s = fmaf(wv[0], a.x, s); s = fmaf(wv[1], a.y, s); s = fmaf(wv[2], a.z, s); s = fmaf(wv[3], a.w, s);
                    s = fmaf(wv[4], b.x, s); s = fmaf(wv[5], b.y, s); s = fmaf(wv[6], b.z, s); s = fmaf(wv[7], b.w, s);
                    acc[j] = s;
                }
            }
        }
    } else {
        for (int64_t k = lane; k < cols; k += 32) {
            const float wv = load_elem<T>(row, k);
#pragma unroll
            for (int j = 0; j < kTile; ++j)
                if (j < nt) acc[j] = fmaf(wv, x[(t0 + j) * cols + k], acc[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
        const float s = warp_sum(acc[j]); // every lane takes part: shuffles need the full warp
        if (lane == 0 && j < nt) y[(t0 + j) * rows + r] = s;
    }
}

// Q8_0: lane l takes blocks l, l + 32, ...; a block's 32 products are summed in order, then
// scaled once by the block's d (as the dequantised product d * sum q_i x_i).
__global__ void __launch_bounds__(kThreads) matmul_q8_0_kernel(const DevBlockQ8_0* __restrict__ w, int64_t rows,
                                                              int64_t cols, const float* __restrict__ x, int64_t n,
                                                              float* __restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (r >= rows) return;
    const int64_t t0 = int64_t(blockIdx.y) * kTile;
    const int nt = int(n - t0 < kTile ? n - t0 : kTile);
    const int64_t nb = cols / 32;
    const DevBlockQ8_0* row = w + r * nb;
    float acc[kTile];
#pragma unroll
    for (int j = 0; j < kTile; ++j) acc[j] = 0.0f;
    for (int64_t b = lane; b < nb; b += 32) {
        const DevBlockQ8_0* blk = row + b;
        const float d = half_bits_to_float(blk->d);
        // 34-byte blocks are only 2-byte aligned: read the quants as 16 halfwords.
        const uint16_t* q16 = reinterpret_cast<const uint16_t*>(blk->qs);
        float q[32];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            const uint16_t v = q16[i];
            q[2 * i] = float(int8_t(v & 0xff));
            q[2 * i + 1] = float(int8_t(v >> 8));
        }
#pragma unroll
        for (int j = 0; j < kTile; ++j) {
            if (j < nt) {
                const float4* xr = reinterpret_cast<const float4*>(x + (t0 + j) * cols + b * 32);
                float s = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const float4 v = xr[i];
                    s = fmaf(q[4 * i], v.x, s);
                    s = fmaf(q[4 * i + 1], v.y, s);
                    s = fmaf(q[4 * i + 2], v.z, s);
                    s = fmaf(q[4 * i + 3], v.w, s);
                }
                acc[j] = fmaf(d, s, acc[j]);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
        const float s = warp_sum(acc[j]);
        if (lane == 0 && j < nt) y[(t0 + j) * rows + r] = s;
    }
}

template <DType T>
void launch_float(const DeviceMatrix& w, const float* x, int64_t n, float* y, dim3 grid, StreamHandle stream) {
    if (w.cols % 8 == 0)
        matmul_float_kernel<T, true><<<grid, kThreads, 0, stream>>>(w.data, w.rows, w.cols, x, n, y);
    else
        matmul_float_kernel<T, false><<<grid, kThreads, 0, stream>>>(w.data, w.rows, w.cols, x, n, y);
}

} // namespace

bool matmul_supports(DType type) {
    return type == DType::F32 || type == DType::F16 || type == DType::BF16 || type == DType::Q8_0;
}

void matmul(const DeviceMatrix& w, const float* x, int64_t n_tokens, float* y, StreamHandle stream) {
    const char* who = "cuda::matmul";
    if (!w.data || !x || !y) throw Error(std::string(who) + ": null pointer");
    if (w.rows <= 0 || w.cols <= 0 || n_tokens <= 0)
        throw Error(ErrorCode::shape, std::string(who) + ": non-positive size (rows " + std::to_string(w.rows) + ", cols " +
                                          std::to_string(w.cols) + ", tokens " + std::to_string(n_tokens) + ")");
    if (!matmul_supports(w.type))
        throw Error(ErrorCode::unsupported, std::string(who) + ": weight type " + std::string(dtype_name(w.type)) +
                                                " is not supported on CUDA (F32, F16, BF16, Q8_0)");
    const int64_t gx = (w.rows + kWarps - 1) / kWarps;
    const int64_t gy = (n_tokens + kTile - 1) / kTile;
    if (gx >= (int64_t(1) << 31) || gy > 65535)
        throw Error(ErrorCode::shape, std::string(who) + ": too many rows or tokens for one launch");
    const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
    // The vector bodies read 16 bytes at a time; a misaligned pointer is refused rather than sent
    // down another body, whose reduction order would differ.
    const bool vec = w.type == DType::Q8_0 || w.cols % 8 == 0;
    if (vec && ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w.type == DType::Q8_0 ? nullptr : w.data)) % 16 != 0))
        throw Error(ErrorCode::argument, std::string(who) + ": x and W must be 16-byte aligned");
    // The vector paths read x rows 16 bytes at a time: cols % 8 == 0 keeps them aligned (cudaMalloc
    // gives 256-byte aligned bases; callers pass whole-row offsets).
    switch (w.type) {
    case DType::F32: launch_float<DType::F32>(w, x, n_tokens, y, grid, stream); break;
    case DType::F16: launch_float<DType::F16>(w, x, n_tokens, y, grid, stream); break;
    case DType::BF16: launch_float<DType::BF16>(w, x, n_tokens, y, grid, stream); break;
    case DType::Q8_0:
        if (w.cols % 32 != 0)
            throw Error(ErrorCode::shape, std::string(who) + ": Q8_0 rows must be whole blocks of 32, got " + std::to_string(w.cols));
        matmul_q8_0_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const DevBlockQ8_0*>(w.data), w.rows, w.cols, x,
                                                           n_tokens, y);
        break;
    default: break;
    }
    check_launch(who);
}

} // namespace rwd::cuda
