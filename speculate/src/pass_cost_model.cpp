// PassCostModel: a weighted least-squares line through (rows, seconds) of recent passes.
#include "pass_cost_model.h"

namespace rwd::speculate {

void PassCostModel::observe(double rows, double seconds) {
    constexpr double kDecay = 0.967; // about the last 30 passes
    n_ = kDecay * n_ + 1;
    x_ = kDecay * x_ + rows;
    y_ = kDecay * y_ + seconds;
    xx_ = kDecay * xx_ + rows * rows;
    xy_ = kDecay * xy_ + rows * seconds;
}

bool PassCostModel::cost(double& a, double& b) const {
    if (fixed_ > 0 && row_ > 0) {
        a = fixed_;
        b = row_;
        return true;
    }
    const double var = n_ * xx_ - x_ * x_;
    if (n_ < 2 || var <= 1e-9 * n_ * xx_) return false;
    b = (n_ * xy_ - x_ * y_) / var;
    a = (y_ - b * x_) / n_;
    return a > 0 && b > 0;
}

} // namespace rwd::speculate
