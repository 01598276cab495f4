// Checks and normalisation done once a GBNF text is read: class ranges, generated rule names, and
// refusing left recursion (which a top-down matcher could never finish expanding).
#include "gbnf_checks.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "rewind/error.h"

namespace rwd::grammar {

std::string location(std::string_view text, size_t at) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < text.size(); ++i) {
        if (text[i] == '\n') {
            ++line;
            col = 1;
        } else {
            ++col;
        }
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

std::vector<std::pair<uint32_t, uint32_t>> normalize_ranges(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto& r : ranges) {
        if (!merged.empty() && r.first <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, r.second);
        else merged.push_back(r);
    }
    if (!negated) return merged;
    std::vector<std::pair<uint32_t, uint32_t>> out;
    uint32_t next = 0;
    for (const auto& r : merged) {
        if (r.first > next) out.emplace_back(next, r.first - 1);
        next = r.second + 1;
    }
    if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
    return out;
}

void name_generated_rules(Grammar& g) {
    std::unordered_set<std::string> taken;
    for (const Rule& r : g.rules)
        if (!r.generated) taken.insert(r.name);
    std::unordered_map<std::string, size_t> next; // per parent: the number to try first
    for (Rule& r : g.rules) {
        if (!r.generated) continue;
        for (size_t& n = ++next[r.name];; ++n) {
            std::string name = r.name + "-" + std::to_string(n);
            if (taken.insert(name).second) {
                r.name = std::move(name);
                break;
            }
        }
    }
}

std::vector<bool> nullable_rules(const Grammar& g) {
    std::vector<bool> nullable(g.rules.size(), false);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < g.rules.size(); ++r) {
            if (nullable[r]) continue;
            for (const Sequence& alt : g.rules[r].alternatives) {
                const bool all = std::all_of(alt.begin(), alt.end(), [&](const Element& e) {
                    return e.kind == Element::Kind::Rule && nullable[e.index];
                });
                if (all) {
                    nullable[r] = changed = true;
                    break;
                }
            }
        }
    }
    return nullable;
}

void prune_unfinishable(Grammar& g) {
    auto finishes = [&g](const Element& e, const std::vector<bool>& productive) {
        if (e.kind == Element::Kind::Rule) return static_cast<bool>(productive[e.index]);
        if (e.kind == Element::Kind::Chars) return !g.classes[e.index].ranges.empty();
        return true; // a token
    };
    std::vector<bool> productive(g.rules.size(), false);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < g.rules.size(); ++r) {
            if (productive[r]) continue;
            for (const Sequence& alt : g.rules[r].alternatives) {
                if (std::all_of(alt.begin(), alt.end(), [&](const Element& e) { return finishes(e, productive); })) {
                    productive[r] = changed = true;
                    break;
                }
            }
        }
    }
    if (!productive[g.root])
        throw Error(ErrorCode::argument, "GBNF: the start rule '" + g.rules[g.root].name +
                                             "' has no finite sentence (every expansion recurses forever or uses an empty class)");
    for (size_t r = 0; r < g.rules.size(); ++r) {
        if (!productive[r]) continue; // unreachable once the alternatives using it are gone
        auto& alts = g.rules[r].alternatives;
        alts.erase(std::remove_if(alts.begin(), alts.end(),
                                  [&](const Sequence& alt) {
                                      return !std::all_of(alt.begin(), alt.end(), [&](const Element& e) { return finishes(e, productive); });
                                  }),
                   alts.end());
    }
}

namespace {

// Rules each rule can start with: those referenced before anything non-nullable in an alternative.
std::vector<std::vector<uint32_t>> leftmost_edges(const Grammar& g, const std::vector<bool>& nullable) {
    std::vector<std::vector<uint32_t>> edges(g.rules.size());
    for (size_t r = 0; r < g.rules.size(); ++r) {
        for (const Sequence& alt : g.rules[r].alternatives) {
            for (const Element& e : alt) {
                if (e.kind != Element::Kind::Rule) break;
                edges[r].push_back(e.index);
                if (!nullable[e.index]) break;
            }
        }
    }
    return edges;
}

} // namespace

void check_left_recursion(const Grammar& g) {
    const auto edges = leftmost_edges(g, nullable_rules(g));
    enum : uint8_t { kNew, kOpen, kDone };
    std::vector<uint8_t> color(g.rules.size(), kNew);
    std::vector<std::pair<uint32_t, size_t>> stack; // (rule, next edge): iterative, any depth
    for (uint32_t start = 0; start < g.rules.size(); ++start) {
        if (color[start] != kNew) continue;
        stack.emplace_back(start, 0);
        color[start] = kOpen;
        while (!stack.empty()) {
            auto& [r, i] = stack.back();
            if (i == edges[r].size()) {
                color[r] = kDone;
                stack.pop_back();
                continue;
            }
            const uint32_t next = edges[r][i++];
            if (color[next] == kOpen) {
                std::string cycle;
                size_t k = 0;
                while (stack[k].first != next) ++k;
                for (; k < stack.size(); ++k) cycle += g.rules[stack[k].first].name + " -> ";
                throw Error(ErrorCode::argument, "GBNF: left recursion (a rule reaches itself before any input): " +
                                                     cycle + g.rules[next].name);
            }
            if (color[next] == kNew) {
                color[next] = kOpen;
                stack.emplace_back(next, 0);
            }
        }
    }
}

} // namespace rwd::grammar
