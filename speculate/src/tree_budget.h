// The cost policy's pass sizing (KPolicy::Cost): keeps the guesses, chain or tree, whose expected
// accepted tokens pay for the pass time their rows add, from the cost of a pass over n rows on
// this machine and the run's acceptance statistics. Speed only: it never changes a token.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "rewind/decode_state.h"
#include "rewind/speculate/guess_source.h"
#include "expert_pass_cost.h"

namespace rwd::speculate {

class TreeBudget {
public:
    // `pass_seconds[n - 1]`: a pass over n rows (a measured cost curve), or empty: learned from
    // observe(), starting from a curve rising 5 % of a one-row pass per row; for a model with
    // experts (`experts`.moe()), from fixed + per row + per expert read (ExpertPassCost) once
    // that is fitted, before that from the prior times the growth of the experts a pass reads
    // under uniform routing (they are taken to be kExpertShare of a one-row pass).
    explicit TreeBudget(std::span<const double> pass_seconds = {}, ExpertShape experts = {});

    // Reorders `p` best first (each guess's chance to stand: its weight, calibrated by how the
    // source's weights fared over recent passes, or without weights the run's acceptance at its
    // depth, times its parent's) and returns how many of its first guesses, at most `room`,
    // maximise the expected tokens per second of the pass: 0 when no prefix beats a plain
    // one-row pass, once pass times and at least kMeasuredGuesses guesses have been measured,
    // except every kProbeEvery-th such pass, which verifies the best prefix anyway so the chances
    // keep being measured (bounding the loss to a fraction of a pass). Parents stay before their
    // children.
    int choose(Proposal& p, const DecodeStats& stats, int room);
    // The pass chose() sized ran `rows` rows in `seconds`, read `experts` distinct experts
    // summed over layers (Context::experts_read; 0 without experts) and accepted `accepted` guesses.
    void observe(int rows, double seconds, int accepted, double experts = 0);
    // The pass time assumed for `rows` rows (relative units until something is observed).
    double cost(int rows) const;

    static constexpr double kExpertShare = 0.6; // of a one-row pass, until the expert fit is known
    static constexpr int kProbeEvery = 24;      // passes without a paying guess between probes
    static constexpr int64_t kMeasuredGuesses = 8; // verified guesses before none may be chosen

private:
    void depth_chances(const DecodeStats& st, size_t n);
    double prior(int rows) const;
    bool measured(const DecodeStats& st) const;
    static constexpr int kRows = DecodeState::kMaxK + 1;
    std::vector<double> given_;   // [rows - 1], or empty
    std::vector<double> seen_;    // [rows - 1]: smoothed observed seconds, 0 when none
    double predicted_ = 0, accepted_ = 0; // weighted proposals: expected vs accepted so far
    double last_predicted_ = 0;
    bool last_weighted_ = false;
    int last_kept_ = 0;
    int skipped_ = 0; // passes in a row where no guess paid
    bool moe_ = false;
    ExpertPassCost expert_cost_;
    // choose() scratch, reused (nothing allocated per pass once warm).
    std::vector<double> chance_, by_depth_;
    std::vector<int32_t> depth_, rank_;
    BestFirstScratch best_first_;
};

} // namespace rwd::speculate
