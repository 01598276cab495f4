// Causal GQA attention front end: validates the shape, splits (token tile, KV head) units over the
// pool (one scratch slot per thread), and a double-precision reference. Each (token, head)
// result depends only on its own query, its position and the cache, never on the split.
#include "rewind/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attention_impl.h"
#include "rewind/error.h"
#include "rewind/kernels/simd.h"

namespace rwd {

void detail::check_attention_shape(const AttentionShape& s, DType kv_type, const char* who) {
    if (s.n_tokens <= 0 || s.pos0 < 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.head_dim <= 0)
        throw Error(ErrorCode::shape, std::string(who) + ": bad shape (n_tokens " + std::to_string(s.n_tokens) + ", pos0 " +
                    std::to_string(s.pos0) + ", n_head " + std::to_string(s.n_head) + ", n_head_kv " +
                    std::to_string(s.n_head_kv) + ", head_dim " + std::to_string(s.head_dim) + ")");
    if (s.window < 0) throw Error(std::string(who) + ": negative window " + std::to_string(s.window));
    if (!(s.scale >= 0.0f) || !std::isfinite(s.scale)) throw Error(std::string(who) + ": bad scale");
    if (s.n_head % s.n_head_kv != 0)
        throw Error(ErrorCode::shape, std::string(who) + ": n_head " + std::to_string(s.n_head) + " is not a multiple of n_head_kv " +
                    std::to_string(s.n_head_kv));
    if (kv_type != DType::F32 && kv_type != DType::F16)
        throw Error(ErrorCode::unsupported, std::string(who) + ": unsupported KV type " + dtype_name(kv_type));
    if (s.gather) {
        if (s.gather_from < 0 || s.gather_from > s.pos0)
            throw Error(std::string(who) + ": gather_from " + std::to_string(s.gather_from) + " outside [0, pos0 " +
                        std::to_string(s.pos0) + "]");
        for (int64_t p = s.gather_from; p < s.pos0 + s.n_tokens; ++p)
            if (s.gather[p - s.gather_from] < 0)
                throw Error(std::string(who) + ": gathered slot " + std::to_string(s.gather[p - s.gather_from]) +
                            " for position " + std::to_string(p));
    }
}

namespace {

using detail::check_attention_shape;

// Score-row length for one head: whole blocks of kAttendBlock positions (the bodies compute the
// scores of a block's every position, padding included), so rows start on 64-byte boundaries.
int64_t score_stride(const AttentionShape& s) {
    return ((s.pos0 + s.n_tokens + detail::kAttendBlock - 1) / detail::kAttendBlock) * detail::kAttendBlock;
}
// Score floats per query head for all tokens of a unit: a 17-token unit up to about 7,700
// positions, one token per unit from 131,072 (a slot then holds one token's score row).
constexpr int64_t kAttendScoreFloats = int64_t{1} << 17;
// Tokens per work unit: as even as possible, at most kAttendTokens, so a verification pass of up
// to 17 tokens reads each cached K/V row once per KV head; fewer where the unit's score rows
// would pass kAttendScoreFloats per query head (a context's scratch stays small at long context
// lengths). A sliding window that cuts into the pass gives each token its own first position:
// one token per unit then.
int64_t unit_tokens(const AttentionShape& s) {
    if (detail::first_visible(s, s.pos0 + s.n_tokens - 1) > 0) return 1;
    const int64_t most = std::clamp<int64_t>(kAttendScoreFloats / score_stride(s), 1, detail::kAttendTokens);
    const int64_t tiles = (s.n_tokens + most - 1) / most;
    return (s.n_tokens + tiles - 1) / tiles;
}
// Score floats of one unit's KV heads together, and most KV heads per unit. A unit of several
// adjacent KV heads reads each cached position's K and V rows for all of them in one contiguous
// run (attention_heads.h): one head alone reads head_dim of every n_head_kv * head_dim elements,
// which streams at a fraction of the memory bandwidth in long-context decoding. The budget is
// 1 MiB so a unit's scores stay in L2 between the score pass, the softmax and the V pass (with
// 2 MiB a 9-token pass at 4,096 cached took three heads per unit and sent its scores to L3 and
// back twice); one-token units with 4 query heads per KV head still take 8 heads up to 8,192
// positions.
constexpr int64_t kUnitScoreFloats = int64_t{1} << 18;
constexpr int64_t kMaxUnitHeads = 16;

// KV heads per unit for units of `per` tokens whose score rows are `stride` long: as many as fit
// kUnitScoreFloats (at least one), at most an even share of the KV heads per thread so a
// single-tile pass still keeps every thread busy. Only who computes a head changes, never its bits.
int64_t unit_heads(const AttentionShape& s, int64_t per, int64_t stride, int n_threads) {
    const int64_t group = s.n_head / s.n_head_kv;
    const int64_t fit = kUnitScoreFloats / (per * group * stride);
    const int64_t share = (s.n_head_kv + n_threads - 1) / n_threads;
    return std::clamp<int64_t>(std::min(fit, share), 1, std::min(kMaxUnitHeads, s.n_head_kv));
}
// Scratch of one slot: per KV head of a unit, a K/V block, score rows and 1/sum for its rows.
int64_t slot_floats_for(const AttentionShape& s, int64_t per, int64_t stride, int n_threads) {
    const int64_t rows = per * (s.n_head / s.n_head_kv);
    const int64_t f = detail::attend_scratch_floats(rows, stride, s.head_dim, unit_heads(s, per, stride, n_threads));
    return ((f + 15) / 16) * 16;
}
int64_t slot_floats(const AttentionShape& s, int n_threads) {
    return slot_floats_for(s, unit_tokens(s), score_stride(s), n_threads);
}

} // namespace

int64_t attention_scratch_floats(const AttentionShape& s, int n_threads) {
    if (n_threads < 1) throw Error("attention_scratch_floats: n_threads must be >= 1");
    check_attention_shape(s, DType::F32, "attention_scratch_floats");
    return int64_t(n_threads) * slot_floats(s, n_threads);
}

int64_t attention_scratch_floats_upto(const AttentionShape& s, int n_threads) {
    if (n_threads < 1) throw Error("attention_scratch_floats_upto: n_threads must be >= 1");
    check_attention_shape(s, DType::F32, "attention_scratch_floats_upto");
    // A call's slot is fixed by its score stride and its tile of unit_tokens <= min(n_tokens,
    // clamp(kAttendScoreFloats / stride, 1, kAttendTokens)) tokens (one with a window), and every
    // such pair is some call's. The slot is not monotone in either (more tokens may mean fewer KV
    // heads per unit), so the bound is the largest over all of them: at most kAttendTokens tiles
    // for each stride. Past kUnitScoreFloats a unit is one token and one KV head, and the slot
    // grows with the stride: the last one bounds the rest.
    const int64_t last = score_stride(s);
    int64_t most = 0;
    auto consider = [&](int64_t stride) {
        const int64_t tile = std::min<int64_t>(
            s.n_tokens, std::clamp<int64_t>(kAttendScoreFloats / stride, 1, detail::kAttendTokens));
        for (int64_t per = 1; per <= tile; ++per) most = std::max(most, slot_floats_for(s, per, stride, n_threads));
    };
    for (int64_t stride = detail::kAttendBlock; stride < last && stride <= kUnitScoreFloats; stride += detail::kAttendBlock)
        consider(stride);
    consider(last);
    return int64_t(n_threads) * most;
}

void attention(const AttentionShape& s, const float* q, const void* k, const void* v, DType kv_type, float* out,
               float* scratch, ThreadPool* pool) {
    attention(s, q, k, v, kv_type, out, scratch, pool, detect_simd());
}

void attention(const AttentionShape& s, const float* q, const void* k, const void* v, DType kv_type, float* out,
               float* scratch, ThreadPool* pool, SimdLevel level) {
    check_attention_shape(s, kv_type, "attention");
    if (!q || !k || !v || !out || !scratch) throw Error("attention: null pointer");
    require_simd(level);
    const detail::AttendHeadsFn body = simd_has_avx512(level) ? detail::attend_heads_avx512
                                       : simd_has_avx2(level)   ? detail::attend_heads_avx2
                                                                : detail::attend_heads<detail::attend_scalar>;

    // Work unit: a tile of up to kAttendTokens tokens against a range of adjacent KV heads, i.e.
    // for each token of the tile the `group` query heads sharing each of them.
    const int64_t group = s.n_head / s.n_head_kv;
    const int64_t per = unit_tokens(s);
    const int64_t tiles = (s.n_tokens + per - 1) / per;
    const int64_t stride = score_stride(s);
    const int n_threads = pool ? pool->size() : 1;
    const int64_t nh = unit_heads(s, per, stride, n_threads);
    const int64_t ranges = (s.n_head_kv + nh - 1) / nh;
    const int64_t units = tiles * ranges;
    const int64_t kv_stride = s.n_head_kv * s.head_dim;
    const size_t eb = detail::kv_elem_bytes(kv_type);
    const float scale = detail::attention_scale(s);
    const int64_t slotf = slot_floats(s, n_threads);
    const int64_t rows = per * group;

    auto run_unit = [&](int64_t i, float* slot) {
        const int64_t t = (i / ranges) * per, h0 = (i % ranges) * nh;
        const int64_t heads = std::min(nh, s.n_head_kv - h0);
        // Slot: [heads][K/V block], then [heads][rows score rows], then [heads][rows] 1/sum. The
        // blocks are kAttendBlock * head_dim floats (a multiple of 16), so every block and score
        // row starts on a 64-byte boundary.
        float* const scores0 = slot + heads * detail::kAttendBlock * s.head_dim;
        detail::AttendGroup g[kMaxUnitHeads];
        for (int64_t j = 0; j < heads; ++j) {
            const int64_t kvh = h0 + j;
            detail::AttendGroup& a = g[j];
            a.q = q + (t * s.n_head + kvh * group) * s.head_dim;
            a.group = group;
            a.n_tok = std::min(per, s.n_tokens - t);
            a.tok_stride = s.n_head * s.head_dim;
            // The visible positions [lo, pos]: the body sees them as 0 .. n_pos-1 (lo is 0 for a
            // unit of several tokens, see unit_tokens).
            const int64_t lo = detail::first_visible(s, s.pos0 + t);
            a.k = static_cast<const std::byte*>(k) + size_t(lo * kv_stride + kvh * s.head_dim) * eb;
            a.v = static_cast<const std::byte*>(v) + size_t(lo * kv_stride + kvh * s.head_dim) * eb;
            a.kv_stride = kv_stride;
            a.kv_type = kv_type;
            a.head_dim = s.head_dim;
            a.n_pos = s.pos0 + t + 1 - lo;
            a.scale = scale;
            a.out = out + (t * s.n_head + kvh * group) * s.head_dim;
            a.pad = slot + j * detail::kAttendBlock * s.head_dim;
            a.scores = scores0 + j * rows * stride;
            a.score_stride = stride;
            a.inv = scores0 + heads * rows * stride + j * rows;
            if (s.gather) {
                // Positions count from lo in the unit; so do its rows.
                a.gather = s.gather;
                a.gather_from = s.gather_from - lo;
                a.gather_shift = lo;
                if (a.gather_from < 0) { // the window starts inside the gathered range
                    a.gather -= a.gather_from;
                    a.gather_from = 0;
                }
            }
        }
        body(g, heads);
    };

    const int64_t macs = s.n_tokens * s.n_head * (s.pos0 + s.n_tokens) * s.head_dim * 2;
    detail::for_each_unit(pool, units, macs, scratch, slotf, run_unit);
}

void attention_reference(const AttentionShape& s, const float* q, const void* k, const void* v, DType kv_type,
                         float* out) {
    check_attention_shape(s, kv_type, "attention_reference");
    if (!q || !k || !v || !out) throw Error("attention_reference: null pointer");
    const int64_t group = s.n_head / s.n_head_kv;
    const int64_t kv_stride = s.n_head_kv * s.head_dim;
    auto load = [&](const void* base, int64_t idx) -> double {
        // idx = p * kv_stride + offset: read position p from its (gathered) slot.
        const int64_t p = idx / kv_stride, slot = s.gather && p >= s.gather_from ? s.gather[p - s.gather_from] : p;
        idx += (slot - p) * kv_stride;
        if (kv_type == DType::F32) return static_cast<const float*>(base)[idx];
        return fp16_to_fp32(static_cast<const uint16_t*>(base)[idx]);
    };
    const double scale = s.scale > 0.0f ? double(s.scale) : 1.0 / std::sqrt(double(s.head_dim));
    std::vector<double> sc(size_t(s.pos0 + s.n_tokens));
    std::vector<double> acc(size_t(s.head_dim));
    for (int64_t t = 0; t < s.n_tokens; ++t) {
        for (int64_t h = 0; h < s.n_head; ++h) {
            const float* qh = q + (t * s.n_head + h) * s.head_dim;
            const int64_t off = (h / group) * s.head_dim;
            const int64_t n_pos = s.pos0 + t + 1;
            const int64_t lo = detail::first_visible(s, s.pos0 + t);
            double m = -INFINITY;
            for (int64_t p = lo; p < n_pos; ++p) {
                double d = 0.0;
                for (int64_t i = 0; i < s.head_dim; ++i) d += double(qh[i]) * load(k, p * kv_stride + off + i);
                sc[size_t(p)] = d * scale;
                m = std::max(m, sc[size_t(p)]);
            }
            double sum = 0.0;
            for (int64_t p = lo; p < n_pos; ++p) {
                sc[size_t(p)] = std::exp(sc[size_t(p)] - m);
                sum += sc[size_t(p)];
            }
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t p = lo; p < n_pos; ++p)
                for (int64_t i = 0; i < s.head_dim; ++i) acc[size_t(i)] += sc[size_t(p)] * load(v, p * kv_stride + off + i);
            float* o = out + (t * s.n_head + h) * s.head_dim;
            for (int64_t i = 0; i < s.head_dim; ++i) o[i] = float(acc[size_t(i)] / sum);
        }
    }
}

} // namespace rwd
