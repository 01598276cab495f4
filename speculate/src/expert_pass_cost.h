// The cost policy's pass-time model for mixtures of experts: a pass's time as fixed + per row x
// rows + per expert x distinct experts it read (summed over layers, measured per pass), and the
// experts a pass of n rows is expected to read. Speed only: never changes a token.
#pragma once
#include <cstdint>
#include <vector>

namespace rwd::speculate {

// A model's expert layout: layers with experts, experts per layer, experts each token uses. All
// zero for a dense model.
struct ExpertShape {
    int64_t n_layer = 0, n_expert = 0, n_used = 0;
    bool moe() const { return n_layer > 0 && n_expert > 0 && n_used > 0; }
};

class ExpertPassCost {
public:
    // Passes of 1..max_rows rows (max_rows >= 1) of a model of shape `s` (s.moe()).
    ExpertPassCost(ExpertShape s, int max_rows);

    // Distinct experts, summed over layers, that n rows chose under uniform independent routing:
    // n_layer x n_expert x (1 - (1 - n_used / n_expert)^n).
    double uniform_experts(int rows) const;
    // Experts a pass of `rows` rows is expected to read: the recent mean of passes of that many
    // rows; else a power of the rows through the measured row counts around it (or the last two),
    // at most uniform_experts (routers repeat experts across tokens, more so over more tokens);
    // uniform_experts until two row counts are measured.
    double expected_experts(int rows) const;
    // A pass of `rows` rows read `experts` distinct experts (Context::experts_read) in `seconds`.
    void observe(int rows, double experts, double seconds);
    // The fitted seconds of a pass of `rows` rows with expected_experts(rows); false until the
    // fit is known: a weighted least-squares fit (recent passes weighted most) of fixed + per row
    // + per expert, or of fixed + per expert when rows and experts cannot be told apart yet, with
    // every coefficient positive (per row may be 0).
    bool predict(int rows, double& seconds) const;
    // The fit's coefficients (seconds, seconds per row, seconds per expert); false as predict.
    bool coefficients(double& fixed, double& per_row, double& per_expert) const;

private:
    ExpertShape s_;
    std::vector<double> seen_experts_; // [max_rows]: smoothed experts per pass of that many rows, 0: none
    double n_[3][3] = {}, t_[3] = {};   // decayed normal equations over (1, rows, experts)
};

} // namespace rwd::speculate
