// Log-probabilities are exact under speculation: from the row that decided each token, so
// speculative (every k, chains, trees), batched and multi-threaded decoding report plain decoding's
// bits (memcmp), raw or processed, with and without a constraint and penalties.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "constraint_test_util.h"
#include "model_test_util.h"
#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/logprobs.h"
#include "rewind/speculate/batch_decoder.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/source_factory.h"

using namespace rwd;
using namespace rwd::speculate;
using rwd::constraint_test::PieceConstraint;

namespace {

constexpr int64_t kCapacity = 512;
const char* const kPrompt = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n";

std::shared_ptr<const Model> target() { return model_test::load("pycode-4m"); }

bool same_bits(const std::vector<TokenLogprob>& a, const std::vector<TokenLogprob>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(TokenLogprob)) == 0);
}

GenerateOptions options(float temp, bool processed, int top_n = 5) {
    GenerateOptions go;
    go.max_tokens = 48;
    go.sampler.temperature = temp;
    go.sampler.seed = 5;
    go.logprobs = {.enabled = true, .top_n = top_n, .processed = processed};
    return go;
}

std::unique_ptr<GuessSource> source_of(const std::string& kind, int branches) {
    SourceSpec spec;
    parse_source_kind(kind, spec);
    if (kind == "draft") spec.draft = model_test::load("pycode-600k");
    spec.branches = branches;
    return make_guess_source(spec, *target(), kCapacity);
}

} // namespace

TEST(Logprobs, ComputeLogprobIsALogSoftmaxWithSortedAlternatives) {
    const std::vector<float> row = {1.0f, 3.0f, 3.0f, -std::numeric_limits<float>::infinity(), 0.5f};
    TokenLogprob out;
    compute_logprob(row, 1.0, 2, 3, out);
    double z = 0;
    for (float l : row) z += std::exp(static_cast<double>(l));
    EXPECT_NEAR(out.logprob, 3.0 - std::log(z), 1e-6);
    ASSERT_EQ(out.n_top, 3);
    EXPECT_EQ(out.top[0].token, 1); // ties: lower id first
    EXPECT_EQ(out.top[1].token, 2);
    EXPECT_EQ(out.top[2].token, 0);
    compute_logprob(row, 1.0, 3, 0, out);
    EXPECT_EQ(out.logprob, -std::numeric_limits<float>::infinity());
    EXPECT_EQ(out.n_top, 0);
    compute_logprob(row, 0.5, 1, 1, out); // temperature 2
    double z2 = 0;
    for (float l : row) z2 += std::exp(0.5 * static_cast<double>(l));
    EXPECT_NEAR(out.logprob, 1.5 - std::log(z2), 1e-6);
}

// Plain decoding: one entry per token; greedy's token is its row's most likely; the processed
// distribution under a constraint gives forbidden tokens -inf.
TEST(Logprobs, PlainDecodingReportsEachTokensRow) {
    const auto m = target();
    Context ctx(m);
    const auto prompt = m->tokenizer().encode(kPrompt);
    KvCache cache(*m, {kCapacity});
    const GenerateResult g = generate_plain(ctx, cache, prompt, options(0.0f, false));
    ASSERT_EQ(g.logprobs.size(), g.tokens.size());
    for (size_t i = 0; i < g.tokens.size(); ++i) {
        EXPECT_EQ(g.logprobs[i].token, g.tokens[i]);
        ASSERT_EQ(g.logprobs[i].n_top, 5);
        EXPECT_EQ(g.logprobs[i].top[0].token, g.tokens[i]);
        EXPECT_EQ(g.logprobs[i].top[0].logprob, g.logprobs[i].logprob);
        EXPECT_LE(g.logprobs[i].logprob, 0.0f);
    }
    PieceConstraint c(m->tokenizer(), constraint_test::python_function());
    cache.truncate(0);
    const GenerateResult p = generate_plain(ctx, cache, prompt, options(0.8f, true, 20), {}, &c);
    ASSERT_EQ(p.logprobs.size(), p.tokens.size());
    PieceConstraint replay(m->tokenizer(), constraint_test::python_function());
    for (size_t i = 0; i < p.tokens.size(); ++i) {
        EXPECT_GT(p.logprobs[i].logprob, -std::numeric_limits<float>::infinity());
        for (const TopLogprob& a : p.logprobs[i].alternatives())
            if (a.logprob > -std::numeric_limits<float>::infinity()) {
                EXPECT_TRUE(replay.allows(a.token)) << i;
            }
        ASSERT_TRUE(replay.accept(p.tokens[i]));
    }
    // Out of range: refused before anything runs.
    GenerateOptions bad = options(0.0f, false, LogprobOptions::kMaxTop + 1);
    cache.truncate(0);
    EXPECT_THROW(generate_plain(ctx, cache, prompt, bad), Error);
}

// Speculative decoding reports plain decoding's bits: sources, k, chains and trees, greedy and
// seeded, raw and processed, with a constraint and penalties, on one and two threads.
TEST(Logprobs, SpeculativeEqualsPlainBitForBit) {
    const auto m = target();
    Context one(m, {.n_threads = 1}), two(m, {.n_threads = 2});
    const auto prompt = m->tokenizer().encode(kPrompt);
    for (const bool constrained : {false, true}) {
        for (const float temp : {0.0f, 0.8f}) {
            for (const bool processed : {false, true}) {
                GenerateOptions go = options(temp, processed);
                go.sampler.repeat_penalty = 1.1f;
                go.sampler.frequency_penalty = 0.3f;
                go.sampler.presence_penalty = 0.2f;
                PieceConstraint c(m->tokenizer(), constraint_test::python_function());
                KvCache cache(*m, {kCapacity});
                const GenerateResult plain = generate_plain(one, cache, prompt, go, {}, constrained ? &c : nullptr);
                for (const std::string kind : {"ngram", "draft"}) {
                    for (const int branches : {1, 3}) {
                        auto src = source_of(kind, branches);
                        for (const int k : {1, 4, 8}) {
                            SpeculativeOptions so;
                            so.generate = go;
                            so.k = k;
                            KvCache sc(*m, {kCapacity});
                            c.reset();
                            const auto r = generate_speculative(k == 4 ? two : one, sc, prompt, *src, so, {},
                                                                constrained ? &c : nullptr);
                            ASSERT_EQ(r.tokens, plain.tokens);
                            EXPECT_TRUE(same_bits(r.logprobs, plain.logprobs))
                                << kind << " branches " << branches << " k " << k << " temp " << temp
                                << " processed " << processed << " constrained " << constrained;
                        }
                    }
                }
            }
        }
    }
}

// Batched requests (each with its own options and constraint) report their own plain bits.
TEST(Logprobs, BatchedRequestsEqualPlainBitForBit) {
    const auto m = target();
    Context ctx(m, {.n_threads = 2, .max_batch = 64});
    const auto prompt = m->tokenizer().encode(kPrompt);
    BatchDecoder dec(ctx, {.pass_tokens = 20});
    std::map<uint64_t, int> which;
    auto opts_of = [](int i) {
        GenerateOptions go = options(i % 2 ? 0.8f : 0.0f, i >= 2, 3 + i);
        go.sampler.frequency_penalty = 0.2f * static_cast<float>(i);
        go.sampler.presence_penalty = 0.1f;
        go.sampler.logit_bias = {{7, 1.5f}};
        return go;
    };
    for (int i = 0; i < 4; ++i) {
        BatchRequest req;
        req.prompt = prompt;
        req.generate = opts_of(i);
        if (i != 1) req.constraint = std::make_unique<PieceConstraint>(m->tokenizer(), constraint_test::python_function());
        req.source = source_of(i % 2 ? "draft" : "ngram", 2);
        req.k = 6;
        which[dec.submit(std::move(req))] = i;
    }
    std::map<int, BatchResult> out;
    while (!dec.idle())
        for (BatchResult& r : dec.step()) out[which.at(r.id)] = std::move(r);
    for (int i = 0; i < 4; ++i) {
        PieceConstraint c(m->tokenizer(), constraint_test::python_function());
        KvCache cache(*m, {kCapacity});
        const GenerateResult plain = generate_plain(ctx, cache, prompt, opts_of(i), {}, i != 1 ? &c : nullptr);
        ASSERT_FALSE(out[i].failed) << out[i].error;
        EXPECT_EQ(out[i].tokens, plain.tokens) << i;
        EXPECT_TRUE(same_bits(out[i].logprobs, plain.logprobs)) << i;
    }
}
