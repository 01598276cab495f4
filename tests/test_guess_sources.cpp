// Guess sources on synthetic token sequences (prompt lookup, reference copy, composite fallback)
// and the draft model's compatibility checks and rollback on the real pycode pair.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/model.h"
#include "rewind/speculate/composite_source.h"
#include "rewind/speculate/draft_source.h"
#include "rewind/speculate/ngram_source.h"
#include "rewind/speculate/reference_source.h"
#include "rewind/speculate/source_factory.h"
#include "rewind/speculate/suffix_source.h"

using rwd::TokenId;
using namespace rwd::speculate;

namespace {

const std::string kModels = std::string(REWIND_SHARED_DIR) + "/models/";

std::vector<TokenId> propose(GuessSource& s, const std::vector<TokenId>& ctx, int k) {
    Proposal p;
    s.propose(ctx, k, p);
    return p.tokens;
}

GenerationStart start_of(const std::vector<TokenId>& prompt) {
    GenerationStart g;
    g.prompt = prompt;
    return g;
}

// A source that always proposes the same tokens, counting calls.
class Fixed final : public GuessSource {
public:
    explicit Fixed(std::vector<TokenId> t) : t_(std::move(t)) {}
    std::string_view name() const override { return "fixed"; }
    void reset(const GenerationStart&) override { ++resets; }
    void propose(std::span<const TokenId>, int k, Proposal& out) override {
        ++proposals;
        for (int i = 0; i < k && i < static_cast<int>(t_.size()); ++i) out.tokens.push_back(t_[static_cast<size_t>(i)]);
    }
    void accept(std::span<const TokenId> ctx) override { last_accept = ctx.size(); }
    int resets = 0, proposals = 0;
    size_t last_accept = 0;

private:
    std::vector<TokenId> t_;
};

} // namespace

TEST(NgramSource, CopiesFromThePromptAndFollowsAcceptedTokens) {
    NgramSource src(NgramSourceOptions{{2, 4}});
    std::vector<TokenId> ctx{10, 11, 12, 13, 14, 20, 21, 11, 12};
    src.reset(start_of(ctx));
    EXPECT_EQ(propose(src, ctx, 3), (std::vector<TokenId>{13, 14, 20}));
    EXPECT_EQ(propose(src, ctx, 1), (std::vector<TokenId>{13}));
    // The generation went elsewhere: 11 12 30 31; now "30 31" is new and unknown...
    ctx.insert(ctx.end(), {30, 31});
    src.accept(ctx);
    EXPECT_TRUE(propose(src, ctx, 4).empty());
    // ...until it has been seen once with a follower.
    ctx.insert(ctx.end(), {32, 30, 31});
    src.accept(ctx);
    EXPECT_EQ(propose(src, ctx, 2), (std::vector<TokenId>{32, 30}));
    EXPECT_EQ(src.index().size(), static_cast<int64_t>(ctx.size()));
}

TEST(NgramSource, ProposeAloneKeepsTheIndexInStep) {
    // accept() is optional: propose() indexes whatever is new in the context.
    NgramSource src;
    std::vector<TokenId> ctx{1, 2, 3};
    src.reset(start_of(ctx));
    ctx.insert(ctx.end(), {4, 1, 2});
    EXPECT_EQ(propose(src, ctx, 2), (std::vector<TokenId>{3, 4}));
    // A context that rewrote history rebuilds the index instead of using stale positions.
    std::vector<TokenId> other{7, 8, 9, 7, 8};
    EXPECT_EQ(propose(src, other, 2), (std::vector<TokenId>{9, 7}));
    EXPECT_EQ(src.index().size(), 5);
}

TEST(NgramSource, ExtendsALoopPastTheEndOfTheText) {
    NgramSource src;
    const std::vector<TokenId> ctx{5, 1, 2, 1, 2, 1, 2};
    src.reset(start_of(ctx));
    EXPECT_EQ(propose(src, ctx, 6), (std::vector<TokenId>{1, 2, 1, 2, 1, 2}));
}

TEST(NgramSource, ResetForgetsThePreviousGeneration) {
    NgramSource src;
    std::vector<TokenId> a{1, 2, 3, 4};
    src.reset(start_of(a));
    std::vector<TokenId> b{9, 1, 2};
    src.reset(start_of(b));
    EXPECT_TRUE(propose(src, b, 4).empty());
}

TEST(NgramSource, RejectsBadK) {
    NgramSource src;
    std::vector<TokenId> ctx{1, 2, 1};
    src.reset(start_of(ctx));
    Proposal p;
    EXPECT_THROW(src.propose(ctx, 0, p), rwd::Error);
    EXPECT_THROW(src.propose(ctx, -3, p), rwd::Error);
    EXPECT_THROW(NgramSource(NgramSourceOptions{{0, 3}}), rwd::Error);
}

TEST(NgramSource, BranchesRankContinuationsByFrequency) {
    NgramSourceOptions o{{2, 4}};
    o.branches = 2;
    NgramSource src(o);
    // "1 2" is followed by 3 three times (3 4 0, 3 4 0, 3 5 0) and by 9 once, the latest.
    std::vector<TokenId> ctx{1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 5, 0, 1, 2, 9, 0, 7, 1, 2};
    src.reset(start_of(ctx));
    Proposal p;
    src.propose(ctx, 7, p);
    ASSERT_NO_THROW(check_proposal("ngram", p));
    // Continuations (k = 7 tokens deep), newest first: 9 0 7 1 2 9 0 | 3 5 0 1 2 9 0 |
    // 3 4 0 1 2 3 5 | 3 4 0 1 2 3 4. Best first by path probability: 3 (3/4), 3 4 (3/4 * 2/3),
    // then 0, 1, 2, 3 below it (weight 1 each: still 1/2), then 9 (1/4), which ties with 3 5 and
    // 3 4 0 1 2 3 4 (1/4 each) but its occurrence is the newest.
    EXPECT_EQ(p.tokens, (std::vector<TokenId>{3, 4, 0, 1, 2, 3, 9}));
    EXPECT_EQ(p.parents, (std::vector<int32_t>{-1, 0, 1, 2, 3, 4, -1}));
    ASSERT_EQ(p.weights.size(), 7u);
    EXPECT_FLOAT_EQ(p.weights[0], 0.75f);
    EXPECT_FLOAT_EQ(p.weights[1], 2.0f / 3.0f);
    EXPECT_FLOAT_EQ(p.weights[2], 1.0f);
    EXPECT_FLOAT_EQ(p.weights[6], 0.25f);
    // k bounds the nodes, and every prefix is a tree.
    for (int k = 1; k <= 6; ++k) {
        p.clear();
        src.propose(ctx, k, p);
        EXPECT_LE(p.tokens.size(), static_cast<size_t>(k));
        EXPECT_NO_THROW(check_proposal("ngram", p));
    }
}

TEST(NgramSource, OneBranchIsTheOldChainAndBranchesBoundSiblings) {
    std::mt19937 rng(3);
    std::uniform_int_distribution<TokenId> tok(0, 4);
    std::vector<TokenId> ctx(400);
    for (auto& t : ctx) t = tok(rng);
    NgramSource chain;                      // the defaults: branches == 1
    NgramSourceOptions o;
    o.branches = 3;
    NgramSource tree(o);
    chain.reset(start_of(ctx));
    tree.reset(start_of(ctx));
    for (size_t end = 20; end <= ctx.size(); end += 7) {
        const std::vector<TokenId> c(ctx.begin(), ctx.begin() + static_cast<std::ptrdiff_t>(end));
        Proposal a, b;
        chain.propose(c, 8, a);
        tree.propose(c, 8, b);
        // The chain: the latest occurrence's continuation, no tree fields.
        EXPECT_TRUE(a.parents.empty());
        EXPECT_TRUE(a.weights.empty());
        std::vector<TokenId> want;
        chain.index().copy(chain.index().find(c), 8, RunOff::Overlap, want);
        EXPECT_EQ(a.tokens, want);
        ASSERT_NO_THROW(check_proposal("ngram", b));
        EXPECT_EQ(a.tokens.empty(), b.tokens.empty()); // the same match, seen as a tree
        std::vector<int> children(b.tokens.size() + 1, 0);
        for (size_t i = 0; i < b.tokens.size(); ++i) ++children[static_cast<size_t>(b.parents[i] + 1)];
        for (int n : children) EXPECT_LE(n, 3);
    }
    NgramSourceOptions bad;
    bad.branches = 0;
    EXPECT_THROW(NgramSource{bad}, rwd::Error);
    bad.branches = 2;
    bad.max_occurrences = 0;
    EXPECT_THROW(NgramSource{bad}, rwd::Error);
}

TEST(NgramSource, TreesComeBestFirstOnRandomText) {
    std::mt19937 rng(9);
    std::uniform_int_distribution<TokenId> tok(0, 3);
    std::vector<TokenId> ctx(600);
    for (auto& t : ctx) t = tok(rng);
    for (int branches : {2, 3, 8}) {
        NgramSourceOptions o{{1, 4}};
        o.branches = branches;
        o.max_occurrences = 40;
        NgramSource src(o);
        src.reset(start_of({}));
        for (size_t end = 50; end <= ctx.size(); end += 37) {
            const std::vector<TokenId> c(ctx.begin(), ctx.begin() + static_cast<std::ptrdiff_t>(end));
            for (int k : {1, 5, 16}) {
                Proposal p;
                src.propose(c, k, p);
                ASSERT_NO_THROW(check_proposal("ngram", p));
                ASSERT_LE(p.tokens.size(), static_cast<size_t>(k));
                ASSERT_EQ(p.weights.size(), p.tokens.size());
                // Path probabilities (products of weights) never rise along the order, and no
                // node has more than `branches` children.
                std::vector<double> prob(p.tokens.size());
                std::vector<int> children(p.tokens.size() + 1, 0);
                for (size_t i = 0; i < p.tokens.size(); ++i) {
                    prob[i] = p.weights[i] * (p.parents[i] < 0 ? 1.0 : prob[static_cast<size_t>(p.parents[i])]);
                    if (i > 0) {
                        EXPECT_LE(prob[i], prob[i - 1] + 1e-5) << "branches " << branches << " at " << end; // float weights
                    }
                    EXPECT_LE(++children[static_cast<size_t>(p.parents[i] + 1)], branches);
                }
            }
        }
    }
}

TEST(NgramSource, BranchingTreeStillExtendsALoop) {
    NgramSourceOptions o;
    o.branches = 4;
    NgramSource src(o);
    const std::vector<TokenId> ctx{5, 1, 2, 1, 2, 1, 2};
    src.reset(start_of(ctx));
    Proposal p;
    src.propose(ctx, 6, p);
    ASSERT_NO_THROW(check_proposal("ngram", p));
    EXPECT_EQ(p.tokens, (std::vector<TokenId>{1, 2, 1, 2, 1, 2}));
    EXPECT_EQ(p.parents, (std::vector<int32_t>{-1, 0, 1, 2, 3, 4}));
}

TEST(ReferenceSource, BranchesOverEveryMatchInEveryDocument) {
    ReferenceSourceOptions o{{2, 4}};
    o.branches = 4;
    ReferenceSource src({{1, 2, 3, 4}, {7, 1, 2, 5, 6}, {1, 2, 3, 8}}, o);
    Proposal p;
    src.propose(std::vector<TokenId>{0, 1, 2}, 8, p);
    ASSERT_NO_THROW(check_proposal("ref", p));
    // 3 (2 of 3 matches) first; then three paths of probability 1/3, newest occurrence first:
    // 3 8 (the last document), 5 and 5 6 (the second), 3 4 (the first).
    EXPECT_EQ(p.tokens, (std::vector<TokenId>{3, 8, 5, 6, 4}));
    EXPECT_EQ(p.parents, (std::vector<int32_t>{-1, 0, -1, 2, 0}));
    EXPECT_FLOAT_EQ(p.weights[0], 2.0f / 3.0f);
    EXPECT_FLOAT_EQ(p.weights[1], 0.5f);
    EXPECT_FLOAT_EQ(p.weights[2], 1.0f / 3.0f);
    EXPECT_FLOAT_EQ(p.weights[3], 1.0f);
    // Two branches per node: the same tree (no node has more than two children).
    p.clear();
    ReferenceSourceOptions narrow = o;
    narrow.branches = 2;
    ReferenceSource two({{1, 2, 3, 4}, {7, 1, 2, 5, 6}, {1, 2, 3, 8}}, narrow);
    two.propose(std::vector<TokenId>{0, 1, 2}, 8, p);
    EXPECT_EQ(p.tokens, (std::vector<TokenId>{3, 8, 5, 6, 4}));
    // One branch is a chain: the latest document's copy.
    ReferenceSource chain({{1, 2, 3, 4}, {7, 1, 2, 5, 6}, {1, 2, 3, 8}}, ReferenceSourceOptions{{2, 4}});
    EXPECT_EQ(propose(chain, {0, 1, 2}, 8), (std::vector<TokenId>{3, 8}));
    ReferenceSourceOptions bad;
    bad.branches = 0;
    EXPECT_THROW(ReferenceSource({{1, 2}}, bad), rwd::Error);
}

TEST(ReferenceSource, CopiesFromTheReferenceThatHoldsTheLongestMatch) {
    ReferenceSource src({{1, 2, 3, 4, 5, 6}, {7, 8, 3, 4, 9, 9}}, ReferenceSourceOptions{{2, 4}});
    EXPECT_EQ(src.n_references(), 2);
    // "2 3 4" only occurs in the first reference: the longer match wins over the later "3 4".
    EXPECT_EQ(propose(src, {0, 2, 3, 4}, 8), (std::vector<TokenId>{5, 6}));
    // Only "3 4": both references have it, the later one is used.
    EXPECT_EQ(propose(src, {0, 0, 3, 4}, 8), (std::vector<TokenId>{9, 9}));
    EXPECT_EQ(propose(src, {0, 0, 3, 4}, 1), (std::vector<TokenId>{9}));
    // No match, and nothing after the end of a reference.
    EXPECT_TRUE(propose(src, {4, 3}, 4).empty());
    EXPECT_TRUE(propose(src, {5, 6}, 4).empty());
    // The references do not change across generations.
    std::vector<TokenId> prompt{0};
    src.reset(start_of(prompt));
    EXPECT_EQ(propose(src, {1, 2}, 2), (std::vector<TokenId>{3, 4}));
}

TEST(ReferenceSource, RejectsBadReferences) {
    EXPECT_THROW(ReferenceSource({}), rwd::Error);
    EXPECT_THROW(ReferenceSource({{1, 2}, {}}), rwd::Error);
    EXPECT_THROW(ReferenceSource({{1, -2, 3}}), rwd::Error);
    ReferenceSourceOptions small;
    small.max_tokens = 5;
    EXPECT_THROW(ReferenceSource({{1, 2, 3}, {4, 5, 6}}, small), rwd::Error);
    EXPECT_NO_THROW(ReferenceSource({{1, 2, 3}, {4, 5}}, small));
    ReferenceSource ok({{1, 2, 3}});
    Proposal p;
    EXPECT_THROW(ok.propose(std::vector<TokenId>{1, 2}, 0, p), rwd::Error);
    EXPECT_THROW(read_text_file("/nonexistent/reference.txt"), rwd::Error);
}

TEST(ReferenceSource, TokenizesTexts) {
    const auto model = rwd::Model::load(kModels + "pycode-4m.gguf");
    const auto& tok = model->tokenizer();
    auto src = ReferenceSource::from_texts(tok, {"def add(a, b):\n    return a + b\n"});
    const auto ctx = tok.encode("def add(a, b):\n", rwd::AddBos::Yes);
    const auto want = tok.encode("def add(a, b):\n    return a + b\n", rwd::AddBos::No);
    const auto got = propose(src, ctx, 64);
    ASSERT_FALSE(got.empty());
    // Whatever was guessed is the reference's own continuation.
    const auto it = std::search(want.begin(), want.end(), got.begin(), got.end());
    EXPECT_NE(it, want.end());
    EXPECT_THROW(ReferenceSource::from_texts(tok, {"x", ""}), rwd::Error);
}

TEST(CompositeSource, FirstPolicyFallsBackInOrderAndKeepsEveryMemberInStep) {
    auto ref = std::make_unique<ReferenceSource>(std::vector<std::vector<TokenId>>{{1, 2, 3, 4}});
    auto fixed = std::make_unique<Fixed>(std::vector<TokenId>{42, 43});
    Fixed* fixed_raw = fixed.get();
    std::vector<std::unique_ptr<GuessSource>> members;
    members.push_back(std::move(ref));
    members.push_back(std::move(fixed));
    CompositeSource comp(std::move(members), ComposePolicy::First);
    EXPECT_EQ(comp.name(), "ref+fixed");
    std::vector<TokenId> ctx{9, 1, 2};
    comp.reset(start_of(ctx));
    EXPECT_EQ(fixed_raw->resets, 1);
    EXPECT_EQ(propose(comp, ctx, 4), (std::vector<TokenId>{3, 4})); // the reference answers
    EXPECT_EQ(fixed_raw->proposals, 0);
    ctx.push_back(7);
    comp.accept(ctx);
    EXPECT_EQ(fixed_raw->last_accept, ctx.size()); // told even though it did not answer
    EXPECT_EQ(propose(comp, ctx, 4), (std::vector<TokenId>{42, 43})); // fallback
    EXPECT_EQ(comp.answered(), (std::vector<int64_t>{1, 1}));
    Proposal p;
    EXPECT_THROW(comp.propose(ctx, 0, p), rwd::Error);
    EXPECT_THROW(CompositeSource({}), rwd::Error);
    std::vector<std::unique_ptr<GuessSource>> with_null;
    with_null.push_back(nullptr);
    EXPECT_THROW(CompositeSource(std::move(with_null)), rwd::Error);
}

TEST(CompositeSource, LongestPolicyLetsALongerProposalWinAndStopsAtAFullOne) {
    // The reference ends two tokens after the match: a short copy must not hide the 3-token
    // member behind it; a member proposing all k stops the search.
    auto ref = std::make_unique<ReferenceSource>(std::vector<std::vector<TokenId>>{{1, 2, 3, 4}});
    auto three = std::make_unique<Fixed>(std::vector<TokenId>{42, 43, 44});
    auto four = std::make_unique<Fixed>(std::vector<TokenId>{50, 51, 52, 53});
    Fixed* three_raw = three.get();
    Fixed* four_raw = four.get();
    std::vector<std::unique_ptr<GuessSource>> members;
    members.push_back(std::move(ref));
    members.push_back(std::move(three));
    members.push_back(std::move(four));
    CompositeSource comp(std::move(members)); // Longest is the default
    EXPECT_EQ(comp.policy(), ComposePolicy::Longest);
    std::vector<TokenId> ctx{9, 1, 2};
    comp.reset(start_of(ctx));
    EXPECT_EQ(propose(comp, ctx, 3), (std::vector<TokenId>{42, 43, 44})); // full: the last member is not asked
    EXPECT_EQ(four_raw->proposals, 0);
    EXPECT_EQ(propose(comp, ctx, 8), (std::vector<TokenId>{50, 51, 52, 53})); // longest of 2, 3, 4
    EXPECT_EQ(three_raw->proposals, 2);
    EXPECT_EQ(propose(comp, ctx, 2), (std::vector<TokenId>{3, 4})); // a tie goes to the earlier member
    EXPECT_EQ(three_raw->proposals, 2);
    EXPECT_EQ(comp.answered(), (std::vector<int64_t>{1, 1, 1}));
}

TEST(SourceFactory, BuildsEveryNamedSourceAndRefusesIncompleteOrIgnoredParts) {
    const auto target = rwd::Model::load(kModels + "pycode-4m.gguf");
    const auto draft = rwd::Model::load(kModels + "pycode-600k.gguf");
    auto build = [&](std::string_view name, std::vector<std::string> refs, bool with_draft) {
        SourceSpec spec;
        parse_source_kind(name, spec);
        spec.references = std::move(refs);
        if (with_draft) spec.draft = draft;
        return make_guess_source(spec, *target, 256);
    };
    EXPECT_EQ(build("ngram", {}, false)->name(), "ngram");
    EXPECT_EQ(build("ref", {"def f(x):\n"}, false)->name(), "ref");
    EXPECT_EQ(build("draft", {}, true)->name(), "draft");
    EXPECT_EQ(build("auto", {}, false)->name(), "ngram");
    EXPECT_EQ(build("auto", {"x = 1\n"}, true)->name(), "ref+ngram+draft");
    auto first = build("auto-first", {}, true);
    ASSERT_NE(dynamic_cast<CompositeSource*>(first.get()), nullptr);
    EXPECT_EQ(dynamic_cast<CompositeSource*>(first.get())->policy(), ComposePolicy::First);

    EXPECT_THROW(build("ref", {}, false), rwd::Error);          // nothing to copy from
    EXPECT_THROW(build("draft", {}, false), rwd::Error);        // no model
    EXPECT_THROW(build("ngram", {"x"}, false), rwd::Error);     // references would be ignored
    EXPECT_THROW(build("ngram", {}, true), rwd::Error);         // a draft would be ignored
    EXPECT_THROW(build("ref", {"x"}, true), rwd::Error);
    EXPECT_THROW(build("draft", {"x"}, true), rwd::Error);
    EXPECT_THROW(build("ref", {"x", ""}, false), rwd::Error);   // an empty reference
    EXPECT_EQ(build("suffix", {}, false)->name(), "suffix");
    EXPECT_THROW(build("suffix", {"x"}, false), rwd::Error); // references would be ignored
    EXPECT_THROW(build("suffix", {}, true), rwd::Error);     // a draft would be ignored
    {
        // A shared suffix cache is the one the source reads and adds to; other kinds refuse it.
        SourceSpec s;
        parse_source_kind("suffix", s);
        s.suffix_cache = std::make_shared<SuffixCache>();
        s.suffix.alpha = 3.0f;
        auto built = make_guess_source(s, *target, 256);
        auto* suffix = dynamic_cast<SuffixSource*>(built.get());
        ASSERT_NE(suffix, nullptr);
        EXPECT_EQ(&suffix->cache(), s.suffix_cache.get());
        EXPECT_EQ(suffix->options().alpha, 3.0f);
        const std::vector<TokenId> prompt{1, 2, 3};
        built->reset(start_of(prompt));
        built->accept(std::vector<TokenId>{1, 2, 3, 4, 5});
        built.reset(); // the finished generation's output enters the shared cache
        EXPECT_EQ(s.suffix_cache->n_tokens(), 2);
        s.suffix.alpha = -1.0f;
        EXPECT_THROW(make_guess_source(s, *target, 256), rwd::Error);
        s.suffix.alpha = 1.0f;
        s.kind = SourceKind::Ngram;
        EXPECT_THROW(make_guess_source(s, *target, 256), rwd::Error);
    }
    SourceSpec spec;
    EXPECT_THROW(parse_source_kind("guess", spec), rwd::Error);
    for (const char* name : kSourceNames) {
        parse_source_kind(name, spec);
        EXPECT_STREQ(source_kind_name(spec.kind, spec.compose), name);
    }
    // A draft with another vocabulary is refused by the factory as by DraftSource.
    SourceSpec bad;
    bad.kind = SourceKind::Draft;
    bad.draft = rwd::Model::load(kModels + "aidreams260K.gguf");
    EXPECT_THROW(make_guess_source(bad, *target, 256), rwd::Error);
    // A shared draft source is used, not rebuilt: its cache is the one the proposals fill.
    auto shared = std::make_shared<DraftSource>(draft, *target, 256);
    SourceSpec lent;
    lent.kind = SourceKind::Draft;
    lent.draft = std::shared_ptr<GuessSource>(shared);
    const auto src = make_guess_source(lent, *target, 256);
    EXPECT_EQ(src->name(), "draft");
    const std::vector<TokenId> prompt = target->tokenizer().encode("def f(x):\n    return");
    src->reset(start_of(prompt));
    Proposal p;
    src->propose(prompt, 4, p);
    EXPECT_GT(shared->cache().size(), 0) << "the shared source ran the prompt";
    lent.draft = std::shared_ptr<GuessSource>(); // null: no draft
    EXPECT_THROW(make_guess_source(lent, *target, 256), rwd::Error);
}

TEST(DraftSource, RefusesAModelWithAnotherVocabulary) {
    const auto target = rwd::Model::load(kModels + "pycode-4m.gguf");
    const auto other = rwd::Model::load(kModels + "aidreams260K.gguf");
    try {
        DraftSource d(other, *target, 512);
        FAIL() << "a mismatched draft was accepted";
    } catch (const rwd::Error& e) {
        EXPECT_NE(std::string(e.what()).find("vocabulary"), std::string::npos) << e.what();
    }
    EXPECT_THROW(DraftSource(nullptr, *target, 512), rwd::Error);
}

TEST(DraftSource, RefusesAContextShorterThanTheTargetCache) {
    const auto target = rwd::Model::load(kModels + "pycode-4m.gguf");
    const auto draft = rwd::Model::load(kModels + "pycode-600k.gguf");
    EXPECT_THROW(DraftSource(draft, *target, draft->hparams().n_ctx_train + 1), rwd::Error);
    EXPECT_NO_THROW(DraftSource(draft, *target, draft->hparams().n_ctx_train));
}

TEST(DraftSource, DraftsGreedilyAndRollsBackToTheAcceptedText) {
    const auto target = rwd::Model::load(kModels + "pycode-4m.gguf");
    const auto draft = rwd::Model::load(kModels + "pycode-600k.gguf");
    DraftSourceOptions all_k;
    all_k.min_confidence = 0.0f; // draft every guess asked for
    DraftSource src(draft, *target, 256, all_k);
    const auto& tok = target->tokenizer();
    std::vector<TokenId> ctx = tok.encode("import os\nimport sys\n\ndef main(", rwd::AddBos::Yes);
    src.reset(start_of(ctx));
    const auto g = propose(src, ctx, 5);
    ASSERT_EQ(g.size(), 5u);
    // The draft ran the context and 4 of its 5 guesses.
    EXPECT_EQ(src.cache().size(), static_cast<int64_t>(ctx.size() + 4));

    // Greedy drafting is plain greedy decoding of the draft model.
    rwd::Context dctx(draft);
    rwd::KvCache dcache(*draft, {256});
    rwd::GenerateOptions go;
    go.max_tokens = 5;
    go.stop_at_eog = false;
    EXPECT_EQ(rwd::generate_plain(dctx, dcache, ctx, go).tokens, g);

    // The target accepted two guesses and chose its own third token.
    ctx.insert(ctx.end(), g.begin(), g.begin() + 2);
    ctx.push_back(g[2] == 1 ? 2 : 1);
    src.accept(ctx);
    EXPECT_EQ(src.cache().size(), static_cast<int64_t>(ctx.size() - 1)); // the new token is not run yet
    const auto before = src.tokens_processed();
    const auto g2 = propose(src, ctx, 3);
    EXPECT_EQ(g2.size(), 3u);
    EXPECT_EQ(src.tokens_processed() - before, 1u + 2u); // the target's token, then 2 guesses

    // Replaying from scratch gives the same guesses: the rolled-back cache is exact.
    DraftSource fresh(draft, *target, 256, all_k);
    fresh.reset(start_of(ctx));
    EXPECT_EQ(propose(fresh, ctx, 3), g2);
    // k larger than the room left in the cache is clamped, never an overflow.
    DraftSource tight(draft, *target, static_cast<int64_t>(ctx.size()) + 1, all_k);
    tight.reset(start_of(ctx));
    EXPECT_EQ(propose(tight, ctx, 8).size(), 2u);
}

TEST(DraftSource, StopsDraftingWhenUnsure) {
    const auto target = rwd::Model::load(kModels + "pycode-4m.gguf");
    const auto draft = rwd::Model::load(kModels + "pycode-600k.gguf");
    const std::vector<TokenId> ctx = target->tokenizer().encode("import os\nimport sys\n\ndef main(", rwd::AddBos::Yes);
    DraftSourceOptions o;
    o.min_confidence = 1.0f; // no draft is ever that sure
    DraftSource never(draft, *target, 256, o);
    never.reset(start_of(ctx));
    EXPECT_TRUE(propose(never, ctx, 8).empty());
    o.min_confidence = 0.0f;
    DraftSource always(draft, *target, 256, o);
    always.reset(start_of(ctx));
    EXPECT_EQ(propose(always, ctx, 8).size(), 8u);
    o.min_confidence = 0.3f;
    DraftSource some(draft, *target, 256, o);
    some.reset(start_of(ctx));
    const auto g = propose(some, ctx, 8);
    // Whatever it drafted is a prefix of the full draft.
    const auto full = propose(always, ctx, 8);
    EXPECT_TRUE(std::equal(g.begin(), g.end(), full.begin()));
    o.min_confidence = 1.5f;
    EXPECT_THROW(DraftSource(draft, *target, 256, o), rwd::Error);
}
