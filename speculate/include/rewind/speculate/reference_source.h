// Reference copy (LLMA): guesses copied from user-supplied documents (not necessarily in the
// prompt) where the current suffix occurs in them. The documents are indexed once.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "rewind/speculate/guess_source.h"
#include "rewind/speculate/token_index.h"

namespace rwd::speculate {

struct ReferenceSourceOptions {
    NgramRange range{2, 8};
    // Upper bound on the tokens of all references together. The index keeps up to
    // (n_max - n_min + 1) entries of 12 bytes per token at a load factor of 1/4..1/2, plus a
    // 4-byte occurrence link per entry, so the default (2^20 tokens, about 4 MB of text) bounds
    // it near 230 MB. Above it: rwd::Error.
    int64_t max_tokens = int64_t{1} << 20;
    // 1: a chain copied from the latest occurrence of the longest match. More: a tree whose
    // branches are the continuations of up to max_occurrences match positions in all the
    // documents, ranked by frequency (see NgramSourceOptions::branches). >= 1.
    int branches = 1;
    int max_occurrences = 64; // >= 1
};

class ContinuationTree;

class ReferenceSource final : public GuessSource {
public:
    // Throws rwd::Error if there is no reference, a reference is empty or contains an invalid
    // (negative) id, branches or max_occurrences < 1 (argument), or all together exceed
    // opts.max_tokens (capacity).
    explicit ReferenceSource(const std::vector<std::vector<TokenId>>& references,
                             ReferenceSourceOptions opts = {});
    ~ReferenceSource() override;
    ReferenceSource(ReferenceSource&&) noexcept;
    // Tokenizes each text without BOS, then as above.
    static ReferenceSource from_texts(const Tokenizer& tok, const std::vector<std::string>& texts,
                                      ReferenceSourceOptions opts = {});

    std::string_view name() const override { return "ref"; }
    void reset(const GenerationStart&) override {} // the references do not change
    // The longest suffix of the context found in a reference (latest occurrence), and the tokens
    // after it up to the end of that reference; with branches > 1 the tree of what followed each
    // of its occurrences.
    void propose(std::span<const TokenId> context, int k, Proposal& out) override;
    void accept(std::span<const TokenId>) override {}

    const TokenIndex& index() const { return index_; }
    int64_t n_references() const { return n_refs_; }

private:
    ReferenceSourceOptions opts_;
    TokenIndex index_;
    int64_t n_refs_ = 0;
    Continuations found_;
    std::unique_ptr<ContinuationTree> tree_; // null while branches == 1
};

// The whole file as text; throws rwd::Error naming the path if it cannot be read (io) or holds
// more than kMaxReferenceFileBytes (capacity; 16 MiB, rewind/file_io.h).
std::string read_text_file(const std::string& path);

} // namespace rwd::speculate
