// How the packed-weight bodies (Q8_0 and K-quants) split a pass's tokens: how many share one read
// of the weights, even tiles, and the span-by-span sweep of a wide pass. Internal, not installed.
#pragma once
#include <cstdint>

namespace rwd::detail {

// Tokens that share one read of each weight block from memory: every token of a pass of up to 64
// (a verification pass, a token tree, a batch of them) is applied to a block before the next
// block is read. Longer inputs (prefill) run in parts of at most this many tokens, a row group's
// weights staying in L1/L2 between them.
inline constexpr int64_t kWidePassTokens = 64;

// The size of each part when n items are cut into as few parts of at most `most` as possible,
// as even as possible (the last part may be smaller).
inline int64_t even_part(int64_t n, int64_t most) {
    const int64_t parts = (n + most - 1) / most;
    return (n + parts - 1) / parts;
}

// One row group of a wide pass, tokens [t0, t1): per span of `span` blocks, fn(s0, ns, b0, b1)
// for every register sub-tile of at most `sub` tokens (s0 .. s0 + ns - 1) before the next span,
// so the group's weights stream from memory once, spread over the compute. Blocks ascend for each
// token: the same steps in the same order as one sweep of the whole group.
template <class Fn>
void span_sweep(int64_t t0, int64_t t1, int64_t nb, int64_t sub, int64_t span, const Fn& fn) {
    const int64_t per = even_part(t1 - t0, sub);
    for (int64_t b0 = 0; b0 < nb; b0 += span) {
        const int64_t b1 = b0 + span < nb ? b0 + span : nb;
        for (int64_t s0 = t0; s0 < t1; s0 += per) fn(s0, s0 + per < t1 ? per : t1 - s0, b0, b1);
    }
}

} // namespace rwd::detail
