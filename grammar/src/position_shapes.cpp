// Shapes of grammar positions: structural terms (classes, token elements, rule expansions) unfolded
// only as far as a byte budget reaches, interned to ids. A rule reference costs at least the
// rule's shortest sentence, so a right-recursive chain unfolds budget-many links, not all of them.
#include "position_shapes.h"

#include <algorithm>
#include <limits>

namespace rwd::grammar {

namespace {

constexpr uint32_t kBeyond = 0, kEnd = 1; // unreachable within the budget; the alternative's end
constexpr uint32_t kTermChars = 0, kTermToken = 1, kTermRule = 2, kTermAlts = 3;
constexpr size_t kMaxDepth = 2048; // nesting of the unfolding (a stack of calls each)
constexpr uint32_t kInf = std::numeric_limits<uint32_t>::max() / 4;

} // namespace

PositionShapes::PositionShapes(const CompiledGrammar& g) : g_(g) {
    // Classes by their code points: each literal has a class of its own, and equal ones must
    // give equal shapes.
    std::map<std::vector<std::pair<uint32_t, uint32_t>>, uint32_t> class_ids;
    for (const CharClass& c : g.grammar().classes)
        class_ids_.push_back(class_ids.emplace(c.ranges, static_cast<uint32_t>(class_ids.size())).first->second);
    // Shortest sentences, by relaxing to a fixed point (as the reader's productivity check does).
    const auto& prog = g.program();
    const size_t n_rules = g.grammar().rules.size();
    min_bytes_.assign(n_rules, kInf);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n_rules; ++r) {
            for (uint32_t p : g.alternatives(static_cast<uint32_t>(r))) {
                uint32_t sum = 0;
                for (; prog[p].op != CompiledGrammar::Op::End; ++p)
                    sum += prog[p].op == CompiledGrammar::Op::Chars  ? 1
                           : prog[p].op == CompiledGrammar::Op::Rule ? min_bytes_[prog[p].arg]
                                                                     : 0; // a token element: no bytes
                sum = std::min(sum, kInf);
                if (sum < min_bytes_[r]) {
                    min_bytes_[r] = sum;
                    changed = true;
                }
            }
        }
    }
}

uint32_t PositionShapes::intern(std::vector<uint32_t> term) {
    const auto id = static_cast<uint32_t>(ids_.size() + 2); // after kBeyond and kEnd
    return ids_.emplace(std::move(term), id).first->second;
}

uint32_t PositionShapes::shape(uint32_t pos, int budget) {
    if (budget < 0) return kBeyond;
    const auto& in = g_.program()[pos];
    if (in.op == CompiledGrammar::Op::End) return kEnd;
    const uint64_t key = (uint64_t{pos} << 16) | static_cast<uint64_t>(budget);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    if (++depth_ > kMaxDepth) too_deep_ = true;
    uint32_t id = kBeyond;
    if (!too_deep_) {
        switch (in.op) {
        case CompiledGrammar::Op::Chars: // one character: at least one byte
            id = intern({kTermChars, class_ids_[in.arg], shape(pos + 1, budget - 1)});
            break;
        case CompiledGrammar::Op::Rule:
            id = intern({kTermRule, rule_shape(in.arg, budget),
                         shape(pos + 1, budget - static_cast<int>(std::min<uint32_t>(min_bytes_[in.arg], 0xFFFF)))});
            break;
        default: // a token element: bytes never pass it, so what follows it is out of reach
            id = intern({kTermToken, static_cast<uint32_t>(in.op), in.arg});
            break;
        }
    }
    --depth_;
    if (!too_deep_) memo_.emplace(key, id);
    return id;
}

uint32_t PositionShapes::rule_shape(uint32_t rule, int budget) {
    std::vector<uint32_t> term{kTermAlts};
    for (uint32_t alt : g_.alternatives(rule)) term.push_back(shape(alt, budget));
    return intern(std::move(term));
}

std::optional<uint32_t> PositionShapes::of(uint32_t pos, int budget) {
    if (budget < 0 || budget > 0xFFFF) return std::nullopt;
    too_deep_ = false;
    depth_ = 0;
    const uint32_t id = shape(pos, budget);
    if (too_deep_) return std::nullopt;
    return id;
}

} // namespace rwd::grammar
