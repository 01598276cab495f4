// The grammar matcher: which byte strings are prefixes of a sentence. Pushdown stacks (shared,
// hash-consed frames) are built into automaton states lazily, so a state is an integer, each byte
// step is memoized, and a snapshot or rollback is O(1).
#pragma once
#include <cstddef>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "rewind/grammar/gbnf.h"

namespace rwd {
class Tokenizer;
}

namespace rwd::grammar {

// A grammar ready to match: rules flattened into one program. Immutable once built; shared by
// the matchers of many sequences (any threads).
class CompiledGrammar {
public:
    // Without a tokenizer, tokens named by text never match (byte-only use: `rewind grammar --text`).
    // With one, each `<text>` must be exactly one token of its vocabulary (encoded with special
    // tokens parsed) and each `<[id]>` an id inside it; throws rwd::Error (argument) otherwise.
    explicit CompiledGrammar(Grammar g, const Tokenizer* tok = nullptr);

    enum class Op : uint8_t { End, Chars, Rule, Token, NotToken };
    struct Instr {
        Op op;
        uint32_t arg; // class, rule or token-ref index
    };

    const Grammar& grammar() const { return grammar_; }
    const std::vector<Instr>& program() const { return program_; }
    const std::vector<uint32_t>& alternatives(uint32_t rule) const { return alt_starts_[rule]; }
    int32_t token_id(uint32_t ref) const { return token_ids_[ref]; } // -1: unresolved
    bool names_tokens() const { return !token_ids_.empty(); }

private:
    Grammar grammar_;
    std::vector<Instr> program_;                  // each alternative's elements, then End
    std::vector<std::vector<uint32_t>> alt_starts_; // per rule: where its alternatives start
    std::vector<int32_t> token_ids_;
};

// Bounds on one matcher's memory (hostile or very ambiguous grammars); past one, the call that
// would pass it throws rwd::Error (capacity) and the state is unchanged.
struct MatcherLimits {
    size_t max_states = size_t{1} << 18;  // automaton states (each 1 KiB of transitions)
    size_t max_frames = size_t{1} << 22;  // distinct stack frames
    size_t max_stacks = size_t{1} << 12;  // stacks alive at once (ambiguity)
};

// One sequence's matcher. Not thread-safe: one thread at a time.
class Matcher {
public:
    using StateId = uint32_t;
    static constexpr StateId kDead = 0; // no sentence has the text so far as a prefix

    explicit Matcher(std::shared_ptr<const CompiledGrammar> g, const MatcherLimits& limits = {});

    void reset(); // back to the empty text

    // Appends `bytes` if the text stays a prefix of a sentence; returns false, state unchanged, if not.
    bool accept_bytes(std::string_view bytes);
    // How many leading bytes of `bytes` keep the text a prefix (state unchanged).
    size_t valid_prefix_length(std::string_view bytes);
    // Advances past token `id` named in the grammar (`<...>` or `!<...>` at the present point;
    // `control` tokens never match a `!<...>`); false, state unchanged, if none admits it.
    bool accept_token_element(int32_t id, bool control);
    // Advances past one token of a vocabulary: read as its `bytes` (when not empty) and as a token
    // element naming `id`; the union of both readings when both apply (the element reading alone
    // when the bytes end inside a character). False, state unchanged, when neither applies.
    bool accept_token(int32_t id, bool control, std::string_view bytes);

    bool is_complete() const;  // the text is a sentence
    bool is_finished() const;  // a sentence, and nothing can follow
    // The bytes every continuation starts with, up to where the grammar branches, may end, expects
    // a token element, or `max_bytes`. State unchanged.
    std::string forced_bytes(size_t max_bytes = 256);

    // O(1) undo: a snapshot names the present state; rollback returns to it. A snapshot must come
    // from the path that led here since the last reset(); throws rwd::Error (state) otherwise.
    uint64_t snapshot() const;
    void rollback(uint64_t snapshot);
    size_t depth() const { return history_.size() - 1; } // steps (accept calls) since reset

    // The automaton, for token masks: the present state, a memoized byte step, and state facts.
    StateId state() const { return history_.back().state; }
    StateId step(StateId s, uint8_t byte) {
        const StateId t = next_[size_t{s} * 256 + byte];
        return t != kUnknown ? t : slow_step(s, byte);
    }
    bool complete(StateId s) const;
    // Token elements at the top of a stack in state `s`: (id, negated) pairs, unresolved ones left out.
    void token_elements(StateId s, std::vector<std::pair<int32_t, bool>>& out) const;
    const CompiledGrammar& grammar() const { return *g_; }
    size_t state_count() const { return states_.size(); }

    // Advances to state `s` (reached from state() by steps), as one accept.
    void push_state(StateId s);

    // For masks computed stack by stack (TokenMatcher): a state's stacks (frame ids; 0 = root
    // finished), whether a stack's top is a character class, the state of that one stack alone,
    // and its local stack: the top `depth` frames over kMark, a bottom that stands for whatever
    // lies below (both keep the unfinished character of state `of`, the stack's state). A local
    // state's language does not depend on what lies below, up to the point where kMark appears in
    // a state (has_mark): the text may go on in the frames below.
    static constexpr uint32_t kMark = 1;
    struct LocalKey {
        std::vector<uint32_t> positions; // program positions, top first
        uint32_t bottom = kMark;         // 0: the stack's true bottom (it fits in `depth` frames)
        uint32_t pending = 0;
        uint8_t pending_len = 0;
        std::string bytes() const; // a map key
    };
    const std::vector<uint32_t>& stacks(StateId s) const { return states_[s].stacks; }
    bool has_mark(StateId s) const { return marks_[s] != 0; }
    // The ASCII bytes on which state `s` steps to itself (computed on first use; none for kDead).
    const std::array<uint64_t, 2>& loop_set(StateId s);
    bool top_is_chars(uint32_t stack) const;
    StateId single_state(uint32_t stack, StateId of);
    LocalKey local_key(uint32_t stack, size_t depth, StateId of) const;
    StateId local_state(const LocalKey& key); // in this matcher (any matcher of the same grammar)

private:
    struct Frame {
        uint32_t pos;    // program index of the element to match (or continue with)
        uint32_t parent; // the frame to return to; 0 = the empty stack, kMark = a local stack's bottom
    };
    struct State {
        std::vector<uint32_t> stacks; // sorted frame ids; 0 = root finished
        uint32_t pending = 0;         // bytes of an unfinished UTF-8 character, first byte lowest
        uint8_t pending_len = 0;      // their count, | kWholeChar when `pending` is canonical
        bool mark = false; // kMark is one of the stacks
        std::vector<std::pair<uint64_t, StateId>> by_takers; // advance(): the stacks taking a character -> next
    };
    struct Entry {
        StateId state;
        uint64_t serial;
    };
    static constexpr StateId kUnknown = 0xFFFFFFFFu;
    // pending_len flag: every stack takes every character the unfinished one can still become, so
    // the state keeps canonical bytes (equal for every such character) rather than the real ones.
    static constexpr uint8_t kWholeChar = 0x80;
    static constexpr uint8_t kLenBits = 0x7F;

    std::shared_ptr<const CompiledGrammar> g_;
    MatcherLimits limits_;
    std::vector<Frame> frames_;
    std::unordered_map<uint64_t, uint32_t> frame_ids_;
    std::vector<State> states_;
    std::vector<StateId> next_; // memoized steps: next_[state * 256 + byte], kUnknown until computed
    std::vector<uint8_t> marks_; // per state: State::mark, packed for the vocabulary walk
    std::vector<std::array<uint64_t, 2>> loops_; // per state: loop_set(), once computed
    std::vector<uint8_t> loop_known_;
    std::unordered_map<std::string, StateId> state_ids_;
    std::vector<Entry> history_;
    uint64_t serial_ = 0;
    StateId initial_ = kDead;
    std::unordered_set<uint64_t> visited_;  // scratch of closure()
    std::vector<std::pair<uint32_t, uint32_t>> work_; // scratch of closure()

    uint32_t frame(uint32_t pos, uint32_t parent);
    void closure(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out);
    StateId intern(std::vector<uint32_t> stacks, uint32_t pending, uint8_t pending_len);
    StateId advance(StateId s, uint32_t cp, bool all = false); // all: every stack takes `cp`
    StateId compute_step(StateId s, uint8_t byte);
    StateId slow_step(StateId s, uint8_t byte); // computes and memoizes a step
    StateId after_partial(StateId s, uint32_t pending, uint8_t len);
    StateId after_whole(StateId s, uint32_t pending, uint8_t len); // s has kWholeChar
    StateId element_step(int32_t id, bool control); // the state after token element `id`, or kDead
};

} // namespace rwd::grammar
