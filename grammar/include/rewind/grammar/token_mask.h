// Exact token masks: a vocabulary's token bytes sorted (so a walk steps shared prefixes once),
// masks of local stacks shared by a grammar's sequences, and a per-sequence TokenMatcher.
#pragma once
#include <array>
#include <functional>
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

// Tokens sorted by their bytes, so a walk steps each shared prefix once.
struct TokenTrie {
    std::vector<TokenId> ids;    // sorted by bytes
    std::vector<uint16_t> lcp;   // lcp[i]: common prefix length of entries i-1 and i
    // jump[i]: the first entry after i whose lcp is below lcp[i] (or the end): every entry between
    // shares entry i's first lcp[i] bytes, so a walk that found a shorter prefix dead skips them.
    std::vector<uint32_t> jump;
    // The bytes of entry i past lcp[i], as a set of ASCII bytes; all ones (~0) when one is not ASCII.
    std::vector<std::array<uint64_t, 2>> suffix_sets;
    std::string blob;              // entries' bytes in sorted order (a walk reads them in a row)
    std::vector<uint32_t> offsets; // entry i: blob[offsets[i], offsets[i + 1])
    size_t max_length = 0;

    TokenTrie() = default;
    // `ids` (their bytes `bytes_of(id)` not empty), sorted by their bytes.
    TokenTrie(std::vector<TokenId> ids, const std::function<std::string_view(TokenId)>& bytes_of);
    size_t size() const { return ids.size(); }
    std::string_view bytes(size_t i) const {
        return std::string_view(blob).substr(offsets[i], offsets[i + 1] - offsets[i]);
    }
};

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

    // Byte-matched tokens in tries by length: band b holds the tokens longer than band b-1's
    // bound and at most kBandBytes[b] bytes long (the last band: all longer ones). Masks of
    // grammar positions with the same shape for a band's bound share that band's walk, so the
    // short tokens (most of a vocabulary) are walked once for every link of a long repetition.
    static constexpr size_t kBands = 3;
    static constexpr std::array<int, kBands - 1> kBandBytes = {16, 32};
    const TokenTrie& band(size_t b) const { return bands_[b]; }
    // The byte budget whose shapes decide band b's walk: its bound; -1 for the last band (a few
    // hundred tokens, walked per local stack: shapes that deep would cost more than the walk).
    static int band_budget(size_t b) { return b + 1 < kBands ? kBandBytes[b] : -1; }

private:
    static constexpr uint8_t kEog = 1, kControl = 2;
    int64_t n_vocab_ = 0;
    uint64_t hash_ = 0;
    std::vector<uint8_t> flags_;
    std::string blob_;              // every token's bytes, back to back
    std::vector<uint32_t> offsets_; // token t's bytes: blob_[offsets_[t], offsets_[t + 1])
    std::vector<TokenId> eog_;
    std::array<TokenTrie, kBands> bands_;
};

// Scratch space of a vocabulary walk.
struct WalkScratch {
    std::vector<Matcher::StateId> path; // state after each byte of the present token
    std::vector<uint8_t> escaped;       // kMark seen along the path
    std::vector<uint32_t> mask;         // LocalMaskCache's walks: all zero between walks
    std::vector<TokenId> listed;        // the first tokens accepted, up to the mask's words
};

// Walks the tokens of `trie` from state `s` of `m`, setting the bits of the tokens whose bytes
// `s` accepts, and returns how many it set (a trie holds each token once); the first
// `mask.size()` of them are also listed in `scratch.listed` (fewer accepted tokens than the
// mask's words: the list is the whole set). With `uncertain` (s a local state), a token refused
// after a state holding kMark may go on below the local stack: it is listed there instead.
size_t walk_vocabulary(Matcher& m, const TokenTrie& trie, Matcher::StateId s, std::span<uint32_t> mask,
                       std::vector<TokenId>* uncertain, WalkScratch& scratch);

class PositionShapes;

// The masks of local stacks (Matcher::local_key) of one grammar over one vocabulary: the tokens a
// local stack accepts whatever lies below it, and those that may go on below (checked against
// the real stack). Computed once, shared by the TokenMatchers of every sequence using the grammar.
// A local stack's mask has a part per band of token lengths (VocabIndex::band), shared by every
// local stack of the same shape for the band's budget (PositionShapes: the links of a bounded
// repetition share one walk of the short tokens).
// Thread-safe (one lock around lookups and walks). Bounded: past 4096 entries of a band it starts afresh.
class LocalMaskCache {
public:
    struct Entry {
        std::vector<uint32_t> accepted;     // bits, as a mask; empty when accepted_ids holds them
        std::vector<TokenId> accepted_ids;  // the accepted tokens, when fewer than the mask's words
        std::vector<TokenId> uncertain;
    };
    using Parts = std::array<std::shared_ptr<const Entry>, VocabIndex::kBands>;
    LocalMaskCache(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<const VocabIndex> vocab);
    ~LocalMaskCache();

    Parts get(const Matcher::LocalKey& key);
    const CompiledGrammar& grammar() const { return *grammar_; }
    size_t walks(size_t band); // walks of band `band` done so far (by prepare() and get())
    // Computes ahead the masks of the local stacks (kDepth frames) of the automaton states
    // reached from the start, breadth first, by one byte of each kind (bytes that every class
    // takes or refuses alike step alike), up to `max_states` states: the walks a first sequence
    // would meet first, done when the grammar is compiled. Then the short tokens' parts (the
    // costly ones) of the states along one path of up to kProbeSteps bytes that never returns to
    // a state, so that bounded repetitions (a string's `maxLength`) run to their bound: their
    // last links need walks of their own. The path stops once its walks have reached
    // kProbeVocabularies times the vocabulary's tokens (the JSON workload's schemas: 4 to 12).
    void prepare(size_t max_states);
    static constexpr size_t kDepth = 3; // frames a local stack keeps (more: fewer uncertain tokens, less sharing)
    static constexpr size_t kProbeSteps = 4096;
    static constexpr size_t kProbeVocabularies = 32;

private:
    std::mutex mutex_;
    std::shared_ptr<const CompiledGrammar> grammar_;
    std::shared_ptr<const VocabIndex> vocab_;
    std::unique_ptr<Matcher> walker_; // its own automaton; renewed when it grows large
    std::unique_ptr<PositionShapes> shapes_;
    WalkScratch scratch_;
    std::array<size_t, VocabIndex::kBands> walks_{};
    size_t walked_tokens_ = 0; // tokens the walks accepted or left uncertain, all bands
    size_t walked();
    std::array<std::unordered_map<std::string, std::shared_ptr<const Entry>>, VocabIndex::kBands> entries_;
    // get()'s answers by exact key, so that a local stack met again (every new sequence of the
    // grammar meets the same ones) skips its shape keys; bounded, and cleared with entries_.
    std::unordered_map<std::string, Parts> by_key_;

    // The key's shape for `budget` bytes; "" when the shapes nest too deep to compare.
    std::string shape_key(const Matcher::LocalKey& key, int budget);
    std::shared_ptr<const Entry> walk(const Matcher::LocalKey& key, const TokenTrie& trie);
    // Band b's part of the key's mask (the lock held); `exact`: key.bytes().
    const std::shared_ptr<const Entry>& part(const Matcher::LocalKey& key, const std::string& exact, size_t b);
    // The local masks of `s`'s stacks, their first `bands` bands.
    void prepare_state(Matcher& m, Matcher::StateId s, size_t bands);
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
    LocalMaskCache::Parts held_; // the entries in use (the cache may drop them)
    std::vector<std::pair<int32_t, bool>> elements_;                   // scratch: token elements

    void compute_mask(Matcher::StateId s, std::vector<uint32_t>& mask);
    bool bytes_accepted(Matcher::StateId s, std::string_view b);
    void add_local(const LocalMaskCache::Entry& e, uint32_t stack, Matcher::StateId s, std::vector<uint32_t>& mask);
    bool element_allows(TokenId t);
};

// Compiled grammars and vocabulary indexes, shared by the sequences that use them, keyed by the
// grammar text and the vocabulary's hash. Thread-safe. Past `max_grammars` grammars, the oldest
// is dropped (sequences that hold it keep it).
class GrammarCache {
public:
    // `prepare_states`: a new grammar's local masks are computed ahead for that many automaton
    // states (LocalMaskCache::prepare; 0: none, every walk on first use).
    explicit GrammarCache(size_t max_grammars = 64, size_t prepare_states = 256)
        : max_grammars_(max_grammars), prepare_states_(prepare_states) {}

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
    size_t prepare_states_;
    std::unordered_map<uint64_t, std::shared_ptr<const VocabIndex>> vocabs_;
    std::unordered_map<std::string, std::shared_ptr<const CompiledGrammar>> grammars_;
    std::unordered_map<std::string, std::shared_ptr<LocalMaskCache>> local_masks_;
    std::vector<std::string> order_; // grammar keys, oldest first
};

} // namespace rwd::grammar
