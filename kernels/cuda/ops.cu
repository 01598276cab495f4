// Per-token kernels of the transformer block on the device (rewind/kernels/cuda_ops.h): one
// thread block per row where a row is reduced (fixed trees), one thread per element elsewhere.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "cuda_check.cuh"
#include "cuda_types.cuh"
#include "rewind/kernels/cuda_ops.h"

namespace rwd::cuda {

namespace {

constexpr int kBlock = 256;

void need(bool ok, ErrorCode code, const char* who, const char* what) {
    if (!ok) throw Error(code, std::string(who) + ": " + what);
}

// ---- RMSNorm: squares rounded to float, summed in double (as the CPU kernel), fixed tree.
__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w, int64_t dim, float eps,
                                float* out) {
    __shared__ double part[kBlock];
    const int64_t row = blockIdx.x;
    const float* xr = x + row * dim;
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < dim; i += kBlock) {
        const float v = xr[i];
        s += double(__fmul_rn(v, v));
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int off = kBlock / 2; off > 0; off >>= 1) {
        if (threadIdx.x < off) part[threadIdx.x] += part[threadIdx.x + off];
        __syncthreads();
    }
    const float mean = float(part[0] / double(dim));
    const float scale = 1.0f / sqrtf(mean + eps);
    float* o = out + row * dim;
    for (int64_t i = threadIdx.x; i < dim; i += kBlock) o[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
}

// ---- rope: one thread per (token, head, pair); theta stepped by repeated multiplication as ggml.
__global__ void rope_kernel(float* x, const int32_t* __restrict__ pos, int64_t n_tokens, int64_t n_heads,
                            int64_t head_dim, int64_t half, int neox, float theta_scale, float freq_scale,
                            const float* __restrict__ factors) {
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t total = n_tokens * n_heads * half;
    if (idx >= total) return;
    const int64_t i = idx % half;
    const int64_t h = (idx / half) % n_heads;
    const int64_t t = idx / (half * n_heads);
    float theta = float(pos[t]);
    for (int64_t j = 0; j < i; ++j) theta = __fmul_rn(theta, theta_scale);
    const float ff = factors ? factors[i] : 1.0f;
    const float th = __fmul_rn(freq_scale, __fdiv_rn(theta, ff));
    const float c = cosf(th), s = sinf(th);
    float* ph = x + (t * n_heads + h) * head_dim;
    float* a = ph + (neox ? i : 2 * i);
    float* b = a + (neox ? half : 1);
    const float x0 = *a, x1 = *b;
    *a = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    *b = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// ---- gated activations over rows with strides.
template <bool Gelu>
__global__ void glu_kernel(const float* gate, const float* up, int64_t rows, int64_t n, int64_t gs, int64_t us,
                           float* out, int64_t os) {
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= rows * n) return;
    const int64_t t = idx / n, i = idx % n;
    const float g = gate[t * gs + i];
    const float u = up[t * us + i];
    float a;
    if (Gelu) {
        const float kSqrt2OverPi = 0.79788456080286535587989211986876f;
        const float inner = __fmul_rn(__fmul_rn(kSqrt2OverPi, g), __fadd_rn(1.0f, __fmul_rn(__fmul_rn(0.044715f, g), g)));
        a = __fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, tanhf(inner)));
    } else {
        a = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
    }
    out[t * os + i] = __fmul_rn(a, u);
}

__global__ void add_bias_kernel(float* x, const float* __restrict__ b, int64_t rows, int64_t dim) {
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx < rows * dim) x[idx] = __fadd_rn(x[idx], b[idx % dim]);
}
__global__ void scale_kernel(float* x, int64_t n, float s) {
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx < n) x[idx] = __fmul_rn(x[idx], s);
}
__global__ void add_kernel(float* y, const float* __restrict__ x, int64_t n) {
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx < n) y[idx] = __fadd_rn(y[idx], x[idx]);
}
__global__ void softcap_kernel(float* x, int64_t n, float c) {
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx < n) x[idx] = __fmul_rn(tanhf(__fmul_rn(x[idx], 1.0f / c)), c);
}

template <DType T>
__global__ void get_rows_kernel(const void* __restrict__ table, int64_t n_rows, int64_t cols,
                                const int32_t* __restrict__ ids, float* out) {
    const int64_t t = blockIdx.y;
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= cols) return;
    const int64_t id = ids[t];
    float v;
    if (id < 0 || id >= n_rows) {
        v = __int_as_float(0x7fc00000); // NaN: the host validated ids; never read out of bounds
    } else if (T == DType::F32) {
        v = static_cast<const float*>(table)[id * cols + i];
    } else if (T == DType::F16) {
        v = half_bits_to_float(static_cast<const uint16_t*>(table)[id * cols + i]);
    } else if (T == DType::BF16) {
        v = bf16_bits_to_float(static_cast<const uint16_t*>(table)[id * cols + i]);
    } else {
        const DevBlockQ8_0* row = static_cast<const DevBlockQ8_0*>(table) + id * (cols / 32);
        const DevBlockQ8_0& b = row[i / 32];
        v = __fmul_rn(half_bits_to_float(b.d), float(b.qs[i % 32]));
    }
    out[t * cols + i] = v;
}

__global__ void store_f16_kernel(const float* __restrict__ src, int64_t n, __half* dst) {
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx < n) dst[idx] = __float2half_rn(src[idx]);
}

// (value, index) order for argmax: larger value wins, lower index on ties, NaN never wins.
__device__ __forceinline__ bool better(float bv, int64_t bi, float av, int64_t ai) {
    if (isnan(bv)) return false;
    if (isnan(av)) return true;
    return bv > av || (bv == av && bi < ai);
}

__global__ void argmax_kernel(const float* __restrict__ x, int64_t n, int32_t* out) {
    __shared__ float sv[kBlock];
    __shared__ int64_t si[kBlock];
    const float* xr = x + int64_t(blockIdx.x) * n;
    float bv = __int_as_float(0x7fc00000);
    int64_t bi = n; // sentinel: nothing seen
    for (int64_t i = threadIdx.x; i < n; i += kBlock)
        if (better(xr[i], i, bv, bi)) { bv = xr[i]; bi = i; }
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int off = kBlock / 2; off > 0; off >>= 1) {
        if (threadIdx.x < off && better(sv[threadIdx.x + off], si[threadIdx.x + off], sv[threadIdx.x], si[threadIdx.x])) {
            sv[threadIdx.x] = sv[threadIdx.x + off];
            si[threadIdx.x] = si[threadIdx.x + off];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = int32_t(si[0] >= n ? 0 : si[0]);
}

constexpr int64_t kMaxGrid = int64_t(1) << 31; // grid x limit (2^31 - 1 blocks)

void check_elements(int64_t n, const char* who) {
    need(n >= 0, ErrorCode::shape, who, "negative size");
    need((n + kBlock - 1) / kBlock < kMaxGrid, ErrorCode::shape, who, "too many elements for one launch");
}

} // namespace

void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out,
              StreamHandle stream) {
    need(x && weight && out, ErrorCode::argument, "cuda::rms_norm", "null pointer");
    need(rows > 0 && dim > 0, ErrorCode::shape, "cuda::rms_norm", "non-positive size");
    need(rows < kMaxGrid, ErrorCode::shape, "cuda::rms_norm", "too many rows");
    rms_norm_kernel<<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(x, weight, dim, eps, out);
    check_launch("cuda::rms_norm");
}

void rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          const RopeParams& p, StreamHandle stream) {
    const char* who = "cuda::rope";
    need(x && positions, ErrorCode::argument, who, "null pointer");
    need(n_tokens > 0 && n_heads > 0 && head_dim > 0, ErrorCode::shape, who, "non-positive size");
    need(p.n_rot > 0 && p.n_rot % 2 == 0 && p.n_rot <= head_dim, ErrorCode::shape, who,
         "n_rot must be even, positive and <= head_dim");
    need(p.mode == RopeMode::Norm || p.mode == RopeMode::Neox, ErrorCode::argument, who, "unknown mode");
    need(p.freq_base > 0.0f && std::isfinite(p.freq_base), ErrorCode::argument, who, "freq_base must be positive");
    need(p.freq_scale > 0.0f && std::isfinite(p.freq_scale), ErrorCode::argument, who, "freq_scale must be positive");
    need(!p.fused, ErrorCode::unsupported, who, "the fused (llama.cpp) rounding is CPU-only");
    const int64_t half = p.n_rot / 2;
    const int64_t total = n_tokens * n_heads * half;
    check_elements(total, who);
    if (total == 0) return;
    const float theta_scale = std::pow(p.freq_base, -2.0f / float(p.n_rot)); // the CPU kernel's expression
    rope_kernel<<<grid_1d(total, kBlock), kBlock, 0, stream>>>(x, positions, n_tokens, n_heads, head_dim, half,
                                                               p.mode == RopeMode::Neox ? 1 : 0, theta_scale,
                                                               p.freq_scale, p.freq_factors);
    check_launch(who);
}

namespace {
template <bool Gelu>
void glu(const float* gate, const float* up, int64_t rows, int64_t n, int64_t gs, int64_t us, float* out, int64_t os,
         StreamHandle stream, const char* who) {
    need(gate && up && out, ErrorCode::argument, who, "null pointer");
    need(rows >= 0 && n >= 0, ErrorCode::shape, who, "negative size");
    need(gs >= n && us >= n && os >= n, ErrorCode::shape, who, "a row stride is shorter than the row");
    check_elements(rows * n, who);
    if (rows * n == 0) return;
    glu_kernel<Gelu><<<grid_1d(rows * n, kBlock), kBlock, 0, stream>>>(gate, up, rows, n, gs, us, out, os);
    check_launch(who);
}
} // namespace

void swiglu(const float* gate, const float* up, int64_t rows, int64_t n, int64_t gate_stride, int64_t up_stride,
            float* out, int64_t out_stride, StreamHandle stream) {
    glu<false>(gate, up, rows, n, gate_stride, up_stride, out, out_stride, stream, "cuda::swiglu");
}
void geglu(const float* gate, const float* up, int64_t rows, int64_t n, int64_t gate_stride, int64_t up_stride,
           float* out, int64_t out_stride, StreamHandle stream) {
    glu<true>(gate, up, rows, n, gate_stride, up_stride, out, out_stride, stream, "cuda::geglu");
}

void add_bias(float* x, const float* bias, int64_t rows, int64_t dim, StreamHandle stream) {
    need(x && bias, ErrorCode::argument, "cuda::add_bias", "null pointer");
    need(rows >= 0 && dim > 0, ErrorCode::shape, "cuda::add_bias", "bad size");
    check_elements(rows * dim, "cuda::add_bias");
    if (rows == 0) return;
    add_bias_kernel<<<grid_1d(rows * dim, kBlock), kBlock, 0, stream>>>(x, bias, rows, dim);
    check_launch("cuda::add_bias");
}

void scale_inplace(float* x, int64_t n, float s, StreamHandle stream) {
    need(x != nullptr, ErrorCode::argument, "cuda::scale_inplace", "null pointer");
    check_elements(n, "cuda::scale_inplace");
    if (n == 0) return;
    scale_kernel<<<grid_1d(n, kBlock), kBlock, 0, stream>>>(x, n, s);
    check_launch("cuda::scale_inplace");
}

void add_inplace(float* y, const float* x, int64_t n, StreamHandle stream) {
    need(x && y, ErrorCode::argument, "cuda::add_inplace", "null pointer");
    check_elements(n, "cuda::add_inplace");
    if (n == 0) return;
    add_kernel<<<grid_1d(n, kBlock), kBlock, 0, stream>>>(y, x, n);
    check_launch("cuda::add_inplace");
}

void softcap(float* x, int64_t n, float c, StreamHandle stream) {
    need(x != nullptr, ErrorCode::argument, "cuda::softcap", "null pointer");
    need(c > 0.0f && std::isfinite(c), ErrorCode::argument, "cuda::softcap", "the cap must be positive");
    check_elements(n, "cuda::softcap");
    if (n == 0) return;
    softcap_kernel<<<grid_1d(n, kBlock), kBlock, 0, stream>>>(x, n, c);
    check_launch("cuda::softcap");
}

void get_rows(DType type, const void* table, int64_t n_rows, int64_t cols, const int32_t* ids, int64_t n, float* out,
              StreamHandle stream) {
    const char* who = "cuda::get_rows";
    need(table && ids && out, ErrorCode::argument, who, "null pointer");
    need(n_rows > 0 && cols > 0 && n >= 0, ErrorCode::shape, who, "bad size");
    need(n < 65536, ErrorCode::shape, who, "more than 65535 rows in one call");
    if (n == 0) return;
    const dim3 grid(grid_1d(cols, kBlock), static_cast<unsigned>(n));
    switch (type) {
    case DType::F32: get_rows_kernel<DType::F32><<<grid, kBlock, 0, stream>>>(table, n_rows, cols, ids, out); break;
    case DType::F16: get_rows_kernel<DType::F16><<<grid, kBlock, 0, stream>>>(table, n_rows, cols, ids, out); break;
    case DType::BF16: get_rows_kernel<DType::BF16><<<grid, kBlock, 0, stream>>>(table, n_rows, cols, ids, out); break;
    case DType::Q8_0:
        need(cols % 32 == 0, ErrorCode::shape, who, "Q8_0 rows must be whole blocks of 32");
        get_rows_kernel<DType::Q8_0><<<grid, kBlock, 0, stream>>>(table, n_rows, cols, ids, out);
        break;
    default: throw Error(ErrorCode::unsupported, std::string(who) + ": table type not supported on CUDA (F32, F16, BF16, Q8_0)");
    }
    check_launch(who);
}

void store_kv(const float* src, int64_t n, DType kv_type, void* dst, StreamHandle stream) {
    const char* who = "cuda::store_kv";
    need(src && dst, ErrorCode::argument, who, "null pointer");
    check_elements(n, who);
    if (n == 0) return;
    if (kv_type == DType::F32) {
        check(cudaMemcpyAsync(dst, src, size_t(n) * 4, cudaMemcpyDeviceToDevice, stream), who);
    } else if (kv_type == DType::F16) {
        store_f16_kernel<<<grid_1d(n, kBlock), kBlock, 0, stream>>>(src, n, static_cast<__half*>(dst));
        check_launch(who);
    } else {
        throw Error(ErrorCode::unsupported, std::string(who) + ": KV type must be F32 or F16");
    }
}

void argmax(const float* x, int64_t rows, int64_t n, int32_t* out, StreamHandle stream) {
    need(x && out, ErrorCode::argument, "cuda::argmax", "null pointer");
    need(rows > 0 && n > 0, ErrorCode::shape, "cuda::argmax", "non-positive size");
    need(rows < kMaxGrid && n <= INT32_MAX, ErrorCode::shape, "cuda::argmax", "too large");
    argmax_kernel<<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(x, n, out);
    check_launch("cuda::argmax");
}

} // namespace rwd::cuda
