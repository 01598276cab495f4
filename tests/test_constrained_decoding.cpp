// Constrained decoding is exact: tokens come from the constraint's mask (tests/constraint_test_util.h),
// end of generation only where the text is complete, and constrained speculative output (every
// source, k, trees, batches, threads, greedy and seeded) equals constrained plain output.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "constraint_test_util.h"
#include "model_test_util.h"
#include "rewind/context.h"
#include "rewind/generate.h"
#include "rewind/session.h"
#include "rewind/speculate/batch_decoder.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/source_factory.h"
#include "rewind/speculate/speculative_session.h"

using namespace rwd;
using namespace rwd::speculate;
using rwd::constraint_test::PieceConstraint;

namespace {

constexpr int64_t kCapacity = 512;
const char* const kPrompt = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
                            "def mul(a, b):\n    return a * b\n\n";
const char* const kReference = "def div(a, b):\n    return a / b\n\ndef neg(a):\n    return -a\n";

std::shared_ptr<const Model> target() { return model_test::load("pycode-4m"); }
std::shared_ptr<const Model> draft() { return model_test::load("pycode-600k"); }

std::unique_ptr<GuessSource> source_of(const std::string& kind, int branches) {
    SourceSpec spec;
    parse_source_kind(kind, spec);
    if (kind == "ref" || kind == "auto") spec.references = {kReference};
    if (kind == "draft" || kind == "auto") spec.draft = draft();
    spec.branches = branches;
    return make_guess_source(spec, *target(), kCapacity);
}

GenerateOptions options(float temp, int64_t max_tokens = 60) {
    GenerateOptions go;
    go.max_tokens = max_tokens;
    go.sampler.temperature = temp;
    go.sampler.seed = 99;
    return go;
}

GenerateResult plain_of(Context& ctx, const std::vector<TokenId>& prompt, const GenerateOptions& go,
                        PieceConstraint& c) {
    KvCache cache(ctx.model(), {kCapacity});
    c.reset();
    return generate_plain(ctx, cache, prompt, go, {}, &c);
}

// A source that proposes what it was told (a chain, or a tree with `parents`).
class Scripted final : public GuessSource {
public:
    std::vector<TokenId> guesses;
    std::vector<int32_t> parents;
    std::string_view name() const override { return "scripted"; }
    void reset(const GenerationStart&) override {}
    void propose(std::span<const TokenId>, int k, Proposal& out) override {
        const size_t n = std::min(guesses.size(), static_cast<size_t>(k));
        out.tokens.assign(guesses.begin(), guesses.begin() + static_cast<std::ptrdiff_t>(n));
        if (!parents.empty()) out.parents.assign(parents.begin(), parents.begin() + static_cast<std::ptrdiff_t>(n));
    }
    void accept(std::span<const TokenId>) override {}
};

} // namespace

// The output is always in the language; end of generation only where the text is complete.
TEST(ConstrainedDecoding, PlainOutputStaysInTheLanguage) {
    const auto m = target();
    Context ctx(m);
    const auto prompt = m->tokenizer().encode(kPrompt);
    for (const float temp : {0.0f, 0.8f, 1.5f}) {
        for (uint64_t seed : {1u, 2u, 3u}) {
            PieceConstraint c(m->tokenizer(), constraint_test::python_function());
            GenerateOptions go = options(temp, 80);
            go.sampler.seed = seed;
            const GenerateResult r = plain_of(ctx, prompt, go, c);
            ASSERT_FALSE(r.tokens.empty());
            std::vector<TokenId> text_ids = r.tokens;
            if (r.stop == StopReason::EndOfGeneration) text_ids.pop_back();
            const std::string text = m->tokenizer().decode(text_ids);
            EXPECT_TRUE(c.matches(text, r.stop == StopReason::EndOfGeneration)) << temp << " " << seed << ": " << text;
            // Every token but an end of generation advanced the constraint.
            EXPECT_EQ(c.accepted(), static_cast<int64_t>(text_ids.size()));
            if (temp == 0.0f) break; // greedy ignores the seed
        }
    }
}

// Unconstrained, the model does not write this language from this prompt; constrained it does.
TEST(ConstrainedDecoding, TheMaskChangesTheOutput) {
    const auto m = target();
    Context ctx(m);
    const auto prompt = m->tokenizer().encode("import os\n");
    KvCache cache(*m, {kCapacity});
    const GenerateResult free = generate_plain(ctx, cache, prompt, options(0.0f, 20));
    PieceConstraint c(m->tokenizer(), constraint_test::python_function());
    const GenerateResult constrained = plain_of(ctx, prompt, options(0.0f, 20), c);
    EXPECT_NE(free.tokens, constrained.tokens);
    EXPECT_EQ(m->tokenizer().decode(constrained.tokens).rfind("def ", 0), 0u);
}

// Stop reasons stay honest: max_tokens cuts an incomplete sentence; a sentence that cannot grow
// leaves end of generation as the only token.
TEST(ConstrainedDecoding, StopReasonsAreHonest) {
    const auto m = target();
    Context ctx(m);
    const auto prompt = m->tokenizer().encode(kPrompt);
    PieceConstraint c(m->tokenizer(), constraint_test::python_function());
    const GenerateResult cut = plain_of(ctx, prompt, options(0.0f, 3), c);
    EXPECT_EQ(cut.stop, StopReason::MaxTokens);
    EXPECT_FALSE(c.is_complete());

    // At most 40 bytes of letters, spaces and newlines: it ends by end of generation (allowed
    // anywhere; forced at 40 bytes) or by max_tokens, never outside the language.
    for (const float temp : {0.0f, 1.0f}) {
        PieceConstraint t(m->tokenizer(), constraint_test::short_text());
        GenerateOptions go = options(temp, 200);
        go.stop_at_eog = temp > 0.0f; // off: under a constraint end of generation still ends it
        const GenerateResult r = plain_of(ctx, prompt, go, t);
        ASSERT_EQ(r.stop, StopReason::EndOfGeneration) << temp;
        EXPECT_TRUE(m->tokenizer().is_eog(r.tokens.back()));
        const std::string text = m->tokenizer().decode(std::vector<TokenId>(r.tokens.begin(), r.tokens.end() - 1));
        EXPECT_TRUE(t.matches(text, true)) << text;
    }
}

// Constrained speculative == constrained plain: every source, k, chains and trees, greedy and
// seeded; the guesses the constraint forbids never reach a pass.
TEST(ConstrainedDecoding, SpeculativeEqualsPlainForEverySource) {
    const auto m = target();
    Context ctx(m);
    const auto prompt = m->tokenizer().encode(kPrompt);
    for (const float temp : {0.0f, 0.8f}) {
        PieceConstraint c(m->tokenizer(), constraint_test::python_function());
        const GenerateResult plain = plain_of(ctx, prompt, options(temp), c);
        for (const std::string kind : {"ngram", "ref", "draft", "suffix", "auto", "forced"}) {
            for (const int branches : {1, 3}) {
                auto src = source_of(kind, branches);
                for (const int k : {1, 4, 8}) {
                    SpeculativeOptions so;
                    so.generate = options(temp);
                    so.k = k;
                    KvCache cache(*m, {kCapacity});
                    c.reset();
                    const auto spec = generate_speculative(ctx, cache, prompt, *src, so, {}, &c);
                    ASSERT_EQ(spec.tokens, plain.tokens) << kind << " branches " << branches << " k " << k << " temp " << temp;
                    ASSERT_EQ(spec.stop, plain.stop);
                    EXPECT_EQ(cache.size(), static_cast<int64_t>(prompt.size() + plain.tokens.size()) - 1);
                }
            }
        }
    }
}

// Forced text is proposed as guesses: alone ("forced") and composed automatically with another
// source; it is counted, it stands (the model's own text agrees with what the constraint forces
// here), and passes carry more than one token.
TEST(ConstrainedDecoding, ForcedTextIsGuessedAndCounted) {
    const auto m = target();
    Context ctx(m);
    const auto prompt = m->tokenizer().encode(kPrompt);
    PieceConstraint c(m->tokenizer(), constraint_test::python_function());
    const GenerateResult plain = plain_of(ctx, prompt, options(0.0f), c);
    for (const std::string kind : {"forced", "ngram", "draft"}) {
        auto src = source_of(kind, 1);
        SpeculativeOptions so;
        so.generate = options(0.0f);
        so.k = 8;
        KvCache cache(*m, {kCapacity});
        c.reset();
        const auto r = generate_speculative(ctx, cache, prompt, *src, so, {}, &c);
        EXPECT_EQ(r.tokens, plain.tokens) << kind;
        EXPECT_GT(r.stats.forced_proposed, 0) << kind;
        EXPECT_GT(r.stats.forced_accepted, 0) << kind;
        EXPECT_LE(r.stats.forced_accepted, r.stats.forced_proposed);
        EXPECT_LE(r.stats.forced_proposed, r.stats.proposed);
        EXPECT_GT(r.stats.tokens_per_pass(), 1.0) << kind;
        EXPECT_NE(format_stats(r.stats).find("forced text"), std::string::npos);
    }
    // Without a constraint "forced" guesses nothing: plain decoding.
    auto src = source_of("forced", 1);
    SpeculativeOptions so;
    so.generate = options(0.0f, 16);
    KvCache cache(*m, {kCapacity});
    const auto r = generate_speculative(ctx, cache, prompt, *src, so);
    EXPECT_EQ(r.stats.proposed, 0);
}

// Rejection mode composes forced text with a draft's distributions (point masses for the forced
// guesses) and keeps every token inside the language.
TEST(ConstrainedDecoding, RejectionModeStaysInTheLanguage) {
    const auto m = target();
    Context ctx(m);
    const auto prompt = m->tokenizer().encode(kPrompt);
    PieceConstraint c(m->tokenizer(), constraint_test::python_function());
    auto src = source_of("draft", 1);
    SpeculativeOptions so;
    so.generate = options(0.8f);
    so.k = 4;
    so.verify = VerifyMode::Rejection;
    KvCache cache(*m, {kCapacity});
    const auto r = generate_speculative(ctx, cache, prompt, *src, so, {}, &c);
    std::vector<TokenId> text = r.tokens;
    if (r.stop == StopReason::EndOfGeneration) text.pop_back();
    EXPECT_TRUE(c.matches(m->tokenizer().decode(text), r.stop == StopReason::EndOfGeneration));
    EXPECT_GT(r.stats.forced_proposed, 0);
}

// The pass size and the thread count change nothing (adaptive and cost k policies too).
TEST(ConstrainedDecoding, SpeculativeEqualsPlainAcrossThreadsAndPolicies) {
    const auto m = target();
    Context one(m, {.n_threads = 1}), two(m, {.n_threads = 2});
    const auto prompt = m->tokenizer().encode(kPrompt);
    PieceConstraint c(m->tokenizer(), constraint_test::python_function());
    const GenerateResult plain = plain_of(one, prompt, options(0.8f), c);
    for (const KPolicy policy : {KPolicy::Fixed, KPolicy::Adaptive, KPolicy::Cost}) {
        auto src = source_of("draft", 2);
        SpeculativeOptions so;
        so.generate = options(0.8f);
        so.k = 6;
        so.k_policy = policy;
        KvCache cache(*m, {kCapacity});
        c.reset();
        const auto spec = generate_speculative(two, cache, prompt, *src, so, {}, &c);
        EXPECT_EQ(spec.tokens, plain.tokens) << k_policy_name(policy);
    }
}

// Penalties see every token before a position, accepted guesses included, so speculation keeps
// them exact: frequency, presence, logit_bias and the repetition penalty, with and without a
// constraint, greedy and seeded, every k and trees.
TEST(ConstrainedDecoding, PenaltiesAreExactUnderSpeculation) {
    const auto m = target();
    Context ctx(m);
    const auto prompt = m->tokenizer().encode(kPrompt);
    const TokenId b = m->tokenizer().encode("b", AddBos::No).at(0);
    auto penalised = [&](float temp) {
        GenerateOptions go = options(temp);
        go.sampler.frequency_penalty = 0.4f;
        go.sampler.presence_penalty = 0.3f;
        go.sampler.repeat_penalty = 1.05f;
        go.sampler.repeat_last_n = -1;
        go.sampler.logit_bias = {{b, -2.0f}};
        return go;
    };
    for (const bool constrained : {false, true}) {
        for (const float temp : {0.0f, 0.8f}) {
            PieceConstraint c(m->tokenizer(), constraint_test::python_function());
            KvCache cache(*m, {kCapacity});
            const GenerateResult plain = generate_plain(ctx, cache, prompt, penalised(temp), {}, constrained ? &c : nullptr);
            cache.truncate(0);
            c.reset();
            const GenerateResult unpenalised = generate_plain(ctx, cache, prompt, options(temp), {}, constrained ? &c : nullptr);
            EXPECT_NE(plain.tokens, unpenalised.tokens) << "the penalties changed nothing: untested";
            for (const std::string kind : {"ngram", "draft", "suffix"}) {
                for (const int branches : {1, 3}) {
                    auto src = source_of(kind, branches);
                    for (const int k : {2, 8}) {
                        SpeculativeOptions so;
                        so.generate = penalised(temp);
                        so.k = k;
                        KvCache sc(*m, {kCapacity});
                        c.reset();
                        const auto r = generate_speculative(ctx, sc, prompt, *src, so, {}, constrained ? &c : nullptr);
                        ASSERT_EQ(r.tokens, plain.tokens) << kind << " branches " << branches << " k " << k << " temp "
                                                          << temp << " constrained " << constrained;
                    }
                }
            }
        }
    }
}

// A guess the constraint forbids, and everything under it, is dropped before the pass; allowed
// siblings stay.
TEST(ConstrainedDecoding, ForbiddenGuessesAreCutBeforeThePass) {
    const auto m = target();
    const Tokenizer& tok = m->tokenizer();
    Context ctx(m);
    const auto prompt = tok.encode(kPrompt);
    PieceConstraint c(tok, constraint_test::short_text()); // complete everywhere: nothing is forced
    const GenerateResult plain = plain_of(ctx, prompt, options(0.0f, 8), c);

    Scripted src;
    const std::vector<TokenId> bad = tok.encode("#include {x}", AddBos::No);
    src.guesses = bad; // a chain forbidden from its first token
    SpeculativeOptions so;
    so.generate = options(0.0f, 8);
    so.k = 4;
    KvCache cache(*m, {kCapacity});
    c.reset();
    auto r = generate_speculative(ctx, cache, prompt, src, so, {}, &c);
    EXPECT_EQ(r.tokens, plain.tokens);
    EXPECT_EQ(r.stats.proposed, 0);
    EXPECT_EQ(r.stats.empty_passes, r.stats.passes);

    // A tree: a forbidden first guess with a child, then the allowed "def" beside it.
    const std::vector<TokenId> good = tok.encode("def", AddBos::No);
    ASSERT_EQ(good.size(), 1u);
    src.guesses = {bad[0], bad.size() > 1 ? bad[1] : bad[0], good[0]};
    src.parents = {-1, 0, -1};
    std::vector<int> verified;
    so.on_pass = [&](const PassReport& p) { verified.push_back(p.proposed); };
    cache.truncate(0);
    c.reset();
    r = generate_speculative(ctx, cache, prompt, src, so, {}, &c);
    EXPECT_EQ(r.tokens, plain.tokens);
    ASSERT_FALSE(verified.empty());
    EXPECT_EQ(verified[0], 1); // only "def" was verified in the first pass
}

// Each request of a batch with its own constraint (two languages, greedy and seeded, with and
// without a source) decodes exactly its own plain constrained output.
TEST(ConstrainedDecoding, BatchRequestsEachWithTheirOwnConstraint) {
    const auto m = target();
    Context ctx(m, {.n_threads = 2, .max_batch = 64});
    const auto prompt = m->tokenizer().encode(kPrompt);
    struct Case {
        bool function;
        float temp;
        const char* source;
    };
    const std::vector<Case> cases = {{true, 0.0f, "ngram"}, {false, 0.8f, "draft"}, {true, 0.8f, "draft"},
                                     {false, 0.0f, nullptr}, {true, 0.0f, "suffix"}};
    auto language = [](bool f) { return f ? constraint_test::python_function() : constraint_test::short_text(); };
    BatchDecoder dec(ctx, {.pass_tokens = 24});
    std::map<uint64_t, size_t> which;
    for (size_t i = 0; i < cases.size(); ++i) {
        BatchRequest req;
        req.prompt = prompt;
        req.generate = options(cases[i].temp, 40);
        req.constraint = std::make_unique<PieceConstraint>(m->tokenizer(), language(cases[i].function));
        if (cases[i].source) req.source = source_of(cases[i].source, 2);
        req.k = 6;
        which[dec.submit(std::move(req))] = i;
    }
    std::map<size_t, BatchResult> out;
    while (!dec.idle())
        for (BatchResult& r : dec.step()) out[which.at(r.id)] = std::move(r);
    ASSERT_EQ(out.size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
        PieceConstraint c(m->tokenizer(), language(cases[i].function));
        const GenerateResult plain = plain_of(ctx, prompt, options(cases[i].temp, 40), c);
        ASSERT_FALSE(out[i].failed) << out[i].error;
        EXPECT_EQ(out[i].tokens, plain.tokens) << i;
        EXPECT_EQ(out[i].stop, plain.stop) << i;
    }
}

// A guidance-style session: constrained gen() calls between appended text, speculative or not.
TEST(ConstrainedDecoding, SessionGenerationsAreExact) {
    const auto m = target();
    Context ctx(m);
    auto run = [&](bool speculative) {
        Session s(m, {.capacity = kCapacity});
        s.append_text(ctx, kPrompt);
        auto src = source_of("ngram", 1);
        std::vector<TokenId> out;
        for (int turn = 0; turn < 2; ++turn) {
            PieceConstraint c(m->tokenizer(), constraint_test::python_function());
            GenerateOptions go = options(0.8f, 40);
            go.stop_at_eog = true;
            GenerateResult r;
            if (speculative) {
                SpeculativeOptions so;
                so.generate = go;
                so.k = 4;
                r = generate_speculative(ctx, s, *src, so, {}, &c);
            } else {
                r = s.generate(ctx, go, {}, &c);
            }
            if (!r.tokens.empty() && m->tokenizer().is_eog(r.tokens.back())) s.truncate(static_cast<int64_t>(s.tokens().size()) - 1);
            out.insert(out.end(), r.tokens.begin(), r.tokens.end());
            s.append_text(ctx, "\n");
        }
        return out;
    };
    EXPECT_EQ(run(true), run(false));
}

// A constraint is used from its present state: a generation cut by max_tokens continues, with the
// same constraint, exactly as one longer generation would have gone on (speculating or not).
TEST(ConstrainedDecoding, AConstraintContinuesFromWhereItStands) {
    const auto m = target();
    Context ctx(m);
    PieceConstraint whole(m->tokenizer(), constraint_test::python_function());
    Session one(m, {.capacity = kCapacity});
    one.append_text(ctx, kPrompt);
    const GenerateResult all = one.generate(ctx, options(0.8f, 30), {}, &whole);

    PieceConstraint c(m->tokenizer(), constraint_test::python_function());
    Session two(m, {.capacity = kCapacity});
    two.append_text(ctx, kPrompt);
    GenerateResult first = two.generate(ctx, options(0.8f, 7), {}, &c);
    ASSERT_EQ(first.stop, StopReason::MaxTokens);
    auto src = source_of("ngram", 1);
    SpeculativeOptions so;
    so.generate = options(0.8f, 23);
    so.k = 4;
    const auto rest = generate_speculative(ctx, two, *src, so, {}, &c);
    first.tokens.insert(first.tokens.end(), rest.tokens.begin(), rest.tokens.end());
    EXPECT_EQ(first.tokens, all.tokens);
}
