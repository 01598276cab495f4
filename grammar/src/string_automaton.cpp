// Patterns as NFAs and the product of NFAs with a length counter (see string_automaton.h).
#include "string_automaton.h"

#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>

#include "rewind/error.h"

namespace rwd::grammar::detail {
namespace {

// Closure work (state visits while removing epsilon moves) allowed before giving up.
constexpr size_t kMaxClosureWork = size_t{20} << 20;

[[noreturn]] void too_large() {
    throw Error(ErrorCode::capacity, "pattern: the automaton for this pattern and its bounds exceeds " +
                                         std::to_string(kMaxAutomatonStates) + " states");
}

struct EpsNfa {
    std::vector<std::vector<Nfa::Edge>> edges;
    std::vector<std::vector<int>> eps;
    int add() {
        if (edges.size() >= kMaxAutomatonStates) too_large();
        edges.emplace_back();
        eps.emplace_back();
        return static_cast<int>(edges.size()) - 1;
    }
};

int build(const RegexNode& n, int from, EpsNfa& a, int64_t clip);

int build_repeat(const RegexNode& n, int from, EpsNfa& a, int64_t clip) {
    const RegexNode& kid = *n.kids[0];
    int64_t lo = n.min, hi = n.max;
    if (regex_min_length(kid) == 0) {
        lo = 0; // empty turns make up any count
        if (clip != kUnbounded && hi != kUnbounded) hi = std::min(hi, clip);
    } else if (clip != kUnbounded) {
        if (lo > clip) return a.add(); // longer than any allowed string: unreachable end
        if (hi != kUnbounded) hi = std::min(hi, clip);
    }
    int cur = from;
    for (int64_t i = 0; i < lo; ++i) cur = build(kid, cur, a, clip);
    if (hi == kUnbounded) {
        const int loop = a.add();
        a.eps[static_cast<size_t>(cur)].push_back(loop);
        const int e = build(kid, loop, a, clip);
        a.eps[static_cast<size_t>(e)].push_back(loop);
        return loop;
    }
    const int end = a.add();
    a.eps[static_cast<size_t>(cur)].push_back(end);
    for (int64_t i = lo; i < hi; ++i) {
        cur = build(kid, cur, a, clip);
        a.eps[static_cast<size_t>(cur)].push_back(end);
    }
    return end;
}

int build(const RegexNode& n, int from, EpsNfa& a, int64_t clip) {
    switch (n.kind) {
    case RegexNode::Kind::set: {
        const int s = a.add();
        a.edges[static_cast<size_t>(from)].push_back({n.set, s});
        return s;
    }
    case RegexNode::Kind::seq: {
        int cur = from;
        for (const auto& k : n.kids) cur = build(*k, cur, a, clip);
        return cur;
    }
    case RegexNode::Kind::alt: {
        const int end = a.add();
        for (const auto& k : n.kids) a.eps[static_cast<size_t>(build(*k, from, a, clip))].push_back(end);
        return end;
    }
    case RegexNode::Kind::repeat: return build_repeat(n, from, a, clip);
    }
    return from;
}

// Removes epsilon moves: a state gets the character edges and finality of its closure.
Nfa without_epsilons(const EpsNfa& a, int start, const std::vector<bool>& final) {
    const size_t n = a.edges.size();
    Nfa out;
    out.edges.resize(n);
    out.final.assign(n, false);
    out.start = start;
    size_t work = 0;
    std::vector<int> mark(n, -1), stack;
    for (size_t q = 0; q < n; ++q) {
        stack.assign(1, static_cast<int>(q));
        mark[q] = static_cast<int>(q);
        while (!stack.empty()) {
            const auto p = static_cast<size_t>(stack.back());
            stack.pop_back();
            if (++work > kMaxClosureWork) too_large();
            if (final[p]) out.final[q] = true;
            for (const auto& e : a.edges[p]) out.edges[q].push_back(e);
            for (int r : a.eps[p])
                if (mark[static_cast<size_t>(r)] != static_cast<int>(q)) {
                    mark[static_cast<size_t>(r)] = static_cast<int>(q);
                    stack.push_back(r);
                }
        }
    }
    return out;
}

} // namespace

Nfa regex_nfa(const std::vector<RegexBranch>& branches, bool search, int64_t max_len) {
    EpsNfa a;
    const int start = a.add();
    std::vector<int> ends;
    for (const auto& b : branches) {
        int from = start;
        if (search && !b.anchored_start) {
            from = a.add();
            a.eps[static_cast<size_t>(start)].push_back(from);
            a.edges[static_cast<size_t>(from)].push_back({CharSet::all(), from});
        }
        int end = build(*b.body, from, a, max_len);
        if (search && !b.anchored_end) {
            const int post = a.add();
            a.eps[static_cast<size_t>(end)].push_back(post);
            a.edges[static_cast<size_t>(post)].push_back({CharSet::all(), post});
            end = post;
        }
        ends.push_back(end);
    }
    std::vector<bool> final(a.edges.size(), false);
    for (int e : ends) final[static_cast<size_t>(e)] = true;
    return without_epsilons(a, start, final);
}

namespace {

// A product state: the state of each NFA (at most two: a pattern and a format) and the length
// so far, packed into one integer for the lookup (16 bits per NFA state, 32 for the length: the
// state limit keeps both in range).
using Key = std::array<int, 3>;

uint64_t pack(const Key& k) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(k[0]) & 0xFFFF) << 48) |
           (static_cast<uint64_t>(static_cast<uint32_t>(k[1]) & 0xFFFF) << 32) | static_cast<uint32_t>(k[2]);
}

struct Product {
    std::unordered_map<uint64_t, int> ids;
    std::vector<Key> keys;
    std::vector<std::vector<Nfa::Edge>> edges;
    std::vector<bool> final;

    int id(const Key& key) {
        auto [it, fresh] = ids.emplace(pack(key), static_cast<int>(keys.size()));
        if (fresh) {
            if (keys.size() >= kMaxAutomatonStates) too_large();
            keys.push_back(key);
            edges.emplace_back();
            final.push_back(false);
        }
        return it->second;
    }
};

// Every combination of one edge per NFA from `key`'s states, with the intersected sets.
void combine(const std::vector<Nfa>& nfas, const Key& key, size_t i, const CharSet& set, Key& next,
             std::vector<std::pair<CharSet, Key>>& out) {
    if (i == nfas.size() || i == 2) { out.emplace_back(set, next); return; }
    for (const auto& e : nfas[i].edges[static_cast<size_t>(key[i])]) {
        const CharSet s = set.intersect(e.set);
        if (s.empty()) continue;
        next[i] = e.to;
        combine(nfas, key, i + 1, s, next, out);
    }
}

Product explore(const std::vector<Nfa>& nfas, int64_t min_len, int64_t max_len) {
    if (nfas.empty() || nfas.size() > 2) throw Error(ErrorCode::argument, "string automaton: one or two patterns expected");
    Product p;
    Key start{0, 0, 0}; // the last: the length so far (saturating at min_len when there is no maximum)
    for (size_t i = 0; i < nfas.size() && i < 2; ++i) start[i] = nfas[i].start;
    std::vector<int> todo{p.id(start)};
    std::vector<std::pair<CharSet, Key>> moves;
    while (!todo.empty()) {
        const int s = todo.back();
        todo.pop_back();
        const Key key = p.keys[static_cast<size_t>(s)];
        const int64_t count = key[2];
        bool fin = count >= min_len;
        for (size_t i = 0; i < nfas.size() && i < 2; ++i) fin = fin && nfas[i].final[static_cast<size_t>(key[i])];
        p.final[static_cast<size_t>(s)] = fin;
        if (max_len != kUnbounded && count >= max_len) continue;
        moves.clear();
        Key next{0, 0, 0};
        combine(nfas, key, 0, CharSet::all(), next, moves);
        for (auto& [set, to] : moves) {
            to[2] = static_cast<int>(max_len == kUnbounded ? std::min(count + 1, min_len) : count + 1);
            const size_t before = p.keys.size();
            const int t = p.id(to);
            if (p.keys.size() > before) todo.push_back(t);
            p.edges[static_cast<size_t>(s)].push_back({std::move(set), t});
        }
    }
    return p;
}

// States from which a final state is reachable.
std::vector<bool> live_states(const Product& p) {
    const size_t n = p.keys.size();
    std::vector<std::vector<int>> rev(n);
    for (size_t s = 0; s < n; ++s)
        for (const auto& e : p.edges[s]) rev[static_cast<size_t>(e.to)].push_back(static_cast<int>(s));
    std::vector<bool> live(n, false);
    std::vector<int> todo;
    for (size_t s = 0; s < n; ++s)
        if (p.final[s]) { live[s] = true; todo.push_back(static_cast<int>(s)); }
    while (!todo.empty()) {
        const int s = todo.back();
        todo.pop_back();
        for (int r : rev[static_cast<size_t>(s)])
            if (!live[static_cast<size_t>(r)]) { live[static_cast<size_t>(r)] = true; todo.push_back(r); }
    }
    return live;
}

} // namespace

std::optional<std::string> emit_intersection(const std::vector<Nfa>& nfas, int64_t min_len, int64_t max_len,
                                             const CharEmitter& emit, GbnfWriter& w, const std::string& prefix) {
    const Product p = explore(nfas, min_len, max_len);
    const std::vector<bool> live = live_states(p);
    if (!live[0]) return std::nullopt;
    const size_t n = p.keys.size();
    // Live targets merged per state; a final state with nowhere to go needs no rule.
    std::vector<std::map<int, CharSet>> out(n);
    for (size_t s = 0; s < n; ++s)
        for (const auto& e : p.edges[s])
            if (live[static_cast<size_t>(e.to)]) out[s][e.to].add(e.set);
    std::vector<std::string> names(n);
    for (size_t s = 0; s < n; ++s)
        if (live[s] && !out[s].empty()) names[s] = w.reserve(prefix);
    if (names[0].empty()) return "\"\"";
    for (size_t s = 0; s < n; ++s) {
        if (names[s].empty()) continue;
        std::string body;
        for (const auto& [to, set] : out[s]) {
            body += (body.empty() ? "" : " | ") + emit(set);
            if (!names[static_cast<size_t>(to)].empty()) body += " " + names[static_cast<size_t>(to)];
        }
        if (p.final[s]) body += " | \"\"";
        w.define(names[s], body);
    }
    return names[0];
}

namespace {

std::string quantifier(int64_t lo, int64_t hi) {
    if (lo == 0 && hi == kUnbounded) return "*";
    if (lo == 1 && hi == kUnbounded) return "+";
    if (lo == 0 && hi == 1) return "?";
    if (hi == kUnbounded) return cat("{", std::to_string(lo), ",}");
    if (lo == hi) return cat("{", std::to_string(lo), "}");
    return cat("{", std::to_string(lo), ",", std::to_string(hi), "}");
}

// The expression of a node; `atomic` says whether a quantifier may follow it unbracketed.
std::string node_expr(const RegexNode& n, const CharEmitter& emit, bool* atomic) {
    *atomic = true;
    switch (n.kind) {
    case RegexNode::Kind::set: return emit(n.set);
    case RegexNode::Kind::seq: {
        if (n.kids.empty()) return "\"\"";
        if (n.kids.size() == 1) return node_expr(*n.kids[0], emit, atomic);
        std::string s;
        bool a = false;
        for (const auto& k : n.kids) s += cat(s.empty() ? "" : " ", node_expr(*k, emit, &a));
        *atomic = false;
        return s;
    }
    case RegexNode::Kind::alt: {
        if (n.kids.size() == 1) return node_expr(*n.kids[0], emit, atomic);
        std::string s = "(";
        bool a = false;
        for (size_t i = 0; i < n.kids.size(); ++i) s += (i ? " | " : "") + node_expr(*n.kids[i], emit, &a);
        return s + ")";
    }
    case RegexNode::Kind::repeat: {
        bool a = false;
        std::string s = node_expr(*n.kids[0], emit, &a);
        if (!a) s = "(" + s + ")";
        *atomic = false;
        return s + quantifier(n.min, n.max);
    }
    }
    return "\"\"";
}

} // namespace

std::string regex_expr(const std::vector<RegexBranch>& branches, bool search, const CharEmitter& emit) {
    std::string out;
    for (const auto& b : branches) {
        bool atomic = false;
        std::string s = node_expr(*b.body, emit, &atomic);
        if (search && !b.anchored_start) s = emit(CharSet::all()) + "* " + s;
        if (search && !b.anchored_end) s += cat(" ", emit(CharSet::all()), "*");
        out += (out.empty() ? "" : " | ") + s;
    }
    return branches.size() > 1 ? "(" + out + ")" : out;
}

} // namespace rwd::grammar::detail
