// The batch decoder's pass-cost model: a pass's wall time as a + b * rows, fitted over the
// decoder's own decoding passes (recent ones weighted most) or given, and the rule it implies
// for whether one more guess pays for the row it adds. Speed only: never changes a token.
#pragma once

namespace rwd::speculate {

class PassCostModel {
public:
    // Both > 0: the pass time is fixed_seconds + row_seconds * rows, whatever is observed (a
    // cost curve measured once, or reproducible tests). Otherwise it is fitted.
    PassCostModel(double fixed_seconds, double row_seconds) : fixed_(fixed_seconds), row_(row_seconds) {}

    // A decoding pass of `rows` rows took `seconds`.
    void observe(double rows, double seconds);
    // The pass time a + b * rows, when known: given, or fitted from at least two row counts with
    // both terms positive.
    bool cost(double& a, double& b) const;
    // With the pass so far expected to yield `expected` tokens over `rows` rows, a guess that
    // stands with chance `gain` pays for its row iff tokens per second grow with it:
    // gain > expected * b / (a + b * rows).
    static bool pays(double gain, double expected, double rows, double a, double b) {
        return gain > expected * b / (a + b * rows);
    }

private:
    double fixed_, row_;
    // Exponentially weighted sums of (rows, seconds) over decoding passes.
    double n_ = 0, x_ = 0, y_ = 0, xx_ = 0, xy_ = 0;
};

} // namespace rwd::speculate
