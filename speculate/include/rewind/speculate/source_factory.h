// The one place a guess source is built from a description: the CLI, the bench harness, the
// tests and the C API all name a source ("ngram", "ref", "draft", "auto", "suffix") and hand over
// what it needs (documents, a draft model, a shared suffix cache); this builds it and refuses descriptions that would ignore
// what they were given.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "rewind/model.h"
#include "rewind/speculate/composite_source.h"
#include "rewind/speculate/draft_source.h"
#include "rewind/speculate/forced_source.h"
#include "rewind/speculate/guess_source.h"
#include "rewind/speculate/ngram_source.h"
#include "rewind/speculate/reference_source.h"
#include "rewind/speculate/suffix_source.h"

namespace rwd::speculate {

enum class SourceKind {
    Ngram, // prompt lookup over the prompt and the text so far
    Ref,   // reference copy from SourceSpec::references
    Draft, // a draft model (SourceSpec::draft)
    Auto,  // a CompositeSource of ref (when references are given), ngram, and draft (when a draft
           // model is given), in that order of preference, chosen by SourceSpec::compose
    Suffix, // suffix trees over the request's text and a cache of earlier outputs (SourceSpec::suffix_cache)
    Forced, // only the text a constraint forces (ForcedSource); no guesses without a constraint
};

// Every name parse_source_kind() accepts, in this order: "ngram", "ref", "draft", "auto",
// "auto-first" (auto with ComposePolicy::First: the first non-empty proposal wins, as "auto" did
// before; kept so `rewind bench` can compare the two), "suffix", "forced" (under a constraint
// every other source is composed with forced text anyway; this one guesses nothing else).
inline constexpr const char* kSourceNames[] = {"ngram", "ref", "draft", "auto", "auto-first", "suffix", "forced"};

struct SourceSpec {
    SourceKind kind = SourceKind::Ngram;
    // Ref (required, at least one) and Auto (optional): documents to copy from, tokenized with
    // the target's tokenizer without BOS. Refused for Ngram, Draft and Suffix.
    std::vector<std::string> references;
    // Draft (required) and Auto (optional): the draft, with the target's vocabulary, as its model
    // (a DraftSource is built over it) or as a draft source already built and shared, so that one
    // draft context and cache serve many generations (the harness does this; its reset() keeps
    // whatever prefix a new prompt shares). Null: no draft. Refused for Ngram, Ref and Suffix.
    std::variant<std::shared_ptr<const Model>, std::shared_ptr<GuessSource>> draft;
    ComposePolicy compose = ComposePolicy::Longest; // Auto only
    NgramSourceOptions ngram;
    ReferenceSourceOptions ref;
    // Suffix only (refused for the others): the cache of earlier generations that this source
    // reads and adds its own to, shared with other sources (e.g. every request of a server or a
    // benchmark). Null: the source gets a private cache of suffix.cache's size.
    std::shared_ptr<SuffixCache> suffix_cache;
    SuffixSourceOptions suffix;
    DraftSourceOptions draft_options; // its cache_type should match the target cache's
    // Continuations per node of every source (ngram, ref, suffix, draft, and auto's): > 0
    // sets their options' `branches` (1: chains, more: token trees); 0 keeps each one's own
    // (ngram and ref: chains; suffix: a tree). Negative: refused.
    int branches = 0;
};

// `name` is one of kSourceNames; sets spec.kind (and spec.compose for "auto-first"/"auto").
// Throws rwd::Error (ErrorCode::argument) naming the choices otherwise.
void parse_source_kind(std::string_view name, SourceSpec& spec);
// The name of (kind, compose): "auto-first" for Auto with ComposePolicy::First.
const char* source_kind_name(SourceKind kind, ComposePolicy compose = ComposePolicy::Longest);

// Builds the source `spec` describes for `target`, whose KV cache holds `target_capacity`
// positions (a draft model must reach all of them). Throws rwd::Error, building nothing:
// ErrorCode::argument when the spec lacks what its kind needs (no references for Ref, no draft
// for Draft), carries what its kind would ignore (references for Ngram/Draft/Suffix/Forced, a
// draft for Ngram/Ref/Suffix/Forced, a suffix cache for any kind but Suffix), or has an empty, invalid or too large
// reference set or invalid options; ErrorCode::state when the draft's vocabulary is not the
// target's, ErrorCode::capacity when its context is shorter than target_capacity (see
// DraftSource).
std::unique_ptr<GuessSource> make_guess_source(const SourceSpec& spec, const Model& target, int64_t target_capacity);

} // namespace rwd::speculate
