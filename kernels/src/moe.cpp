// Expert routing: the portable router product, softmax top-k with its fixed tie rule, and the
// counting sort that groups a pass's rows by expert. Plain C++, never dispatched by SIMD level.
#include "rewind/kernels/moe.h"

#include <string>

#include "rewind/error.h"
#include "rewind/kernels/thread_pool.h"
#include "simd_math_model.h"

namespace rwd {

namespace {

void require(bool ok, const char* fn, const char* what) {
    if (!ok) throw Error(ErrorCode::argument, std::string(fn) + ": " + what);
}

constexpr int kLanes = 16;

float dot_portable(const float* a, const float* b, int64_t n) {
    float acc[kLanes] = {};
    int64_t k = 0;
    for (; k + kLanes <= n; k += kLanes)
        for (int l = 0; l < kLanes; ++l) acc[l] += a[k + l] * b[k + l];
    for (int l = 0; k < n; ++k, ++l) acc[l] += a[k] * b[k];
    for (int w = kLanes / 2; w > 0; w /= 2) // pairwise: lanes l and l + w
        for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
    return acc[0];
}

} // namespace

void matmul_f32_portable(const float* w, int64_t rows, int64_t cols, const float* x, int64_t n_tokens, float* y,
                         ThreadPool* pool) {
    require(w && x && y, "matmul_f32_portable", "null pointer");
    require(rows > 0 && cols > 0 && n_tokens > 0, "matmul_f32_portable", "sizes must be positive");
    // Threads take runs of weight rows, each row then over every token (read once per pass). Below
    // about 4M multiply-adds a dispatch to the pool costs more than it saves (one token through a
    // 128 x 2048 router: 0.02 ms alone, 0.1 ms through a 2-thread pool on a busy 2-core machine).
    if (n_tokens * rows * cols < (int64_t{1} << 22)) pool = nullptr;
    parallel_rows(pool, rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t t = 0; t < n_tokens; ++t) y[t * rows + r] = dot_portable(w + r * cols, x + t * cols, cols);
    }, 8);
}

void route_top_k(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k, bool renorm, int32_t* ids,
                 float* weights) {
    require(logits && ids && weights, "route_top_k", "null pointer");
    require(n_expert >= 1 && n_expert <= kRouteMaxExperts && k >= 1 && k <= n_expert && n_tokens >= 0, "route_top_k",
            "bad expert counts");
    float p[kRouteMaxExperts];
    bool taken[kRouteMaxExperts];
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* z = logits + t * n_expert;
        int32_t* id = ids + t * k;
        float* wt = weights + t * k;
        float mx = z[0];
        for (int64_t e = 1; e < n_expert; ++e) mx = z[e] > mx ? z[e] : mx;
        double sum = 0.0;
        for (int64_t e = 0; e < n_expert; ++e) {
            p[e] = detail::exp_avx2_model(z[e] - mx);
            sum += double(p[e]);
            taken[e] = false;
        }
        const auto inv = float(1.0 / sum);
        for (int64_t e = 0; e < n_expert; ++e) p[e] *= inv;
        // k passes of selection: only a strictly larger probability replaces the best so far, so
        // of equal ones the lowest index is taken first.
        for (int64_t j = 0; j < k; ++j) {
            int64_t best = -1;
            for (int64_t e = 0; e < n_expert; ++e)
                if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
            taken[best] = true;
            id[j] = static_cast<int32_t>(best);
            wt[j] = p[best];
        }
        if (!renorm) continue;
        double s = 0.0;
        for (int64_t j = 0; j < k; ++j) s += double(wt[j]);
        float fs = float(s);
        fs = fs < 6.103515625e-5f ? 6.103515625e-5f : fs;
        for (int64_t j = 0; j < k; ++j) wt[j] = wt[j] / fs;
    }
}

void group_by_expert(const int32_t* ids, int64_t n_tokens, int64_t k, int64_t n_expert, int32_t* offsets,
                     int32_t* rows) {
    require(ids && offsets && rows, "group_by_expert", "null pointer");
    const int64_t n = n_tokens * k;
    for (int64_t e = 0; e <= n_expert; ++e) offsets[e] = 0;
    for (int64_t i = 0; i < n; ++i) {
        require(ids[i] >= 0 && ids[i] < n_expert, "group_by_expert", "expert id out of range");
        ++offsets[ids[i] + 1];
    }
    for (int64_t e = 0; e < n_expert; ++e) offsets[e + 1] += offsets[e];
    // Stable placement: each expert's pairs in ascending order. offsets[e] walks to offsets[e + 1]
    // meanwhile, so the loop after restores the starts.
    for (int64_t i = 0; i < n; ++i) rows[offsets[ids[i]]++] = static_cast<int32_t>(i);
    for (int64_t e = n_expert; e > 0; --e) offsets[e] = offsets[e - 1];
    offsets[0] = 0;
}

} // namespace rwd
