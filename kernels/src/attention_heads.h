// The block loop the SIMD attention bodies share (AttendHeadsFn of attention_impl.h): for a unit
// of adjacent KV heads, each block of cached positions is read once, contiguously, for all of them,
// and then every head does its own arithmetic on it exactly as it would alone. Included only by
// ISA-specific files (anonymous namespace), each with its own Isa.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "attention_impl.h"

namespace rwd::detail {
namespace {

// Isa provides, for the body's element type T (F32 or F16):
//   copy_rows<T>(g, nh, kv, p0, cnt): K (kv = 0) or V (kv = 1) rows [p0, p0 + cnt) of heads
//       g[0..nh) widened to float into g[h].pad[j * head_dim + d], position by position;
//   block_scores(a, pb, cnt): a's score rows at positions [pb, pb + cnt) from the K block in a.pad;
//   softmax_numerators(s, n): scores [0, n) into numerators in place, returns 1 / their sum;
//   block_pv(a, pb, pe): out += weights x the V block in a.pad for positions [pb, pe), p ascending;
//   scale_row(o, head_dim, inv): o[d] *= inv.
// The order of each head's operations is the one-head order of attention_impl.h whatever nh is:
// the heads only share when their rows are read.
template <class Isa, DType T>
void attend_heads_blocks(const AttendGroup* g, int64_t nh) {
    const AttendGroup& a0 = g[0];
    const int64_t rows = a0.rows();
    const int64_t hd = a0.head_dim;
    const int64_t n_max = a0.n_pos_row(rows - 1);
    for (int64_t pb = 0; pb < n_max; pb += kAttendBlock) {
        const int64_t cnt = std::min(kAttendBlock, n_max - pb);
        Isa::template copy_rows<T>(g, nh, 0, pb, cnt);
        for (int64_t h = 0; h < nh; ++h) Isa::block_scores(g[h], pb, cnt);
    }
    for (int64_t h = 0; h < nh; ++h)
        for (int64_t r = 0; r < rows; ++r)
            g[h].inv[r] = Isa::softmax_numerators(g[h].scores + r * g[h].score_stride, g[h].n_pos_row(r));

    for (int64_t h = 0; h < nh; ++h)
        for (int64_t r = 0; r < rows; ++r) std::memset(g[h].out_row(r), 0, size_t(hd) * sizeof(float));
    for (int64_t pb = 0; pb < n_max; pb += kAttendBlock) {
        const int64_t pe = std::min(n_max, pb + kAttendBlock);
        Isa::template copy_rows<T>(g, nh, 1, pb, pe - pb);
        for (int64_t h = 0; h < nh; ++h) Isa::block_pv(g[h], pb, pe);
    }
    for (int64_t h = 0; h < nh; ++h)
        for (int64_t r = 0; r < rows; ++r) Isa::scale_row(g[h].out_row(r), hd, g[h].inv[r]);
}

// The V sum of one head's block [pb, pe) in chunks of `step` <= kMaxPvRows rows (each V load
// serves every row of a chunk): pv(R, w, out, p0, p1) over the positions all R rows of the chunk
// see, then pv(1, ...) for each row alone to its own end (rows of later tokens see a few more).
// w[r] are the rows' numerators from pb on, out[r] their outputs.
constexpr int64_t kMaxPvRows = 6;
template <class Pv>
void pv_chunks(const AttendGroup& a, int64_t pb, int64_t pe, int64_t step, Pv&& pv) {
    const int64_t rows = a.rows();
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
        const int64_t R = std::min(step, rows - r0);
        const float* w[kMaxPvRows];
        float* out[kMaxPvRows];
        for (int64_t r = 0; r < R; ++r) {
            w[r] = a.scores + (r0 + r) * a.score_stride + pb;
            out[r] = a.out_row(r0 + r);
        }
        const int64_t shared = std::clamp<int64_t>(a.n_pos_row(r0) - pb, 0, pe - pb);
        pv(R, w, out, 0, shared);
        for (int64_t r = 0; r < R; ++r) {
            const int64_t end = std::clamp<int64_t>(a.n_pos_row(r0 + r) - pb, 0, pe - pb);
            if (end > shared) pv(1, w + r, out + r, shared, end);
        }
    }
}

// Where the K/V row of position p of head h starts: the heads of a unit are adjacent in a cache
// row (and share its gather map).
inline const std::byte* kv_row(const AttendGroup* g, int64_t h, int kv, int64_t p, size_t elem_bytes) {
    return static_cast<const std::byte*>(kv == 0 ? g[h].k : g[h].v) +
           size_t(g[0].row(p)) * size_t(g[0].kv_stride) * elem_bytes;
}

// Asks for the same head's row one block later into L2 while a body copies this one: the rows lie
// n_head_kv * head_dim elements apart, a stride the hardware prefetchers follow only partly, and a
// block's arithmetic (many query rows in a verification pass) is long enough to hide the memory
// behind it. A prefetch never faults, past the cache's end included.
inline void prefetch_next_block(const std::byte* row, const AttendGroup* g, size_t row_bytes, size_t elem_bytes) {
    const auto* nx = reinterpret_cast<const char*>(row) + size_t(kAttendBlock) * size_t(g[0].kv_stride) * elem_bytes;
    for (size_t d = 0; d < row_bytes; d += 64) _mm_prefetch(nx + d, _MM_HINT_T1);
}

} // namespace
} // namespace rwd::detail
