// Greedy decoding under a constraint builds a token mask only where the constraint refuses the
// argmax (DecodeState's lazy path): its output, plain and speculative, with penalties and
// logit_bias, equals a reference loop that masks every position, for a grammar that refuses often
// and for the shared JSON workload's schemas.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "constraint_test_util.h"
#include "model_test_util.h"
#include "rewind/context.h"
#include "rewind/generate.h"
#include "rewind/grammar/json_schema.h"
#include "rewind/sampler.h"
#include "rewind/speculate/batch_decoder.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/grammar_constraint.h"
#include "rewind/speculate/source_factory.h"

using namespace rwd;
using namespace rwd::speculate;
namespace ct = rwd::constraint_test;

namespace {

constexpr int64_t kCapacity = 512;
const char* const kPrompt = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
                            "def mul(a, b):\n    return a * b\n\n";

std::shared_ptr<const Model> target() { return model_test::load("pycode-4m"); }

// Python one-liners without spaces in the expression: the model wants " + b" after "return a",
// so the constraint refuses its argmax at many positions.
std::vector<ct::Piece> spaceless_function() {
    std::vector<ct::Piece> p;
    ct::literal(p, "def ");
    p.push_back(ct::cls(ct::range('a', 'z') + "_", 1, 16));
    ct::literal(p, "(");
    p.push_back(ct::cls(ct::range('a', 'z') + ",", 0, 24));
    ct::literal(p, "):\n    return ");
    p.push_back(ct::cls(ct::range('a', 'z') + "+-*/()", 1, 40));
    ct::literal(p, "\n");
    return p;
}

// Counts the masks asked of a constraint (everything else goes straight through).
class CountingConstraint final : public TokenConstraint {
public:
    explicit CountingConstraint(TokenConstraint& inner) : in_(inner) {}
    int64_t masks = 0;
    void reset() override { in_.reset(); }
    void fill_mask(std::span<uint32_t> mask) override {
        ++masks;
        in_.fill_mask(mask);
    }
    bool allows(TokenId t) override { return in_.allows(t); }
    bool accept(TokenId t) override { return in_.accept(t); }
    bool is_complete() const override { return in_.is_complete(); }
    bool is_finished() const override { return in_.is_finished(); }
    Snapshot snapshot() const override { return in_.snapshot(); }
    void rollback(Snapshot s) override { in_.rollback(s); }
    void forced_tokens(size_t max_tokens, std::vector<TokenId>& out) override { in_.forced_tokens(max_tokens, out); }

private:
    TokenConstraint& in_;
};

GenerateOptions greedy(bool penalised, int64_t max_tokens = 60) {
    GenerateOptions go;
    go.max_tokens = max_tokens;
    if (penalised) {
        go.sampler.frequency_penalty = 0.4f;
        go.sampler.presence_penalty = 0.3f;
        go.sampler.repeat_penalty = 1.05f;
        go.sampler.repeat_last_n = -1;
        go.sampler.logit_bias = {{target()->tokenizer().encode("b", AddBos::No).at(0), -2.0f},
                                 {target()->tokenizer().encode("a", AddBos::No).at(0), 1.5f}};
    }
    return go;
}

// The rule written out, independent of DecodeState: one token a pass, the whole mask at every
// position, the sampler's argmax among the allowed tokens; the constraint follows each token.
std::vector<TokenId> reference(Context& ctx, const std::vector<TokenId>& prompt, const GenerateOptions& go,
                               TokenConstraint& c) {
    const Model& m = ctx.model();
    KvCache cache(m, {kCapacity});
    Sampler sampler(go.sampler, m.n_vocab());
    std::vector<uint32_t> mask(static_cast<size_t>(sampler.mask_words()));
    std::vector<TokenId> history = prompt, out;
    c.reset();
    std::span<const float> logits = ctx.forward(cache, prompt, Logits::Last);
    while (static_cast<int64_t>(out.size()) < go.max_tokens) {
        c.fill_mask(mask);
        const TokenId t = sampler.sample(logits.data(), static_cast<int64_t>(history.size()), history, mask);
        out.push_back(t);
        history.push_back(t);
        if (m.tokenizer().is_eog(t)) break;
        EXPECT_TRUE(c.accept(t));
        logits = ctx.forward(cache, std::span<const TokenId>(&t, 1), Logits::Last);
    }
    return out;
}

std::unique_ptr<GuessSource> source_of(const std::string& kind, int branches) {
    SourceSpec spec;
    parse_source_kind(kind, spec);
    if (kind == "draft") spec.draft = model_test::load("pycode-600k");
    spec.branches = branches;
    return make_guess_source(spec, *target(), kCapacity);
}

void expect_same_logprobs(const std::vector<TokenLogprob>& a, const std::vector<TokenLogprob>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].token, b[i].token);
        EXPECT_EQ(std::memcmp(&a[i].logprob, &b[i].logprob, sizeof(float)), 0) << "at " << i;
    }
}

} // namespace

// Plain greedy decoding masks only where the argmax is refused, and decides as the reference.
TEST(ConstrainedGreedy, PlainEqualsTheFullMaskRule) {
    const auto m = target();
    Context ctx(m);
    const auto prompt = m->tokenizer().encode(kPrompt);
    for (const bool penalised : {false, true}) {
        ct::PieceConstraint inner(m->tokenizer(), spaceless_function());
        CountingConstraint c(inner);
        const std::vector<TokenId> want = reference(ctx, prompt, greedy(penalised), c);
        c.masks = 0;
        c.reset();
        KvCache cache(*m, {kCapacity});
        const GenerateResult got = generate_plain(ctx, cache, prompt, greedy(penalised), {}, &c);
        EXPECT_EQ(got.tokens, want) << "penalised " << penalised;
        // Both paths ran: masks at the refused positions only.
        EXPECT_GT(c.masks, 0) << "the constraint never refused the argmax: the fallback is untested";
        EXPECT_LT(c.masks, static_cast<int64_t>(got.tokens.size())) << "no position was decided without a mask";
        // Processed logprobs need every mask (no lazy path): the same tokens.
        GenerateOptions lp = greedy(penalised);
        lp.logprobs.enabled = true;
        lp.logprobs.processed = true;
        c.reset();
        c.masks = 0;
        cache.truncate(0);
        const GenerateResult full = generate_plain(ctx, cache, prompt, lp, {}, &c);
        EXPECT_EQ(full.tokens, want);
        EXPECT_GE(c.masks, static_cast<int64_t>(full.tokens.size()));
    }
}

// Speculative decoding (chains and trees, several sources and k) and batches, greedy with and
// without penalties and logit_bias: the reference's tokens and plain decoding's logprob bits.
TEST(ConstrainedGreedy, SpeculativeAndBatchedEqualTheFullMaskRule) {
    const auto m = target();
    Context ctx(m);
    const auto prompt = m->tokenizer().encode(kPrompt);
    for (const bool penalised : {false, true}) {
        ct::PieceConstraint c(m->tokenizer(), spaceless_function());
        const std::vector<TokenId> want = reference(ctx, prompt, greedy(penalised), c);
        GenerateOptions go = greedy(penalised);
        go.logprobs.enabled = true;
        go.logprobs.top_n = 3;
        c.reset();
        KvCache pc(*m, {kCapacity});
        const GenerateResult plain = generate_plain(ctx, pc, prompt, go, {}, &c);
        ASSERT_EQ(plain.tokens, want);
        for (const std::string kind : {"ngram", "draft", "forced", "suffix"}) {
            for (const int branches : {1, 3}) {
                auto src = source_of(kind, branches);
                for (const int k : {2, 8}) {
                    SpeculativeOptions so;
                    so.generate = go;
                    so.k = k;
                    KvCache cache(*m, {kCapacity});
                    c.reset();
                    const auto r = generate_speculative(ctx, cache, prompt, *src, so, {}, &c);
                    ASSERT_EQ(r.tokens, want) << kind << " branches " << branches << " k " << k << " penalised " << penalised;
                    expect_same_logprobs(r.logprobs, plain.logprobs);
                }
            }
        }
        BatchDecoder dec(ctx);
        for (int i = 0; i < 3; ++i) {
            BatchRequest req;
            req.prompt = prompt;
            req.generate = go;
            req.k = 4 * i;
            if (i > 0) req.source = source_of(i == 1 ? "ngram" : "suffix", 1);
            req.constraint = std::make_unique<ct::PieceConstraint>(m->tokenizer(), spaceless_function());
            dec.submit(std::move(req));
        }
        int done = 0;
        while (!dec.idle())
            for (const BatchResult& r : dec.step()) {
                EXPECT_EQ(r.tokens, want) << "batch request " << r.id;
                expect_same_logprobs(r.logprobs, plain.logprobs);
                ++done;
            }
        EXPECT_EQ(done, 3);
    }
}

// The grammar library's constraint (a GBNF grammar whose keys the model would not write): the
// same rule, with forced keys guessed.
TEST(ConstrainedGreedy, GrammarConstraintEqualsTheFullMaskRule) {
    const auto m = target();
    Context ctx(m);
    const auto prompt = m->tokenizer().encode(std::string(kPrompt) + "# as JSON:\n");
    const char* const gbnf = R"(root ::= "{\"name\":\"" [a-z_]{1,12} "\",\"args\":[" ( arg ( "," arg ){0,3} )? "],\"lines\":" [0-9]{1,3} "}"
arg ::= "\"" [a-z]{1,8} "\"")";
    for (const bool penalised : {false, true}) {
        const auto c = make_grammar_constraint(gbnf, m->tokenizer());
        CountingConstraint counted(*c);
        const std::vector<TokenId> want = reference(ctx, prompt, greedy(penalised, 80), counted);
        counted.reset();
        counted.masks = 0;
        KvCache pc(*m, {kCapacity});
        const GenerateResult plain = generate_plain(ctx, pc, prompt, greedy(penalised, 80), {}, &counted);
        EXPECT_EQ(plain.tokens, want);
        EXPECT_GT(counted.masks, 0);
        EXPECT_LT(counted.masks, static_cast<int64_t>(plain.tokens.size()));
        for (const std::string kind : {"forced", "ngram"}) {
            auto src = source_of(kind, 1);
            SpeculativeOptions so;
            so.generate = greedy(penalised, 80);
            so.k = 8;
            KvCache cache(*m, {kCapacity});
            c->reset();
            const auto r = generate_speculative(ctx, cache, prompt, *src, so, {}, c.get());
            EXPECT_EQ(r.tokens, want) << kind << " penalised " << penalised;
        }
    }
}

// The shared JSON workload's schemas on the bundled model (the workload the speed figures use):
// plain greedy decoding and forced+ngram speculation decide as the full-mask rule on each item.
TEST(ConstrainedGreedy, JsonWorkloadEqualsTheFullMaskRule) {
    std::ifstream in(std::string(REWIND_SHARED_DIR) + "/workloads/json.jsonl");
    if (!in) GTEST_SKIP() << "the shared JSON workload is absent";
    auto m = Model::load(std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf");
    Context ctx(m);
    std::string line;
    for (int item = 0; item < 6 && std::getline(in, line); ++item) {
        const auto j = nlohmann::json::parse(line);
        const std::string gbnf = grammar::json_schema_to_gbnf(j.at("json_schema").dump());
        const auto prompt = m->tokenizer().encode(j.at("prompt").get<std::string>());
        const auto c = make_grammar_constraint(gbnf, m->tokenizer());
        const GenerateOptions go = greedy(false, 80);
        const std::vector<TokenId> want = reference(ctx, prompt, go, *c);
        c->reset();
        KvCache pc(*m, {kCapacity});
        EXPECT_EQ(generate_plain(ctx, pc, prompt, go, {}, c.get()).tokens, want) << j.at("id");
        SourceSpec spec;
        parse_source_kind("ngram", spec);
        auto src = make_guess_source(spec, *m, kCapacity);
        SpeculativeOptions so;
        so.generate = go;
        so.k = 8;
        KvCache sc(*m, {kCapacity});
        c->reset();
        EXPECT_EQ(generate_speculative(ctx, sc, prompt, *src, so, {}, c.get()).tokens, want) << j.at("id");
    }
}
