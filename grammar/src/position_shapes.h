// Shapes of grammar positions up to a horizon: two positions with the same shape for a budget of
// n bytes match the same byte strings of up to n bytes, so a vocabulary walk from one serves both
// (the chain of rules a bounded repetition `x{0,120}` expands to has one shape for most links).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "rewind/grammar/matcher.h"

namespace rwd::grammar {

class PositionShapes {
public:
    explicit PositionShapes(const CompiledGrammar& g);

    // The shape id of program position `pos` (the elements from there to the end of its
    // alternative, then a return to the parent) for strings of at most `budget` bytes: equal ids
    // mean equal behaviour on them, including where the alternative ends. Ids only grow finer
    // with the budget. nullopt when the expansion nests too deep to compare (callers then keep
    // positions apart).
    std::optional<uint32_t> of(uint32_t pos, int budget);

private:
    const CompiledGrammar& g_;
    std::vector<uint32_t> class_ids_; // per class: equal for classes of the same code points
    std::vector<uint32_t> min_bytes_; // per rule: the fewest bytes a sentence of it takes
    std::unordered_map<uint64_t, uint32_t> memo_; // (pos, budget) -> id
    std::map<std::vector<uint32_t>, uint32_t> ids_; // shape terms, interned
    size_t depth_ = 0;
    bool too_deep_ = false;

    uint32_t intern(std::vector<uint32_t> term);
    uint32_t shape(uint32_t pos, int budget);
    uint32_t rule_shape(uint32_t rule, int budget);
};

} // namespace rwd::grammar
