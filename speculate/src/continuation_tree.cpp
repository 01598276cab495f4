// ContinuationTree: a trie with sibling lists (few children per node in practice), then a
// best-first walk with a binary heap over the frontier.
#include "continuation_tree.h"

#include <algorithm>
#include <string>

#include "rewind/error.h"

namespace rwd::speculate {

void check_tree_options(std::string_view who, int branches, int max_occurrences) {
    if (branches < 1)
        throw Error(std::string(who) + ": branches " + std::to_string(branches) + " must be at least 1");
    if (max_occurrences < 1)
        throw Error(std::string(who) + ": max_occurrences " + std::to_string(max_occurrences) + " must be at least 1");
}

namespace {

// Heap order: the higher path probability first, then the more recent occurrence. A node's path
// probability, the product of count/parent count down from the context, telescopes to
// count / (number of continuations): comparing counts is exact where products of floats are not.
bool worse(int32_t ca, int32_t na, int32_t cb, int32_t nb) { return ca < cb || (ca == cb && na > nb); }

} // namespace

double ContinuationTree::build(const Continuations& c, const TreeShape& shape, Proposal& out) {
    out.clear();
    nodes_.clear();
    if (c.size() == 0 || shape.k < 1 || shape.branches < 1 || shape.max_depth < 1) return 0;
    // The context's count: every continuation's weight (1 each unless the index weighed them).
    int32_t n_cont = 0;
    for (size_t j = 0; j < c.size(); ++j) n_cont += c.weight(j);
    int32_t root_first = -1; // the context's first child
    for (int32_t j = 0; j < static_cast<int32_t>(c.size()); ++j) {
        const auto seq = c[static_cast<size_t>(j)];
        const size_t len = std::min(seq.size(), static_cast<size_t>(shape.max_depth));
        int32_t parent = -1;
        for (size_t d = 0; d < len; ++d) {
            int32_t& head = parent < 0 ? root_first : nodes_[static_cast<size_t>(parent)].first_child;
            int32_t at = head;
            while (at >= 0 && nodes_[static_cast<size_t>(at)].token != seq[d]) at = nodes_[static_cast<size_t>(at)].next_sibling;
            if (at < 0) {
                Node node;
                node.token = seq[d];
                node.parent = parent;
                node.newest = j; // continuations arrive newest first
                node.depth = static_cast<int32_t>(d) + 1;
                node.next_sibling = head;
                at = static_cast<int32_t>(nodes_.size());
                // `head` may dangle once nodes_ grows: write through the index instead.
                if (parent < 0) root_first = at;
                else nodes_[static_cast<size_t>(parent)].first_child = at;
                nodes_.push_back(node);
            }
            nodes_[static_cast<size_t>(at)].count += c.weight(static_cast<size_t>(j));
            parent = at;
        }
    }
    out_index_.assign(nodes_.size(), -1);
    taken_.assign(nodes_.size(), 0);
    int root_taken = 0;
    heap_.clear();
    auto cmp = [](const Candidate& a, const Candidate& b) { return worse(a.count, a.newest, b.count, b.newest); };
    auto push_children = [&](int32_t first, int32_t parent_count) {
        for (int32_t ch = first; ch >= 0; ch = nodes_[static_cast<size_t>(ch)].next_sibling) {
            const Node& n = nodes_[static_cast<size_t>(ch)];
            if (static_cast<double>(n.count) < static_cast<double>(shape.min_weight) * parent_count) continue;
            heap_.push_back({n.count, n.newest, ch});
            std::push_heap(heap_.begin(), heap_.end(), cmp);
        }
    };
    push_children(root_first, n_cont);
    double score = 0;
    out.parents.reserve(static_cast<size_t>(shape.k));
    while (!heap_.empty() && out.tokens.size() < static_cast<size_t>(shape.k)) {
        std::pop_heap(heap_.begin(), heap_.end(), cmp);
        const Candidate cand = heap_.back();
        heap_.pop_back();
        const Node& n = nodes_[static_cast<size_t>(cand.node)];
        int& siblings_taken = n.parent < 0 ? root_taken : taken_[static_cast<size_t>(n.parent)];
        if (siblings_taken >= shape.branches) continue;
        ++siblings_taken;
        const int32_t parent_count = n.parent < 0 ? n_cont : nodes_[static_cast<size_t>(n.parent)].count;
        out_index_[static_cast<size_t>(cand.node)] = static_cast<int32_t>(out.tokens.size());
        out.tokens.push_back(n.token);
        out.parents.push_back(n.parent < 0 ? -1 : out_index_[static_cast<size_t>(n.parent)]);
        out.weights.push_back(static_cast<float>(static_cast<double>(n.count) / parent_count));
        score += static_cast<double>(n.count) / n_cont;
        push_children(n.first_child, n.count);
    }
    return score;
}

} // namespace rwd::speculate
