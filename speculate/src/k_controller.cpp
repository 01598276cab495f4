// KController: the rules of each KPolicy (documented in decoder.h). Only the number of guesses
// depends on it, never which token is emitted, so every policy is equally lossless.
#include "k_controller.h"

#include <algorithm>

namespace rwd::speculate {
namespace {
constexpr int kAdaptiveStart = 1;
} // namespace

KController::KController(KPolicy policy, int k_max) : policy_(policy), k_max_(std::max(k_max, 0)) {
    k_cur_ = policy_ == KPolicy::Adaptive ? std::min(k_max_, kAdaptiveStart) : k_max_;
}

void KController::observe(int proposed, int accepted) {
    if (policy_ != KPolicy::Adaptive || proposed == 0) return; // no guess: says nothing about acceptance
    if (accepted == proposed && proposed >= k_cur_) k_cur_ = std::min(k_max_, k_cur_ + 1);
    else if (accepted < proposed) k_cur_ = std::clamp(accepted + 1, 1, k_max_);
}

} // namespace rwd::speculate
