// Chooses how many guesses each pass asks for (KPolicy): fixed, or adapted to recent acceptance.
#pragma once
#include "rewind/speculate/decoder.h"

namespace rwd::speculate {

class KController {
public:
    KController(KPolicy policy, int k_max);

    // Guesses to ask for in the next pass, in [0, k_max].
    int next() const { return k_cur_; }
    // What the pass did: `proposed` guesses verified (<= what was asked), `accepted` stood.
    void observe(int proposed, int accepted);

private:
    KPolicy policy_;
    int k_max_;
    int k_cur_;
};

} // namespace rwd::speculate
