// `rewind grammar --time-masks`: mask timings along a text's tokens, or along random valid token
// paths through every grammar of a workload (first run of each grammar against cached runs).
#pragma once
#include <string>

#include "rewind/tokenizer.h"

namespace rwd::cli {

// Along the tokens of `text` (encoded without BOS): a fresh matcher, then the same with its
// caches warm. Prints one line per pass (median, p90, p99, max) after the compile times.
void time_text_masks(const std::string& gbnf, const Tokenizer& tok, const std::string& text);

struct WorkloadTiming {
    std::string workload; // a JSON-lines workload whose items carry json_schema, grammar or regex
    int rounds = 3;       // each with a fresh grammar cache (so each grammar has a first run per round)
    int steps = 150;      // tokens per path at most
    int slowest = 8;      // the slowest first-run masks to list, with the text before them
    uint32_t seed = 1;
};

// For each round: a fresh GrammarCache; each item's grammar is compiled (timed), then a random
// valid path of up to `steps` tokens (mostly short ones, ending where the grammar is finished)
// is walked, each fill_mask timed. An item whose grammar is new in the round is that grammar's
// first run; later items of the same grammar are cached runs. Prints per grammar and overall:
// compile time, and median, p99 and max mask time for first and cached runs.
void time_workload_masks(const WorkloadTiming& w, const Tokenizer& tok);

} // namespace rwd::cli
