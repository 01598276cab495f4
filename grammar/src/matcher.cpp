// The matcher: pushdown stacks of hash-consed frames, grouped into lazily built automaton states
// (a sorted set of stacks plus the bytes of an unfinished UTF-8 character), with memoized byte
// steps. Accepting text only moves along states; the history of states makes undo O(1).
#include "rewind/grammar/matcher.h"

#include <algorithm>
#include <cstring>

#include "rewind/error.h"
#include "rewind/grammar/utf8.h"
#include "rewind/tokenizer.h"

namespace rwd::grammar {

namespace {

// Code points that an unfinished UTF-8 character `bytes` (valid so far) can still become: a range.
std::pair<uint32_t, uint32_t> partial_range(const unsigned char* b, size_t k) {
    const size_t n = utf8_length_of(b[0]);
    unsigned char lo2 = 0x80, hi2 = 0xBF; // the second byte's range depends on the first
    if (b[0] == 0xE0) lo2 = 0xA0;
    else if (b[0] == 0xED) hi2 = 0x9F;
    else if (b[0] == 0xF0) lo2 = 0x90;
    else if (b[0] == 0xF4) hi2 = 0x8F;
    char lo[4], hi[4];
    for (size_t i = 0; i < n; ++i) {
        lo[i] = static_cast<char>(i < k ? b[i] : i == 1 ? lo2 : 0x80);
        hi[i] = static_cast<char>(i < k ? b[i] : i == 1 ? hi2 : 0xBF);
    }
    return {decode_utf8(std::string_view(lo, n)).code_point, decode_utf8(std::string_view(hi, n)).code_point};
}

// The bytes of an unfinished character (valid so far) reduced to what decides which bytes may
// follow: the lead byte's kind and the count, so that equivalent characters share one state.
uint32_t canonical_partial(const unsigned char* b, size_t k) {
    const size_t n = utf8_length_of(b[0]);
    if (k >= 2) return n == 3 ? 0x80E1u : k == 2 ? 0x80F1u : 0x8080F1u; // only 0x80..0xBF may follow
    if (n == 2) return 0xC2;
    if (n == 3) return b[0] == 0xE0 || b[0] == 0xED ? b[0] : 0xE1u;
    return b[0] == 0xF0 || b[0] == 0xF4 ? b[0] : 0xF1u;
}

} // namespace

CompiledGrammar::CompiledGrammar(Grammar g, const Tokenizer* tok) : grammar_(std::move(g)) {
    alt_starts_.resize(grammar_.rules.size());
    for (size_t r = 0; r < grammar_.rules.size(); ++r) {
        for (const Sequence& alt : grammar_.rules[r].alternatives) {
            alt_starts_[r].push_back(static_cast<uint32_t>(program_.size()));
            for (const Element& e : alt) {
                const Op op = e.kind == Element::Kind::Chars  ? Op::Chars
                              : e.kind == Element::Kind::Rule ? Op::Rule
                              : e.kind == Element::Kind::Token ? Op::Token
                                                               : Op::NotToken;
                program_.push_back({op, e.index});
            }
            program_.push_back({Op::End, 0});
        }
    }
    for (const TokenRef& t : grammar_.tokens) {
        int32_t id = t.id;
        if (tok && t.text.empty() && !tok->valid(id))
            throw Error(ErrorCode::argument, "grammar: token <[" + std::to_string(id) + "]> is outside the vocabulary of " +
                                                 std::to_string(tok->n_vocab()) + " tokens");
        if (tok && !t.text.empty()) {
            const auto ids = tok->encode(t.text, AddBos::No, SpecialTokens::Parse);
            if (ids.size() != 1)
                throw Error(ErrorCode::argument, "grammar: token " + t.text + " is not one token of the vocabulary (it encodes to " +
                                                     std::to_string(ids.size()) + " tokens)");
            id = ids[0];
        }
        token_ids_.push_back(id);
    }
}

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> g, const MatcherLimits& limits) : g_(std::move(g)), limits_(limits) {
    frames_.push_back({0, 0}); // frame 0: the empty stack
    frames_.push_back({0, 0}); // frame 1: kMark, "returned below a local stack" (local_state)
    intern({}, 0, 0);          // state 0: dead
    std::vector<uint32_t> start;
    visited_.clear();
    for (uint32_t alt : g_->alternatives(g_->grammar().root)) closure(alt, 0, start);
    std::sort(start.begin(), start.end());
    start.erase(std::unique(start.begin(), start.end()), start.end());
    initial_ = intern(std::move(start), 0, 0);
    history_.push_back({initial_, serial_++});
}

void Matcher::reset() {
    history_.clear();
    history_.push_back({initial_, serial_++});
}

uint32_t Matcher::frame(uint32_t pos, uint32_t parent) {
    const uint64_t key = (uint64_t{pos} << 32) | parent;
    if (auto it = frame_ids_.find(key); it != frame_ids_.end()) return it->second;
    if (frames_.size() >= limits_.max_frames)
        throw Error(ErrorCode::capacity, "grammar matcher: more than " + std::to_string(limits_.max_frames) + " stack frames");
    const auto id = static_cast<uint32_t>(frames_.size());
    frames_.push_back({pos, parent});
    frame_ids_.emplace(key, id);
    return id;
}

// Every stack reachable from (pos, parent) without input whose top is a terminal (or the empty
// stack 0), appended to `out`. A rule reference at the end of an alternative returns straight to
// the parent (no frame), so right recursion (`x*`) keeps stacks short; `visited_` dedupes.
void Matcher::closure(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out) {
    const auto& prog = g_->program();
    work_.clear();
    work_.emplace_back(pos, parent);
    while (!work_.empty()) {
        const auto [p, par] = work_.back();
        work_.pop_back();
        if (!visited_.insert((uint64_t{p} << 32) | par).second) continue;
        const auto& in = prog[p];
        if (in.op == CompiledGrammar::Op::End) {
            if (par <= kMark) out.push_back(par);
            else work_.emplace_back(frames_[par].pos, frames_[par].parent);
        } else if (in.op == CompiledGrammar::Op::Rule) {
            const uint32_t cont = prog[p + 1].op == CompiledGrammar::Op::End ? par : frame(p + 1, par);
            for (uint32_t alt : g_->alternatives(in.arg)) work_.emplace_back(alt, cont);
        } else {
            out.push_back(frame(p, par));
        }
        if (out.size() > limits_.max_stacks)
            throw Error(ErrorCode::capacity, "grammar matcher: more than " + std::to_string(limits_.max_stacks) +
                                                 " stacks alive at once (a very ambiguous grammar)");
    }
}

Matcher::StateId Matcher::intern(std::vector<uint32_t> stacks, uint32_t pending, uint8_t pending_len) {
    std::string key(stacks.size() * sizeof(uint32_t) + 5, '\0');
    if (!stacks.empty()) std::memcpy(key.data(), stacks.data(), stacks.size() * sizeof(uint32_t));
    std::memcpy(key.data() + stacks.size() * sizeof(uint32_t), &pending, 4);
    key.back() = static_cast<char>(pending_len);
    if (auto it = state_ids_.find(key); it != state_ids_.end()) return it->second;
    if (states_.size() >= limits_.max_states)
        throw Error(ErrorCode::capacity, "grammar matcher: more than " + std::to_string(limits_.max_states) + " automaton states");
    const auto id = static_cast<StateId>(states_.size());
    const bool mark = std::binary_search(stacks.begin(), stacks.end(), kMark);
    states_.push_back(State{std::move(stacks), pending, pending_len, mark, {}});
    marks_.push_back(mark ? 1 : 0);
    loops_.push_back({0, 0});
    loop_known_.push_back(0);
    next_.resize(states_.size() * 256, kUnknown);
    state_ids_.emplace(std::move(key), id);
    return id;
}

// The step depends only on which stacks take `cp`, so the characters the same stacks take (most
// of a class) share one closure: memoized per state by that set (for states of up to 64 stacks).
Matcher::StateId Matcher::advance(StateId sid, uint32_t cp, bool all) {
    const std::vector<uint32_t> stacks = states_[sid].stacks; // a copy: states_ may grow below
    const auto& prog = g_->program();
    const auto& classes = g_->grammar().classes;
    const bool memo = stacks.size() <= 64;
    uint64_t takers = 0;
    std::vector<uint32_t> taking;
    for (size_t i = 0; i < stacks.size(); ++i) {
        if (stacks[i] <= kMark) continue;
        const auto& in = prog[frames_[stacks[i]].pos];
        if (in.op != CompiledGrammar::Op::Chars || !(all || classes[in.arg].contains(cp))) continue;
        taking.push_back(stacks[i]);
        if (memo) takers |= uint64_t{1} << i;
    }
    if (taking.empty()) return kDead;
    if (memo)
        for (const auto& [set, next] : states_[sid].by_takers)
            if (set == takers) return next;
    std::vector<uint32_t> out;
    visited_.clear();
    for (uint32_t st : taking) closure(frames_[st].pos + 1, frames_[st].parent, out);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    const StateId next = intern(std::move(out), 0, 0);
    if (memo) states_[sid].by_takers.emplace_back(takers, next);
    return next;
}

// State `s` with the unfinished character `pending` (`len` bytes): dead if the bytes can never be
// UTF-8, the character's step once complete, else the stacks that can still take it.
Matcher::StateId Matcher::after_partial(StateId s, uint32_t pending, uint8_t len) {
    unsigned char b[4];
    for (size_t i = 0; i < len; ++i) b[i] = static_cast<unsigned char>(pending >> (8 * i));
    const Utf8Step d = decode_utf8(std::string_view(reinterpret_cast<const char*>(b), len));
    if (!d.valid) return kDead;
    if (d.length > 0) return advance(s, d.code_point);
    const auto [lo, hi] = partial_range(b, len);
    const auto& prog = g_->program();
    const auto& classes = g_->grammar().classes;
    std::vector<uint32_t> keep;
    for (uint32_t st : states_[s].stacks) {
        if (st <= kMark) continue;
        const auto& in = prog[frames_[st].pos];
        if (in.op == CompiledGrammar::Op::Chars && classes[in.arg].intersects(lo, hi)) keep.push_back(st);
    }
    if (keep.empty()) return kDead;
    bool whole = true;
    for (uint32_t st : keep) whole = whole && classes[prog[frames_[st].pos].arg].covers(lo, hi);
    if (whole) return intern(std::move(keep), canonical_partial(b, len), static_cast<uint8_t>(len | kWholeChar));
    return intern(std::move(keep), pending, len);
}

// A state whose stacks all take every character its unfinished one can become: only the bytes'
// validity is left to check, on the canonical bytes kept, and once complete every stack takes it.
Matcher::StateId Matcher::after_whole(StateId s, uint32_t pending, uint8_t len) {
    unsigned char b[4];
    for (size_t i = 0; i < len; ++i) b[i] = static_cast<unsigned char>(pending >> (8 * i));
    const Utf8Step d = decode_utf8(std::string_view(reinterpret_cast<const char*>(b), len));
    if (!d.valid) return kDead;
    if (d.length > 0) return advance(s, 0, true);
    std::vector<uint32_t> keep = states_[s].stacks; // a copy: intern may grow states_
    return intern(std::move(keep), canonical_partial(b, len), static_cast<uint8_t>(len | kWholeChar));
}

Matcher::StateId Matcher::compute_step(StateId s, uint8_t byte) {
    const uint8_t len = states_[s].pending_len & kLenBits;
    if (len == 0) {
        if (byte < 0x80) return advance(s, byte);
        if (utf8_length_of(byte) == 0) return kDead;
        return after_partial(s, byte, 1);
    }
    const uint32_t pending = states_[s].pending | (uint32_t{byte} << (8 * len));
    if (states_[s].pending_len & kWholeChar) return after_whole(s, pending, static_cast<uint8_t>(len + 1));
    return after_partial(s, pending, static_cast<uint8_t>(len + 1));
}

Matcher::StateId Matcher::slow_step(StateId s, uint8_t byte) {
    const StateId t = s == kDead ? kDead : compute_step(s, byte);
    next_[size_t{s} * 256 + byte] = t; // after compute_step: next_ may have grown
    return t;
}

bool Matcher::complete(StateId s) const {
    const State& st = states_[s];
    return st.pending_len == 0 && !st.stacks.empty() && st.stacks[0] == 0;
}

bool Matcher::is_complete() const { return complete(state()); }

bool Matcher::is_finished() const { return complete(state()) && states_[state()].stacks.size() == 1; }

void Matcher::push_state(StateId s) { history_.push_back({s, serial_++}); }

const std::array<uint64_t, 2>& Matcher::loop_set(StateId s) {
    if (!loop_known_[s]) {
        std::array<uint64_t, 2> set{0, 0};
        if (s != kDead)
            for (uint32_t b = 0; b < 0x80; ++b)
                if (step(s, static_cast<uint8_t>(b)) == s) set[b / 64] |= uint64_t{1} << (b % 64);
        loops_[s] = set; // after the steps: loops_ may have grown
        loop_known_[s] = 1;
    }
    return loops_[s];
}

bool Matcher::top_is_chars(uint32_t stack) const {
    return stack > kMark && g_->program()[frames_[stack].pos].op == CompiledGrammar::Op::Chars;
}

Matcher::StateId Matcher::single_state(uint32_t stack, StateId of) {
    return intern({stack}, states_[of].pending, states_[of].pending_len);
}

std::string Matcher::LocalKey::bytes() const {
    std::string key(positions.size() * 4 + 9, '\0');
    if (!positions.empty()) std::memcpy(key.data(), positions.data(), positions.size() * 4);
    std::memcpy(key.data() + positions.size() * 4, &bottom, 4);
    std::memcpy(key.data() + positions.size() * 4 + 4, &pending, 4);
    key.back() = static_cast<char>(pending_len);
    return key;
}

Matcher::LocalKey Matcher::local_key(uint32_t stack, size_t depth, StateId of) const {
    LocalKey k;
    uint32_t f = stack;
    for (; f > kMark && k.positions.size() < depth; f = frames_[f].parent) k.positions.push_back(frames_[f].pos);
    k.bottom = f == 0 ? 0 : kMark;
    k.pending = states_[of].pending;
    k.pending_len = states_[of].pending_len;
    return k;
}

Matcher::StateId Matcher::local_state(const LocalKey& key) {
    uint32_t local = key.bottom;
    for (auto it = key.positions.rbegin(); it != key.positions.rend(); ++it) local = frame(*it, local);
    return intern({local}, key.pending, key.pending_len);
}

bool Matcher::accept_bytes(std::string_view bytes) {
    StateId s = state();
    for (char c : bytes) {
        s = step(s, static_cast<uint8_t>(c));
        if (s == kDead) return false;
    }
    push_state(s);
    return true;
}

size_t Matcher::valid_prefix_length(std::string_view bytes) {
    StateId s = state();
    for (size_t i = 0; i < bytes.size(); ++i) {
        s = step(s, static_cast<uint8_t>(bytes[i]));
        if (s == kDead) return i;
    }
    return bytes.size();
}

void Matcher::token_elements(StateId s, std::vector<std::pair<int32_t, bool>>& out) const {
    const auto& prog = g_->program();
    for (uint32_t st : states_[s].stacks) {
        if (st <= kMark) continue;
        const auto& in = prog[frames_[st].pos];
        if (in.op == CompiledGrammar::Op::Token && g_->token_id(in.arg) >= 0) out.emplace_back(g_->token_id(in.arg), false);
        else if (in.op == CompiledGrammar::Op::NotToken) out.emplace_back(g_->token_id(in.arg), true);
    }
}

Matcher::StateId Matcher::element_step(int32_t id, bool control) {
    const State& st = states_[state()];
    if (st.pending_len != 0) return kDead;
    const std::vector<uint32_t> stacks = st.stacks;
    const auto& prog = g_->program();
    std::vector<uint32_t> out;
    visited_.clear();
    for (uint32_t s : stacks) {
        if (s <= kMark) continue;
        const Frame f = frames_[s];
        const auto& in = prog[f.pos];
        const int32_t named = in.op == CompiledGrammar::Op::Chars || in.op == CompiledGrammar::Op::End ? -2 : g_->token_id(in.arg);
        const bool match = (in.op == CompiledGrammar::Op::Token && named == id) ||
                           (in.op == CompiledGrammar::Op::NotToken && !control && named != id);
        if (match) closure(f.pos + 1, f.parent, out);
    }
    if (out.empty()) return kDead;
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return intern(std::move(out), 0, 0);
}

bool Matcher::accept_token_element(int32_t id, bool control) {
    const StateId s = element_step(id, control);
    if (s == kDead) return false;
    push_state(s);
    return true;
}

bool Matcher::accept_token(int32_t id, bool control, std::string_view bytes) {
    StateId by_bytes = bytes.empty() ? kDead : state();
    for (size_t i = 0; i < bytes.size() && by_bytes != kDead; ++i) by_bytes = step(by_bytes, static_cast<uint8_t>(bytes[i]));
    const StateId by_name = element_step(id, control);
    StateId next = by_bytes == kDead ? by_name : by_bytes;
    if (by_bytes != kDead && by_name != kDead && states_[by_bytes].pending_len == 0) {
        std::vector<uint32_t> both = states_[by_bytes].stacks;
        both.insert(both.end(), states_[by_name].stacks.begin(), states_[by_name].stacks.end());
        std::sort(both.begin(), both.end());
        both.erase(std::unique(both.begin(), both.end()), both.end());
        next = intern(std::move(both), 0, 0);
    } else if (by_name != kDead) {
        next = by_name;
    }
    if (next == kDead) return false;
    push_state(next);
    return true;
}

std::string Matcher::forced_bytes(size_t max_bytes) {
    std::string out;
    StateId s = state();
    std::vector<std::pair<int32_t, bool>> tokens;
    while (out.size() < max_bytes && !complete(s)) {
        tokens.clear();
        token_elements(s, tokens);
        if (!tokens.empty()) break;
        StateId only = kDead;
        int count = 0;
        uint8_t byte = 0;
        for (int b = 0; b < 256 && count < 2; ++b) {
            const StateId t = step(s, static_cast<uint8_t>(b));
            if (t != kDead) {
                ++count;
                only = t;
                byte = static_cast<uint8_t>(b);
            }
        }
        if (count != 1) break;
        out.push_back(static_cast<char>(byte));
        s = only;
    }
    return out;
}

uint64_t Matcher::snapshot() const {
    return (history_.back().serial << 32) | static_cast<uint32_t>(history_.size() - 1);
}

void Matcher::rollback(uint64_t snapshot) {
    const size_t index = static_cast<uint32_t>(snapshot);
    if (index >= history_.size() || (history_[index].serial & 0xFFFFFFFFu) != (snapshot >> 32))
        throw Error(ErrorCode::state, "grammar matcher: rollback to a snapshot not on the present path "
                                      "(taken before a reset, or on a path already undone)");
    history_.resize(index + 1);
}

} // namespace rwd::grammar
