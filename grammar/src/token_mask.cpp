// Token masks: the vocabulary sorted by bytes and walked depth-first along the matcher's memoized
// byte steps (a dead prefix skips every token that shares it), cached per automaton state.
#include "rewind/grammar/token_mask.h"

#include <algorithm>
#include <map>
#include <unordered_set>

#include "position_shapes.h"
#include "rewind/error.h"

namespace rwd::grammar {

uint64_t VocabIndex::hash_of(const Tokenizer& tok) {
    uint64_t h = 1469598103934665603ull; // FNV-1a over each piece, its kind and its flags
    auto mix = [&h](uint64_t v) {
        h ^= v;
        h *= 1099511628211ull;
    };
    for (TokenId t = 0; t < tok.n_vocab(); ++t) {
        for (char c : tok.piece(t)) mix(static_cast<uint8_t>(c));
        mix(0x100 + static_cast<uint64_t>(tok.kind(t)) * 4 + (tok.is_eog(t) ? 2 : 0) + (tok.is_control(t) ? 1 : 0));
    }
    mix(static_cast<uint64_t>(tok.model() == TokenizerModel::Spm));
    return h;
}

VocabIndex::VocabIndex(const Tokenizer& tok) : n_vocab_(tok.n_vocab()), hash_(hash_of(tok)) {
    const auto n = static_cast<size_t>(n_vocab_);
    flags_.assign(n, 0);
    offsets_.assign(n + 1, 0);
    for (TokenId t = 0; t < n_vocab_; ++t) {
        const TokenKind kind = tok.kind(t);
        const bool eog = tok.is_eog(t);
        const bool control = tok.is_control(t) || kind == TokenKind::Control || kind == TokenKind::Unknown ||
                             kind == TokenKind::Unused;
        flags_[static_cast<size_t>(t)] = static_cast<uint8_t>((eog ? kEog : 0) | (control ? kControl : 0));
        offsets_[static_cast<size_t>(t)] = static_cast<uint32_t>(blob_.size());
        if (!eog && !control) blob_ += tok.token_to_piece(t, false);
        if (eog) eog_.push_back(t);
    }
    offsets_[n] = static_cast<uint32_t>(blob_.size());
    std::array<std::vector<TokenId>, kBands> ids;
    for (TokenId t = 0; t < n_vocab_; ++t) {
        const size_t len = bytes(t).size();
        if (len == 0) continue;
        size_t b = 0;
        while (b + 1 < kBands && len > static_cast<size_t>(kBandBytes[b])) ++b;
        ids[b].push_back(t);
    }
    const auto bytes_of = [this](TokenId t) { return bytes(t); };
    for (size_t b = 0; b < kBands; ++b) bands_[b] = TokenTrie(std::move(ids[b]), bytes_of);
}

TokenTrie::TokenTrie(std::vector<TokenId> sorted_ids, const std::function<std::string_view(TokenId)>& bytes_of)
    : ids(std::move(sorted_ids)) {
    std::sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) { return bytes_of(a) < bytes_of(b); });
    for (TokenId t : ids) {
        offsets.push_back(static_cast<uint32_t>(blob.size()));
        blob += bytes_of(t);
    }
    offsets.push_back(static_cast<uint32_t>(blob.size()));
    lcp.assign(ids.size(), 0);
    for (size_t i = 0; i < ids.size(); ++i) {
        const std::string_view cur = bytes(i);
        max_length = std::max(max_length, cur.size());
        if (i == 0) continue;
        const std::string_view prev = bytes(i - 1);
        size_t k = 0;
        while (k < cur.size() && k < prev.size() && k < 0xFFFF && cur[k] == prev[k]) ++k;
        lcp[i] = static_cast<uint16_t>(k);
    }
    suffix_sets.assign(ids.size(), {0, 0});
    for (size_t i = 0; i < ids.size(); ++i) {
        const std::string_view b = bytes(i);
        for (size_t k = lcp[i]; k < b.size(); ++k) {
            const auto c = static_cast<uint8_t>(b[k]);
            if (c >= 0x80) {
                suffix_sets[i] = {~uint64_t{0}, ~uint64_t{0}};
                break;
            }
            suffix_sets[i][c / 64] |= uint64_t{1} << (c % 64);
        }
    }
    jump.assign(ids.size(), static_cast<uint32_t>(ids.size()));
    std::vector<uint32_t> open; // entries still waiting for a smaller lcp after them
    for (size_t i = 0; i < ids.size(); ++i) {
        while (!open.empty() && lcp[open.back()] > lcp[i]) {
            jump[open.back()] = static_cast<uint32_t>(i);
            open.pop_back();
        }
        open.push_back(static_cast<uint32_t>(i));
    }
}

std::string_view VocabIndex::bytes(TokenId t) const {
    const auto i = static_cast<size_t>(t);
    return std::string_view(blob_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
}

size_t walk_vocabulary(Matcher& m, const TokenTrie& trie, Matcher::StateId s, std::span<uint32_t> mask,
                       std::vector<TokenId>* uncertain, WalkScratch& scratch) {
    // Tokens in byte order; path[d] is the state after the first d bytes of the present token,
    // kept for the next token as far as they share a prefix.
    const auto& sorted = trie.ids;
    const auto& lcp = trie.lcp;
    const auto& jump = trie.jump;
    auto& path = scratch.path;
    auto& escaped = scratch.escaped;
    path.assign(trie.max_length + 1, Matcher::kDead);
    escaped.assign(trie.max_length + 1, 0);
    path[0] = s;
    scratch.listed.clear();
    size_t valid = 0, accepted = 0;
    for (size_t i = 0; i < sorted.size();) {
        const std::string_view b = trie.bytes(i);
        size_t d = std::min<size_t>(lcp[i], valid);
        if (d == lcp[i] && d < b.size()) {
            // A state that steps to itself on every byte left (a string's characters, say):
            // the token is accepted and the path stays there, without a step per byte.
            const auto& loop = m.loop_set(path[d]);
            const auto& suffix = trie.suffix_sets[i];
            if ((suffix[0] & ~loop[0]) == 0 && (suffix[1] & ~loop[1]) == 0) {
                const auto esc = static_cast<uint8_t>(escaped[d] | (uncertain && m.has_mark(path[d])));
                for (size_t k = d + 1; k <= b.size(); ++k) {
                    path[k] = path[d];
                    escaped[k] = esc;
                }
                d = b.size();
            }
        }
        while (d < b.size()) {
            const Matcher::StateId next = m.step(path[d], static_cast<uint8_t>(b[d]));
            if (next == Matcher::kDead) break;
            path[d + 1] = next;
            escaped[d + 1] = static_cast<uint8_t>(escaped[d] | (uncertain && m.has_mark(next)));
            ++d;
        }
        valid = d;
        const size_t first = i++;
        if (d == b.size()) {
            mask[static_cast<size_t>(sorted[first]) / 32] |= 1u << (static_cast<uint32_t>(sorted[first]) % 32);
            if (accepted++ < mask.size()) scratch.listed.push_back(sorted[first]);
        } else if (escaped[d]) { // every token sharing the dead prefix may go on below
            uncertain->push_back(sorted[first]);
            for (; i < sorted.size() && lcp[i] > d; ++i) uncertain->push_back(sorted[i]);
        } else {
            while (i < sorted.size() && lcp[i] > d) i = jump[i]; // they share the dead prefix b[0..d]
        }
    }
    return accepted;
}

LocalMaskCache::LocalMaskCache(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<const VocabIndex> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), walker_(std::make_unique<Matcher>(grammar_)),
      shapes_(std::make_unique<PositionShapes>(*grammar_)) {}

LocalMaskCache::~LocalMaskCache() = default;

// The local stack's shape: each frame's shape for `budget` bytes, the bottom and the unfinished
// character.
std::string LocalMaskCache::shape_key(const Matcher::LocalKey& key, int budget) {
    Matcher::LocalKey shaped = key;
    for (uint32_t& pos : shaped.positions) {
        const std::optional<uint32_t> id = shapes_->of(pos, budget);
        if (!id) return "";
        pos = *id;
    }
    return shaped.bytes();
}

std::shared_ptr<const LocalMaskCache::Entry> LocalMaskCache::walk(const Matcher::LocalKey& key, const TokenTrie& trie) {
    if (walker_->state_count() > (size_t{1} << 16)) walker_ = std::make_unique<Matcher>(grammar_); // its caches only
    auto e = std::make_shared<Entry>();
    // Into the scratch mask (all zero between walks), so that a walk accepting few tokens (most
    // of them) neither allocates nor clears a whole mask.
    auto& bits = scratch_.mask;
    bits.resize(static_cast<size_t>((vocab_->n_vocab() + 31) / 32), 0);
    size_t count = 0;
    try {
        count = walk_vocabulary(*walker_, trie, walker_->local_state(key), bits, &e->uncertain, scratch_);
    } catch (...) {
        std::fill(bits.begin(), bits.end(), 0);
        throw;
    }
    walked_tokens_ += count + e->uncertain.size();
    if (count >= bits.size()) {
        e->accepted = bits;
        std::fill(bits.begin(), bits.end(), 0);
        return e;
    }
    e->accepted_ids = scratch_.listed; // sparse: a list is cheaper to merge than the whole mask
    for (TokenId t : e->accepted_ids) bits[static_cast<size_t>(t) / 32] = 0;
    return e;
}

size_t LocalMaskCache::walked() {
    std::lock_guard<std::mutex> lock(mutex_);
    return walked_tokens_;
}

size_t LocalMaskCache::walks(size_t band) {
    std::lock_guard<std::mutex> lock(mutex_);
    return band < walks_.size() ? walks_[band] : 0;
}

LocalMaskCache::Parts LocalMaskCache::get(const Matcher::LocalKey& key) {
    const std::string exact = key.bytes();
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = by_key_.find(exact); it != by_key_.end()) return it->second;
    Parts parts;
    for (size_t b = 0; b < VocabIndex::kBands; ++b) parts[b] = part(key, exact, b);
    if (by_key_.size() >= 4096) by_key_.clear();
    by_key_.emplace(exact, parts);
    return parts;
}

const std::shared_ptr<const LocalMaskCache::Entry>& LocalMaskCache::part(const Matcher::LocalKey& key,
                                                                         const std::string& exact, size_t b) {
    const int budget = VocabIndex::band_budget(b);
    std::string k = budget >= 0 ? shape_key(key, budget) : "";
    if (k.empty()) k = "exact:" + exact; // apart from every shape key (the lengths differ)
    auto it = entries_[b].find(k);
    if (it == entries_[b].end()) {
        if (entries_[b].size() >= 4096) { // bounded: 4096 masks of 16 KiB for 128k tokens
            entries_[b].clear();
            by_key_.clear(); // nor may it keep dropped entries alive
        }
        it = entries_[b].emplace(std::move(k), walk(key, vocab_->band(b))).first;
        ++walks_[b];
    }
    return it->second;
}

// Byte kinds: ASCII bytes grouped by the classes that take them (bytes of one kind step alike),
// one byte each; first the kinds whose largest class is largest (a string's characters before
// the quote that closes it), then those more classes take.
static std::vector<uint8_t> byte_kinds(const CompiledGrammar& g) {
    const auto& classes = g.grammar().classes;
    std::vector<uint64_t> sizes; // code points in each class
    for (const CharClass& c : classes) {
        uint64_t n = 0;
        for (const auto& [lo, hi] : c.ranges) n += uint64_t{hi} - lo + 1;
        sizes.push_back(n);
    }
    struct Kind {
        uint64_t largest = 0;
        size_t count = 0;
        uint8_t byte = 0;
    };
    std::map<std::vector<bool>, Kind> kinds;
    for (uint32_t b = 0; b < 0x80; ++b) {
        std::vector<bool> takes;
        Kind k{0, 0, static_cast<uint8_t>(b)};
        for (size_t c = 0; c < classes.size(); ++c) {
            takes.push_back(classes[c].contains(b));
            if (takes.back()) {
                k.largest = std::max(k.largest, sizes[c]);
                ++k.count;
            }
        }
        kinds.emplace(std::move(takes), k);
    }
    std::vector<Kind> ranked;
    for (const auto& entry : kinds) ranked.push_back(entry.second);
    std::stable_sort(ranked.begin(), ranked.end(), [](const Kind& a, const Kind& b) {
        return a.largest != b.largest ? a.largest > b.largest : a.count > b.count;
    });
    std::vector<uint8_t> out;
    for (const Kind& k : ranked) out.push_back(k.byte);
    return out;
}

void LocalMaskCache::prepare_state(Matcher& m, Matcher::StateId s, size_t bands) {
    const std::vector<uint32_t> stacks = m.stacks(s); // a copy: steps add states
    for (uint32_t stack : stacks) {
        if (!m.top_is_chars(stack)) continue;
        const Matcher::LocalKey key = m.local_key(stack, kDepth, s);
        const std::string exact = key.bytes();
        std::lock_guard<std::mutex> lock(mutex_);
        for (size_t b = 0; b < bands; ++b) part(key, exact, b);
    }
}

void LocalMaskCache::prepare(size_t max_states) {
    Matcher m(grammar_);
    const std::vector<uint8_t> kinds = byte_kinds(*grammar_);
    // Breadth first from the start: the states a sequence meets first.
    std::vector<Matcher::StateId> queue{m.state()};
    std::unordered_set<Matcher::StateId> seen{m.state()};
    for (size_t i = 0; i < queue.size() && i < max_states; ++i) {
        prepare_state(m, queue[i], VocabIndex::kBands);
        for (uint8_t byte : kinds) {
            const Matcher::StateId t = m.step(queue[i], byte);
            if (t != Matcher::kDead && seen.insert(t).second) queue.push_back(t);
        }
    }
    // Then one long path: at each state the first kind that reaches a state not met before, so
    // that bounded repetitions run to their bound (their last links have shapes of their own,
    // each a walk of most of the vocabulary, too deep for the breadth-first states). Its walks
    // are bounded by the tokens they reach, so that no grammar makes compile run long.
    std::unordered_set<Matcher::StateId> on_path{m.state()};
    Matcher::StateId s = m.state();
    const size_t budget = walked() + kProbeVocabularies * static_cast<size_t>(vocab_->n_vocab());
    for (size_t step = 0; step < kProbeSteps && walked() < budget; ++step) {
        Matcher::StateId next = Matcher::kDead;
        for (uint8_t byte : kinds) {
            const Matcher::StateId t = m.step(s, byte);
            if (t != Matcher::kDead && on_path.insert(t).second) {
                next = t;
                break;
            }
        }
        if (next == Matcher::kDead) break;
        s = next;
        prepare_state(m, s, 1);
    }
}

TokenMatcher::TokenMatcher(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<const VocabIndex> vocab,
                           const MatcherLimits& limits, std::shared_ptr<LocalMaskCache> shared)
    : matcher_(grammar, limits), vocab_(std::move(vocab)), local_masks_(std::move(shared)) {
    if (!local_masks_) local_masks_ = std::make_shared<LocalMaskCache>(std::move(grammar), vocab_);
    else if (&local_masks_->grammar() != &matcher_.grammar())
        throw Error(ErrorCode::argument, "TokenMatcher: the local mask cache belongs to another grammar");
}

bool TokenMatcher::bytes_accepted(Matcher::StateId s, std::string_view b) {
    for (size_t i = 0; i < b.size() && s != Matcher::kDead; ++i) s = matcher_.step(s, static_cast<uint8_t>(b[i]));
    return s != Matcher::kDead;
}

// A local mask's part into `mask`: its accepted tokens, and those of its uncertain tokens that
// stack `stack` of state `s` (alone) accepts.
void TokenMatcher::add_local(const LocalMaskCache::Entry& e, uint32_t stack, Matcher::StateId s, std::vector<uint32_t>& mask) {
    if (!e.accepted.empty())
        for (size_t w = 0; w < mask.size(); ++w) mask[w] |= e.accepted[w];
    for (TokenId t : e.accepted_ids) mask[static_cast<size_t>(t) / 32] |= 1u << (t % 32);
    if (e.uncertain.empty()) return;
    const Matcher::StateId alone = matcher_.single_state(stack, s);
    for (TokenId t : e.uncertain) {
        uint32_t& word = mask[static_cast<size_t>(t) / 32];
        if (!((word >> (t % 32)) & 1u) && bytes_accepted(alone, vocab_->bytes(t))) word |= 1u << (t % 32);
    }
}

// A state's mask is the union of its stacks' masks (a set of stacks accepts what any of them
// accepts). Each stack's comes from its local stack, shared by every stack with the same top
// frames whatever lies below (and by other sequences); only the local stack's uncertain tokens
// are walked on the real stack. Inside an unfinished character, the local stack keeps its bytes.
void TokenMatcher::compute_mask(Matcher::StateId s, std::vector<uint32_t>& mask) {
    mask.assign(static_cast<size_t>((vocab_->n_vocab() + 31) / 32), 0);
    auto set = [&mask](TokenId t) { mask[static_cast<size_t>(t) / 32] |= 1u << (static_cast<uint32_t>(t) % 32); };
    const std::vector<uint32_t> stacks = matcher_.stacks(s); // a copy: states are added below
    for (uint32_t stack : stacks) {
        if (!matcher_.top_is_chars(stack)) continue;
        held_ = local_masks_->get(matcher_.local_key(stack, LocalMaskCache::kDepth, s));
        for (const auto& part : held_) add_local(*part, stack, s, mask);
    }
    held_ = {};
    if (matcher_.complete(s))
        for (TokenId t : vocab_->eog_ids()) set(t);
    elements_.clear();
    matcher_.token_elements(s, elements_);
    for (const auto& [id, negated] : elements_) {
        if (!negated) {
            if (id >= 0 && id < vocab_->n_vocab()) set(id);
            continue;
        }
        for (TokenId t = 0; t < vocab_->n_vocab(); ++t)
            if (t != id && !vocab_->is_control(t) && !vocab_->is_eog(t)) set(t);
    }
}

void TokenMatcher::fill_mask(std::span<uint32_t> mask) {
    const auto words = static_cast<size_t>((vocab_->n_vocab() + 31) / 32);
    if (mask.size() != words)
        throw Error(ErrorCode::shape, "token mask of " + std::to_string(mask.size()) + " words; the vocabulary of " +
                                          std::to_string(vocab_->n_vocab()) + " tokens needs " + std::to_string(words));
    const Matcher::StateId s = matcher_.state();
    auto it = masks_.find(s);
    if (it == masks_.end()) {
        if (masks_.size() >= 256) masks_.clear(); // bounded memory: 256 masks of 16 KiB for 128k tokens
        std::vector<uint32_t> m;
        compute_mask(s, m);
        it = masks_.emplace(s, std::move(m)).first;
    }
    std::copy(it->second.begin(), it->second.end(), mask.begin());
}

bool TokenMatcher::element_allows(TokenId t) {
    elements_.clear();
    matcher_.token_elements(matcher_.state(), elements_);
    const bool plain = !vocab_->is_control(t) && !vocab_->is_eog(t);
    return std::any_of(elements_.begin(), elements_.end(), [&](const std::pair<int32_t, bool>& e) {
        return e.second ? (plain && e.first != t) : e.first == t;
    });
}

bool TokenMatcher::allows(TokenId t) {
    if (t < 0 || t >= vocab_->n_vocab()) return false;
    if (element_allows(t)) return true;
    if (vocab_->is_eog(t)) return matcher_.is_complete();
    const std::string_view b = vocab_->bytes(t);
    if (b.empty()) return false;
    return bytes_accepted(matcher_.state(), b);
}

bool TokenMatcher::accept(TokenId t) {
    if (!allows(t)) return false;
    const bool named = element_allows(t);
    if (vocab_->is_eog(t) && !named) {
        matcher_.push_state(matcher_.state()); // the end: nothing more to match
        return true;
    }
    return matcher_.accept_token(t, vocab_->is_control(t) || vocab_->is_eog(t), vocab_->bytes(t));
}

std::shared_ptr<const VocabIndex> GrammarCache::vocab_for(const Tokenizer& tok, uint64_t h) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = vocabs_[h];
    if (!slot) slot = std::make_shared<const VocabIndex>(tok);
    return slot;
}

std::shared_ptr<const CompiledGrammar> GrammarCache::grammar_for(std::string_view gbnf, const Tokenizer& tok, const std::string& key) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (auto it = grammars_.find(key); it != grammars_.end()) return it->second;
    }
    auto compiled = std::make_shared<const CompiledGrammar>(parse_gbnf(gbnf), &tok); // outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    if (grammars_.emplace(key, compiled).second) {
        order_.push_back(key);
        if (order_.size() > max_grammars_) {
            grammars_.erase(order_.front());
            local_masks_.erase(order_.front());
            order_.erase(order_.begin());
        }
    }
    auto it = grammars_.find(key);
    return it != grammars_.end() ? it->second : compiled;
}

std::shared_ptr<const VocabIndex> GrammarCache::vocab(const Tokenizer& tok) { return vocab_for(tok, VocabIndex::hash_of(tok)); }

std::shared_ptr<const CompiledGrammar> GrammarCache::grammar(std::string_view gbnf, const Tokenizer& tok) {
    return get(gbnf, tok).grammar;
}

std::shared_ptr<LocalMaskCache> GrammarCache::local_masks(std::string_view gbnf, const Tokenizer& tok) {
    return get(gbnf, tok).local_masks;
}

GrammarCache::Compiled GrammarCache::get(std::string_view gbnf, const Tokenizer& tok) {
    const uint64_t h = VocabIndex::hash_of(tok); // once: a pass over every piece
    const std::string key = std::to_string(h) + "\n" + std::string(gbnf);
    Compiled c;
    c.vocab = vocab_for(tok, h);
    c.grammar = grammar_for(gbnf, tok, key);
    std::unique_lock<std::mutex> lock(mutex_);
    auto& slot = local_masks_[key];
    const bool fresh = !slot || &slot->grammar() != c.grammar.get();
    if (fresh) slot = std::make_shared<LocalMaskCache>(c.grammar, c.vocab);
    c.local_masks = slot;
    if (!grammars_.count(key)) local_masks_.erase(key); // its grammar was dropped meanwhile
    lock.unlock();
    if (fresh && prepare_states_ > 0) {
        try {
            c.local_masks->prepare(prepare_states_); // outside the lock: it walks
        } catch (const Error&) {
            // a grammar past the matcher's limits: masks then meet the error when used, as before
        }
    }
    return c;
}

} // namespace rwd::grammar
