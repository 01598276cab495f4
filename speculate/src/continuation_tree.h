// Builds a guess tree from several continuations of one match, ranked by how often each branch
// occurred: the one place n-gram, reference-copy and suffix guessing turn occurrences into trees.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "rewind/speculate/guess_source.h"
#include "rewind/speculate/token_index.h"

namespace rwd::speculate {

// Throws rwd::Error (argument) naming `who` unless branches >= 1 and max_occurrences >= 1.
void check_tree_options(std::string_view who, int branches, int max_occurrences);

struct TreeShape {
    int k = 1;              // at most this many nodes (>= 1)
    int branches = 1;       // at most this many children per node, the context included (>= 1)
    int max_depth = 1;      // at most this many guesses on any path (>= 1)
    float min_weight = 0.f; // a node whose weight (count / parent's count) is below this is left out
};

// A trie of continuations: every node counts the continuations that pass through it. Reused
// across passes (no allocation once its buffers are large enough).
class ContinuationTree {
public:
    // Builds the trie of `c` (newest continuation first; each cut to shape.max_depth tokens; each
    // counting c.weight(j)) and
    // writes into `out` (cleared first) the best-first tree: nodes in order of path probability
    // (product of weights from the context down), ties to the most recent occurrence, so every
    // parent precedes its children; weights[i] = count(i) / count(parent(i)), the context's count
    // being the number of continuations. Returns the tree's score: the sum of the path
    // probabilities of its nodes, the expected number of guesses that stand if the counts are
    // the truth. Nothing (score 0) when `c` is empty.
    double build(const Continuations& c, const TreeShape& shape, Proposal& out);

private:
    struct Node {
        TokenId token = 0;
        int32_t parent = -1;      // trie index; -1 for the context's children
        int32_t count = 0;        // continuations through this node
        int32_t newest = 0;       // the newest continuation (its index) through this node
        int32_t first_child = -1; // trie index
        int32_t next_sibling = -1;
        int32_t depth = 1;
    };
    struct Candidate {
        int32_t count; // stands for the path probability, count / continuations
        int32_t newest;
        int32_t node;
    };
    std::vector<Node> nodes_;
    std::vector<Candidate> heap_;
    std::vector<int32_t> out_index_; // trie node -> its index in the proposal (-1: not chosen)
    std::vector<int32_t> taken_;     // trie node -> its children chosen so far
};

} // namespace rwd::speculate
