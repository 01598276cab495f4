// The forward graph's small non-template pieces, written once for every backend: each layer's
// rope parameters and which rows of a segment reach the head.
#include "forward_graph.h"

namespace rwd {

RopeParams layer_rope(const LlamaHparams& hp, int64_t il, const float* freq_factors) {
    const bool swa = hp.is_swa_layer(il);
    RopeParams rp;
    rp.mode = hp.arch->rope;
    rp.n_rot = hp.n_rot;
    rp.freq_base = swa ? hp.rope_freq_base_swa : hp.rope_freq_base;
    rp.freq_scale = swa ? 1.0f : hp.rope_freq_scale;
    rp.freq_factors = freq_factors;
    return rp;
}

void output_rows(const PassSegment& s, int64_t& first, int64_t& count) {
    first = s.mode == Logits::All ? 0 : s.n - 1;
    count = s.mode == Logits::All ? s.n : (s.mode == Logits::Last ? 1 : 0);
}

} // namespace rwd
