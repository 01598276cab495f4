// The cost policy's pass sizing (KPolicy::Cost): keeps the guesses, chain or tree, whose expected
// accepted tokens pay for the pass time their rows add, from the cost of a pass over n rows on
// this machine and the run's acceptance statistics. Speed only: it never changes a token.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "rewind/decode_state.h"
#include "rewind/speculate/guess_source.h"

namespace rwd::speculate {

class TreeBudget {
public:
    // `pass_seconds[n - 1]`: a pass over n rows (a measured cost curve), or empty: learned from
    // observe(), starting from a curve rising 5 % of a one-row pass per row.
    explicit TreeBudget(std::span<const double> pass_seconds = {});

    // Reorders `p` best first (each guess's chance to stand: its weight, calibrated by how the
    // source's weights fared over recent passes, or without weights the run's acceptance at its
    // depth, times its parent's) and returns how many of its first guesses, at most `room` and
    // at least one, maximise the expected tokens per second of the pass. Parents stay before
    // their children.
    int choose(Proposal& p, const DecodeStats& stats, int room);
    // The pass chose() sized ran `rows` rows in `seconds` and accepted `accepted` guesses.
    void observe(int rows, double seconds, int accepted);
    // The pass time assumed for `rows` rows (relative units until something is observed).
    double cost(int rows) const;

private:
    void depth_chances(const DecodeStats& st, size_t n);
    static constexpr int kRows = DecodeState::kMaxK + 1;
    std::vector<double> given_;   // [rows - 1], or empty
    std::vector<double> seen_;    // [rows - 1]: smoothed observed seconds, 0 when none
    double predicted_ = 0, accepted_ = 0; // weighted proposals: expected vs accepted so far
    double last_predicted_ = 0;
    bool last_weighted_ = false;
    int last_kept_ = 0;
    // choose() scratch, reused (nothing allocated per pass once warm).
    std::vector<double> chance_, by_depth_;
    std::vector<int32_t> depth_, rank_;
    BestFirstScratch best_first_;
};

} // namespace rwd::speculate
