// Exact token masks: a vocabulary's token bytes sorted (so a walk steps shared prefixes once),
// masks of local stacks shared by a grammar's sequences, and a per-sequence TokenMatcher.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rewind/grammar/matcher.h"
#include "rewind/tokenizer.h"

namespace rwd::grammar {

// What a mask needs of a vocabulary, built once (about 0.1 s for 128k tokens) and shared.
// Token bytes are the tokenizer's pieces as text (byte-level BPE decoded from the GPT-2 byte
// mapping; SentencePiece's U+2581 as a space and <0xNN> byte tokens as their byte).
// Kinds: end-of-generation tokens (allowed only where the text is complete); control tokens
// (control, unknown or unused kind, or llama.cpp's control by text: only where the grammar names
// them); empty pieces (never); every other token is matched by its bytes.
class VocabIndex {
public:
    // The hash `hash()` gives, without building the index (a pass over the pieces).
    static uint64_t hash_of(const Tokenizer& tok);

    explicit VocabIndex(const Tokenizer& tok);

    int64_t n_vocab() const { return n_vocab_; }
    uint64_t hash() const { return hash_; } // of the pieces and their kinds
    bool is_eog(TokenId t) const { return flags_[static_cast<size_t>(t)] & kEog; }
    bool is_control(TokenId t) const { return flags_[static_cast<size_t>(t)] & kControl; }
    std::string_view bytes(TokenId t) const; // "" for tokens matched by name only
    const std::vector<TokenId>& eog_ids() const { return eog_; }

    // Byte-matched tokens sorted by their bytes; lcp[i] = common prefix length of entries i-1 and i;
    // sorted_bytes(i): entry i's bytes, stored in sorted order (the mask walk reads them in a row).
    const std::vector<TokenId>& sorted() const { return sorted_; }
    const std::vector<uint16_t>& lcp() const { return lcp_; }
    // The first entry after i whose lcp is below lcp[i] (or the end): every entry between shares
    // entry i's first lcp[i] bytes, so a walk that found a shorter prefix dead skips them at once.
    const std::vector<uint32_t>& jump() const { return jump_; }
    // The bytes of entry i past lcp[i], as a set of ASCII bytes; all ones (~0) when one is not ASCII.
    const std::array<uint64_t, 2>& suffix_set(size_t i) const { return suffix_sets_[i]; }
    std::string_view sorted_bytes(size_t i) const {
        return std::string_view(sorted_blob_).substr(sorted_offsets_[i], sorted_offsets_[i + 1] - sorted_offsets_[i]);
    }
    size_t max_length() const { return max_length_; }

private:
    static constexpr uint8_t kEog = 1, kControl = 2;
    int64_t n_vocab_ = 0;
    uint64_t hash_ = 0;
    std::vector<uint8_t> flags_;
    std::string blob_;              // every token's bytes, back to back
    std::vector<uint32_t> offsets_; // token t's bytes: blob_[offsets_[t], offsets_[t + 1])
    std::vector<TokenId> eog_, sorted_;
    std::vector<uint16_t> lcp_;
    std::vector<uint32_t> jump_;
    std::vector<std::array<uint64_t, 2>> suffix_sets_;
    std::string sorted_blob_;
    std::vector<uint32_t> sorted_offsets_;
    size_t max_length_ = 0;
};

// Scratch space of a vocabulary walk.
struct WalkScratch {
    std::vector<Matcher::StateId> path; // state after each byte of the present token
    std::vector<uint8_t> escaped;       // kMark seen along the path
};

// Walks the sorted vocabulary from state `s` of `m`, setting the bits of the tokens whose bytes
// `s` accepts. With `uncertain` (s a local state), a token refused after a state holding kMark
// may go on below the local stack: it is listed there instead.
void walk_vocabulary(Matcher& m, const VocabIndex& vocab, Matcher::StateId s, std::span<uint32_t> mask,
                     std::vector<TokenId>* uncertain, WalkScratch& scratch);

// The masks of local stacks (Matcher::local_key) of one grammar over one vocabulary: the tokens a
// local stack accepts whatever lies below it, and those that may go on below (checked against
// the real stack). Computed once, shared by the TokenMatchers of every sequence using the grammar.
// Thread-safe (one lock around lookups and walks). Bounded: past 4096 entries it starts afresh.
class LocalMaskCache {
public:
    struct Entry {
        std::vector<uint32_t> accepted; // bits, as a mask
        std::vector<TokenId> uncertain;
    };
    LocalMaskCache(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<const VocabIndex> vocab);

    std::shared_ptr<const Entry> get(const Matcher::LocalKey& key);
    const CompiledGrammar& grammar() const { return *grammar_; }

private:
    std::mutex mutex_;
    std::shared_ptr<const CompiledGrammar> grammar_;
    std::shared_ptr<const VocabIndex> vocab_;
    std::unique_ptr<Matcher> walker_; // its own automaton; renewed when it grows large
    WalkScratch scratch_;
    std::unordered_map<std::string, std::shared_ptr<const Entry>> entries_;
};

// One sequence's grammar state over a vocabulary: masks, accept, undo. Masks are cached per
// automaton state, so the usual cost of a mask is a copy; a state seen first ORs its stacks'
// local masks (a local stack seen first walks the sorted vocabulary once) and checks their few
// uncertain tokens on the real stacks. Memory: at most 256 cached masks (4 MiB for 128k tokens)
// plus the matcher's automaton (MatcherLimits). Not thread-safe: one thread at a time.
class TokenMatcher {
public:
    // `grammar` must have been compiled against the tokenizer `vocab` was built from (token names).
    // `shared`: local masks shared with other sequences of the same grammar and vocabulary
    // (GrammarCache::local_masks); null: this matcher's own.
    TokenMatcher(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<const VocabIndex> vocab,
                 const MatcherLimits& limits = {}, std::shared_ptr<LocalMaskCache> shared = nullptr);

    // Bits of the allowed tokens: token t is bit t % 32 of mask[t / 32]; `mask` has
    // (n_vocab + 31) / 32 words, all written. Throws rwd::Error (shape) for another size.
    void fill_mask(std::span<uint32_t> mask);
    bool allows(TokenId t);  // fill_mask's rule for one token; false for an id outside the vocabulary
    bool accept(TokenId t);  // false, state unchanged, when not allowed; an EOG token leaves the state as is

    Matcher& matcher() { return matcher_; }
    const Matcher& matcher() const { return matcher_; }
    const VocabIndex& vocab() const { return *vocab_; }

private:
    Matcher matcher_;
    std::shared_ptr<const VocabIndex> vocab_;
    std::unordered_map<Matcher::StateId, std::vector<uint32_t>> masks_; // per automaton state
    std::shared_ptr<LocalMaskCache> local_masks_;
    std::shared_ptr<const LocalMaskCache::Entry> held_; // the entry in use (the cache may drop it)
    static constexpr size_t kLocalDepth = 4; // frames a local stack keeps (more: fewer uncertain tokens, less sharing)
    std::vector<std::pair<int32_t, bool>> elements_;                   // scratch: token elements

    void compute_mask(Matcher::StateId s, std::vector<uint32_t>& mask);
    bool bytes_accepted(Matcher::StateId s, std::string_view b);
    bool element_allows(TokenId t);
};

// Compiled grammars and vocabulary indexes, shared by the sequences that use them, keyed by the
// grammar text and the vocabulary's hash. Thread-safe. Past `max_grammars` grammars, the oldest
// is dropped (sequences that hold it keep it).
class GrammarCache {
public:
    explicit GrammarCache(size_t max_grammars = 64) : max_grammars_(max_grammars) {}

    // What a sequence under a grammar needs: the grammar parsed (parse_gbnf's errors) and compiled
    // against `tok`'s vocabulary (token names), the vocabulary index, and the local masks that
    // the grammar's sequences share. Each call hashes the vocabulary once (about a millisecond
    // for 128k tokens); the rest is built on first use.
    struct Compiled {
        std::shared_ptr<const CompiledGrammar> grammar;
        std::shared_ptr<const VocabIndex> vocab;
        std::shared_ptr<LocalMaskCache> local_masks;
    };
    Compiled get(std::string_view gbnf, const Tokenizer& tok);
    // Parts of get().
    std::shared_ptr<const VocabIndex> vocab(const Tokenizer& tok);
    std::shared_ptr<const CompiledGrammar> grammar(std::string_view gbnf, const Tokenizer& tok);
    std::shared_ptr<LocalMaskCache> local_masks(std::string_view gbnf, const Tokenizer& tok);

private:
    std::shared_ptr<const VocabIndex> vocab_for(const Tokenizer& tok, uint64_t h);
    std::shared_ptr<const CompiledGrammar> grammar_for(std::string_view gbnf, const Tokenizer& tok, const std::string& key);

    std::mutex mutex_;
    size_t max_grammars_;
    std::unordered_map<uint64_t, std::shared_ptr<const VocabIndex>> vocabs_;
    std::unordered_map<std::string, std::shared_ptr<const CompiledGrammar>> grammars_;
    std::unordered_map<std::string, std::shared_ptr<LocalMaskCache>> local_masks_;
    std::vector<std::string> order_; // grammar keys, oldest first
};

} // namespace rwd::grammar
