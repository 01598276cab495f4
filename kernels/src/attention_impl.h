// Internal interface between the attention front end and its per-ISA bodies. Not installed.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "rewind/kernels/attention.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kernels/thread_pool.h"

namespace rwd::detail {

// Throws rwd::Error naming `who` unless the shape is positive, n_head is a multiple of
// n_head_kv and kv_type is F32 or F16. Shared by every attention front end.
void check_attention_shape(const AttentionShape& s, DType kv_type, const char* who);

// Helpers for the front ends and bodies. In an anonymous namespace: this header is also built
// with AVX2 flags (attention_avx2.cpp), and the linker must never hand that copy to scalar code.
namespace {

inline size_t kv_elem_bytes(DType t) { return dtype_row_bytes(t, 1); } // the one rule (dtype.h)

// The first cache position a query at absolute position `pos` sees: 0, or with a sliding window
// w, max(0, pos - w + 1) (llama.cpp masks p0 when pos - p0 >= w).
inline int64_t first_visible(const AttentionShape& s, int64_t pos) {
    return s.window > 0 && pos - s.window + 1 > 0 ? pos - s.window + 1 : 0;
}

// The score scale of a shape: its own, or 1/sqrt(head_dim) (llama.cpp: 1.0f/sqrtf(n_embd_head)).
inline float attention_scale(const AttentionShape& s) {
    return s.scale > 0.0f ? s.scale : 1.0f / std::sqrt(float(s.head_dim));
}

// Element i of a K or V row stored as `type` (F32 or F16), widened to float.
inline float kv_at(const void* base, DType type, int64_t i) {
    if (type == DType::F32) return static_cast<const float*>(base)[i];
    return fp16_to_fp32(static_cast<const uint16_t*>(base)[i]);
}

// Runs unit(i, slot) for every i in [0, units): on the calling thread when `macs` (the call's
// multiply-adds) is small, else as contiguous ranges over the pool, range j with scratch slot j
// (slot_floats apart). Which thread runs a unit never changes what it computes.
template <class F>
void for_each_unit(ThreadPool* pool, int64_t units, int64_t macs, float* scratch, int64_t slot_floats, F&& unit) {
    constexpr int64_t kMinMacsPerThread = 32 * 1024;
    const int64_t slots =
        pool ? std::min<int64_t>({int64_t(pool->size()), units, std::max<int64_t>(1, macs / kMinMacsPerThread)}) : 1;
    if (slots <= 1) {
        for (int64_t i = 0; i < units; ++i) unit(i, scratch);
        return;
    }
    pool->run(slots, [&](int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j)
            for (int64_t i = j * units / slots; i < (j + 1) * units / slots; ++i) unit(i, scratch + j * slot_floats);
    });
}

} // namespace

// Up to kAttendTokens consecutive tokens against one KV head: for each token, the `group` query
// heads that share that KV head, over cache positions 0 .. n_pos + t - 1 (causal). Each cached K/V
// row is read once for every query row of the unit. Row r = t * group + g; heads of a token are
// adjacent, so a token's q and out are [group, head_dim], tokens tok_stride floats apart.
struct AttendGroup {
    const float* q;      // [n_tok][group, head_dim], tokens tok_stride apart
    int64_t group;       // query heads per KV head
    int64_t n_tok;       // tokens in this unit (1 .. kAttendTokens)
    int64_t tok_stride;  // floats between tokens in q and out (n_head * head_dim)
    const void* k;       // this KV head at position 0; positions kv_stride elements apart
    const void* v;
    int64_t kv_stride;   // elements between positions (n_head_kv * head_dim)
    DType kv_type;       // F32 or F16
    int64_t head_dim;
    int64_t n_pos;       // positions the unit's first token sees: pos0 + t0 + 1 - lo
    float scale;         // 1/sqrt(head_dim)
    float* out;          // [n_tok][group, head_dim], like q
    float* scores;       // scratch: [n_tok * group, score_stride], score_stride >= round_up(n_pos + n_tok - 1, kAttendBlock)
    int64_t score_stride;
    float* inv;          // scratch: [n_tok * group] (1 / softmax denominator)
    float* pad;          // scratch: kAttendBlock * head_dim floats (a block of K or V rows, as float)
    // Token trees: the unit's positions p >= gather_from (counted, like n_pos, from k) are read
    // from row gather[p - gather_from] - gather_shift of k and v instead of row p (null: none).
    const int32_t* gather = nullptr;
    int64_t gather_from = 0, gather_shift = 0;

    int64_t rows() const { return n_tok * group; }
    const float* q_row(int64_t r) const { return q + (r / group) * tok_stride + (r % group) * head_dim; }
    float* out_row(int64_t r) const { return out + (r / group) * tok_stride + (r % group) * head_dim; }
    int64_t n_pos_row(int64_t r) const { return n_pos + r / group; }
    // The row of k and v that holds the unit's position p.
    int64_t row(int64_t p) const { return gather && p >= gather_from ? gather[p - gather_from] - gather_shift : p; }
};

// Most tokens one AttendGroup covers (a verification pass of k <= 16 guesses + 1 in one unit).
constexpr int64_t kAttendTokens = 17;
// Positions per block of K or V rows widened to float side by side (a multiple of 16): the rows
// of one KV head lie n_head_kv * head_dim elements apart in the cache, a stride that maps them onto
// a few L1 sets, so a block read in place by every query row of a unit would thrash L1.
constexpr int64_t kAttendBlock = 64;

// Scratch floats `heads` AttendGroups of `rows` rows each need beyond `out`.
inline int64_t attend_scratch_floats(int64_t rows, int64_t score_stride, int64_t head_dim, int64_t heads = 1) {
    return heads * (rows * (score_stride + 1) + kAttendBlock * head_dim);
}

// THE arithmetic order of every body (so each (token, head) result has one set of bits whatever
// the tile, the number of tokens in the pass, the thread count and the SIMD level), for a row with
// query q over its n visible positions p = 0 .. n-1 (k[p], v[p] widened to float exactly):
//   s[p]  = tree16(L) * scale, where lane L[j] = fma chain over i = j, j+16, j+32, ... ascending,
//           from +0: L[j] = fma(q[i], k[p][i], L[j]); tree16(L): L[j] += L[j+w] for w = 8, 4, 2, 1
//           (j < w), then L[0]
//   m     = max over p of s[p] (exact in any order)
//   e[p]  = exp_avx2_model(s[p] - m), the Cephes-style expf of simd_math_avx2.h step by step (simd_math_model.h)
//   sum   = tree16(L) of the 16 lane sums L[j] = e[j] + e[j+16] + ... (ascending, from +0); inv = 1 / sum
//   out[d]= (fma chain over p ascending, from +0: acc = fma(e[p], v[p][d], acc)) * inv
// The scalar body computes exactly this with std::fma; the AVX2 and AVX-512 bodies hold the 16
// lanes in vectors (scores, softmax sum) and vectorise the weighted V sum across dimensions, and
// are tested against it bit for bit. A block of K or V rows may be read in place or from a float
// copy (pad): widening is exact, so it changes no bit.
void attend_scalar(const AttendGroup& a);

// What the front end calls per work unit: nh groups of the same token tile over adjacent KV heads
// (g[h + 1]'s K/V rows follow g[h]'s in each cache row), each with its own scores, inv and pad;
// every g[h] gets the bits it gets alone (nh = 1).
using AttendHeadsFn = void (*)(const AttendGroup* g, int64_t nh);
// The AVX2 and AVX-512 bodies go block by block for all heads together (attention_heads.h), so
// each cached row is one contiguous read instead of nh reads a head apart.
void attend_heads_avx2(const AttendGroup* g, int64_t nh);
void attend_heads_avx512(const AttendGroup* g, int64_t nh);
// A one-head body over a unit's heads one after another (the scalar model).
template <void (*Body)(const AttendGroup&)>
void attend_heads(const AttendGroup* g, int64_t nh) {
    for (int64_t h = 0; h < nh; ++h) Body(g[h]);
}

} // namespace rwd::detail
