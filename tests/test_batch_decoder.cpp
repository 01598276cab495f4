// The batch decoder is lossless per request: every request's tokens and stop reason equal its own
// plain, unbatched generate_plain output (greedy and seeded sampling, with and without guesses),
// while requests join and leave between passes; a failing or cancelled request ends alone; the
// KV budget and the pass size refuse admission with a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/model.h"
#include "rewind/speculate/batch_decoder.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/draft_source.h"
#include "rewind/speculate/ngram_source.h"

using namespace rwd;
using namespace rwd::speculate;

namespace {

std::shared_ptr<const Model> load(const std::string& name) {
    static std::map<std::string, std::shared_ptr<const Model>> cache;
    auto& m = cache[name];
    if (!m) m = Model::load(name == "bundled" ? std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf"
                                               : std::string(REWIND_SHARED_DIR) + "/models/" + name + ".gguf");
    return m;
}

const char* kTexts[] = {
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(",
    "import os\nimport sys\n\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n        self.items.append(x)\n\n    def pop(self):\n",
    "for i in range(10):\n    print(i)\nfor j in range(",
    "x",
    "    if key in self._cache:\n        return self._cache[key]\n    value = self._compute(key)\n    self._cache[key] = value\n",
};

struct Spec {
    int text;
    int64_t max_tokens;
    bool sampled;
    int k; // 0: no guess source
    KPolicy policy = KPolicy::Fixed;
};

GenerateOptions options_of(const Spec& s, uint64_t seed) {
    GenerateOptions g;
    g.max_tokens = s.max_tokens;
    if (s.sampled) {
        g.sampler.temperature = 0.8f;
        g.sampler.top_k = 40;
        g.sampler.seed = seed;
    }
    return g;
}

BatchRequest request_of(const Model& m, const Spec& s, uint64_t seed) {
    BatchRequest r;
    r.prompt = m.tokenizer().encode(kTexts[s.text]);
    r.generate = options_of(s, seed);
    if (s.k > 0) {
        r.source = std::make_unique<NgramSource>();
        r.k = s.k;
        r.k_policy = s.policy;
    }
    return r;
}

GenerateResult plain(Context& ctx, const Model& m, const Spec& s, uint64_t seed) {
    KvCache cache(m);
    return generate_plain(ctx, cache, m.tokenizer().encode(kTexts[s.text]), options_of(s, seed));
}

// Runs specs with at most `concurrency` active at once (admitting as slots free up); results by id.
std::map<uint64_t, BatchResult> run_all(BatchDecoder& dec, const Model& m, const std::vector<Spec>& specs,
                                        size_t concurrency, std::vector<uint64_t>& ids) {
    std::map<uint64_t, BatchResult> out;
    size_t next = 0;
    while (next < specs.size() || !dec.idle()) {
        while (next < specs.size() && dec.active() < concurrency) {
            ids.push_back(dec.submit(request_of(m, specs[next], 100 + next)));
            ++next;
        }
        for (BatchResult& r : dec.step()) out[r.id] = std::move(r);
    }
    return out;
}

class BatchDecoding : public ::testing::TestWithParam<const char*> {};

TEST_P(BatchDecoding, EveryRequestEqualsItsOwnPlainDecoding) {
    auto model = load(GetParam());
    Context ctx(model, {.n_threads = 2, .max_batch = 64});
    Context solo(model, {.n_threads = 1, .max_batch = 64});
    const std::vector<Spec> specs = {
        {0, 40, false, 4},
        {1, 25, true, 0},
        {2, 60, false, 8, KPolicy::Adaptive},
        {3, 30, true, 5},
        {4, 12, false, 0},
        {5, 50, true, 3, KPolicy::Adaptive},
        {0, 33, true, 6},
        {2, 0, false, 4}, // nothing to generate
    };
    // Default options, then small prompt chunks and a tight pass budget (guesses trimmed).
    // The cost model drops guesses by timing (speed only): outputs must not change either way.
    for (const BatchOptions& bo : {BatchOptions{}, BatchOptions{.prefill_chunk = 7, .pass_tokens = 6},
                                   BatchOptions{.cost_model = true}})
    for (size_t concurrency : {size_t(1), size_t(3), size_t(8)}) {
        SCOPED_TRACE("concurrency " + std::to_string(concurrency) + ", prefill_chunk " +
                     std::to_string(bo.prefill_chunk) + ", pass_tokens " + std::to_string(bo.pass_tokens));
        BatchDecoder dec(ctx, bo);
        std::vector<uint64_t> ids;
        const auto results = run_all(dec, *model, specs, concurrency, ids);
        ASSERT_EQ(results.size(), specs.size());
        EXPECT_EQ(dec.kv_bytes_in_use(), 0u);
        int64_t accepted = 0;
        for (size_t i = 0; i < specs.size(); ++i) {
            const BatchResult& r = results.at(ids[i]);
            const GenerateResult want = plain(solo, *model, specs[i], 100 + i);
            EXPECT_FALSE(r.failed) << r.error;
            EXPECT_EQ(r.tokens, want.tokens) << "request " << i;
            EXPECT_EQ(r.stop, want.stop) << "request " << i;
            EXPECT_EQ(r.stats.emitted, static_cast<int64_t>(r.tokens.size()));
            accepted += r.stats.accepted;
        }
        if (!bo.cost_model) {
            EXPECT_GT(accepted, 0) << "the n-gram source should land some guesses";
        }
        if (concurrency > 1) {
            EXPECT_LT(dec.passes(), 200) << "requests should share passes";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Models, BatchDecoding, ::testing::Values("pycode-4m", "bundled"),
                         [](const auto& info) { return std::string(info.param) == "bundled" ? "q8_0" : "f32"; });

// Rejection-sampling verification in a batch: each request's tokens equal those of the
// speculative decoder alone with the same source, options and k (both judge through the same
// core, with randomness keyed by position), for a draft source that reports its distributions
// and an n-gram source whose guesses are point masses.
TEST(BatchDecoder, RejectionModeEqualsSpeculativeDecodingAlone) {
    auto target = load("pycode-4m");
    auto draft = load("pycode-600k");
    // Room for every guess of every request in every pass: in rejection mode the tokens drawn
    // depend on how many guesses a pass verifies, so none may be trimmed for this comparison.
    Context ctx(target, {.n_threads = 2, .max_batch = 256});
    Context solo(target, {.n_threads = 1, .max_batch = 256});
    struct Case {
        int text;
        int64_t max_tokens;
        bool use_draft;
        int k;
    };
    const std::vector<Case> cases = {{0, 40, true, 4}, {2, 30, false, 5}, {3, 35, true, 3}, {5, 25, false, 6}};
    auto options = [](const Case& c, size_t i) {
        GenerateOptions g;
        g.max_tokens = c.max_tokens;
        g.sampler.temperature = 0.8f;
        g.sampler.top_k = 40;
        g.sampler.seed = 7 + i;
        return g;
    };
    auto source = [&](const Case& c, int64_t capacity) -> std::unique_ptr<GuessSource> {
        if (c.use_draft) return std::make_unique<DraftSource>(draft, *target, capacity);
        return std::make_unique<NgramSource>();
    };
    BatchDecoder dec(ctx, {.prefill_chunk = 256});
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < cases.size(); ++i) {
        BatchRequest r;
        r.prompt = target->tokenizer().encode(kTexts[cases[i].text]);
        r.generate = options(cases[i], i);
        r.source = source(cases[i], static_cast<int64_t>(r.prompt.size()) + cases[i].max_tokens);
        r.k = cases[i].k;
        r.verify = VerifyMode::Rejection;
        ids.push_back(dec.submit(std::move(r)));
    }
    std::map<uint64_t, BatchResult> out;
    while (!dec.idle())
        for (BatchResult& r : dec.step()) out[r.id] = std::move(r);
    int64_t accepted = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const std::vector<TokenId> prompt = target->tokenizer().encode(kTexts[cases[i].text]);
        const int64_t capacity = static_cast<int64_t>(prompt.size()) + cases[i].max_tokens;
        KvCache cache(*target, {.capacity = capacity});
        const auto src = source(cases[i], capacity);
        SpeculativeOptions so;
        so.generate = options(cases[i], i);
        so.k = cases[i].k;
        so.verify = VerifyMode::Rejection;
        const SpeculativeResult want = generate_speculative(solo, cache, prompt, *src, so);
        const BatchResult& got = out.at(ids[i]);
        EXPECT_FALSE(got.failed) << got.error;
        EXPECT_EQ(got.tokens, want.tokens) << "request " << i;
        EXPECT_EQ(got.stop, want.stop) << "request " << i;
        EXPECT_EQ(got.stats.accepted, want.stats.accepted) << "request " << i;
        accepted += got.stats.accepted;
    }
    EXPECT_GT(accepted, 0) << "no guess stood: the test would not see the judge";
}

TEST(BatchDecoder, CancelEndsOneRequestOthersGoOn) {
    auto model = load("pycode-4m");
    Context ctx(model, {.n_threads = 1, .max_batch = 64});
    BatchDecoder dec(ctx);
    const std::vector<Spec> specs = {{0, 30, false, 4}, {3, 30, true, 0}, {5, 30, false, 4}};
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < specs.size(); ++i) ids.push_back(dec.submit(request_of(*model, specs[i], 100 + i)));
    std::map<uint64_t, BatchResult> out;
    for (int s = 0; s < 3; ++s)
        for (BatchResult& r : dec.step()) out[r.id] = std::move(r);
    EXPECT_TRUE(dec.cancel(ids[1]));
    EXPECT_FALSE(dec.cancel(12345));
    while (!dec.idle())
        for (BatchResult& r : dec.step()) out[r.id] = std::move(r);
    EXPECT_FALSE(dec.cancel(ids[1])) << "retired";
    ASSERT_EQ(out.size(), 3u);
    for (size_t i = 0; i < specs.size(); ++i) {
        const BatchResult& r = out.at(ids[i]);
        const GenerateResult want = plain(ctx, *model, specs[i], 100 + i);
        if (i == 1) {
            EXPECT_EQ(r.stop, StopReason::Cancelled);
            ASSERT_EQ(r.tokens.size(), 2u) << "the prompt, then one token per plain pass: three passes";
            EXPECT_TRUE(std::equal(r.tokens.begin(), r.tokens.end(), want.tokens.begin()));
        } else {
            EXPECT_NE(r.stop, StopReason::Cancelled);
            EXPECT_EQ(r.tokens, want.tokens);
            EXPECT_EQ(r.stop, want.stop);
        }
    }
}

// A source that throws on its n-th proposal.
class FailingSource final : public GuessSource {
public:
    explicit FailingSource(int fail_at) : fail_at_(fail_at) {}
    std::string_view name() const override { return "failing"; }
    void reset(const GenerationStart&) override {}
    void propose(std::span<const TokenId>, int, Proposal& out) override {
        if (++calls_ == fail_at_) throw Error(ErrorCode::state, "proposal " + std::to_string(calls_) + " broke");
        out.tokens.push_back(7);
    }
    void accept(std::span<const TokenId>) override {}

private:
    int fail_at_, calls_ = 0;
};

TEST(BatchDecoder, FailingRequestEndsAloneWithItsOwnError) {
    auto model = load("pycode-4m");
    Context ctx(model, {.n_threads = 1, .max_batch = 64});
    BatchDecoder dec(ctx);
    const std::vector<Spec> specs = {{0, 20, false, 4}, {2, 20, true, 0}, {5, 20, false, 3}};
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < specs.size(); ++i) {
        BatchRequest r = request_of(*model, specs[i], 100 + i);
        if (i == 1) {
            r.source = std::make_unique<FailingSource>(3);
            r.k = 2;
        }
        ids.push_back(dec.submit(std::move(r)));
    }
    std::map<uint64_t, BatchResult> out;
    while (!dec.idle())
        for (BatchResult& r : dec.step()) out[r.id] = std::move(r);
    ASSERT_EQ(out.size(), 3u);
    const BatchResult& bad = out.at(ids[1]);
    EXPECT_TRUE(bad.failed);
    EXPECT_EQ(bad.error_code, ErrorCode::state);
    EXPECT_NE(bad.error.find("failing"), std::string::npos) << bad.error;
    EXPECT_NE(bad.error.find("proposal 3 broke"), std::string::npos) << bad.error;
    const GenerateResult bad_plain = plain(ctx, *model, specs[1], 101);
    ASSERT_LE(bad.tokens.size(), bad_plain.tokens.size());
    EXPECT_TRUE(std::equal(bad.tokens.begin(), bad.tokens.end(), bad_plain.tokens.begin())) << "what it emitted stands";
    for (size_t i : {size_t(0), size_t(2)}) {
        const BatchResult& r = out.at(ids[i]);
        EXPECT_FALSE(r.failed) << r.error;
        EXPECT_EQ(r.tokens, plain(ctx, *model, specs[i], 100 + i).tokens);
    }
}

ErrorCode refused_code(BatchDecoder& dec, BatchRequest r) {
    const size_t active = dec.active();
    const uint64_t bytes = dec.kv_bytes_in_use();
    try {
        dec.submit(std::move(r));
    } catch (const Error& e) {
        EXPECT_EQ(dec.active(), active);
        EXPECT_EQ(dec.kv_bytes_in_use(), bytes);
        EXPECT_FALSE(std::string(e.what()).empty());
        return e.code();
    }
    ADD_FAILURE() << "admitted";
    return ErrorCode::io;
}

TEST(BatchDecoder, AdmissionRefusalsAreClearAndChangeNothing) {
    auto model = load("pycode-4m");
    Context ctx(model, {.n_threads = 1, .max_batch = 3});
    const Spec s{0, 20, false, 2};
    BatchDecoder probe(ctx);
    const int64_t positions = static_cast<int64_t>(model->tokenizer().encode(kTexts[0]).size()) + 20;
    // Room for two such requests, not three.
    BatchDecoder dec(ctx, {.kv_budget_bytes = 2 * probe.kv_bytes_for(positions) + 100});
    const uint64_t a = dec.submit(request_of(*model, s, 1));
    dec.submit(request_of(*model, s, 2));
    EXPECT_EQ(dec.kv_bytes_in_use(), 2 * dec.kv_bytes_for(positions));
    EXPECT_EQ(refused_code(dec, request_of(*model, s, 3)), ErrorCode::capacity);

    BatchRequest empty = request_of(*model, s, 4);
    empty.prompt.clear();
    EXPECT_EQ(refused_code(dec, std::move(empty)), ErrorCode::argument);
    BatchRequest bad_id = request_of(*model, s, 4);
    bad_id.prompt.push_back(static_cast<TokenId>(model->n_vocab()));
    EXPECT_EQ(refused_code(dec, std::move(bad_id)), ErrorCode::argument);
    BatchRequest bad_k = request_of(*model, s, 4);
    bad_k.k = 0;
    EXPECT_EQ(refused_code(dec, std::move(bad_k)), ErrorCode::argument);
    BatchRequest bad_sampler = request_of(*model, s, 4);
    bad_sampler.generate.sampler.top_p = 2.0f;
    EXPECT_EQ(refused_code(dec, std::move(bad_sampler)), ErrorCode::argument);
    BatchRequest too_long = request_of(*model, s, 4);
    too_long.prompt.assign(static_cast<size_t>(model->hparams().n_ctx_train + 1), too_long.prompt.back());
    EXPECT_EQ(refused_code(dec, std::move(too_long)), ErrorCode::capacity);

    // Cancelling one frees its budget at the next step; a third then fits.
    EXPECT_TRUE(dec.cancel(a));
    const auto retired = dec.step();
    ASSERT_EQ(retired.size(), 1u);
    EXPECT_EQ(retired[0].stop, StopReason::Cancelled);
    EXPECT_TRUE(retired[0].tokens.empty());
    EXPECT_NO_THROW(dec.submit(request_of(*model, s, 3)));

    // max_batch 3: at most three active requests (each needs a row of every pass).
    BatchDecoder unlimited(ctx);
    for (int i = 0; i < 3; ++i) unlimited.submit(request_of(*model, s, 10 + i));
    EXPECT_EQ(refused_code(unlimited, request_of(*model, s, 20)), ErrorCode::capacity);
    // Three at once in a pass of 3 rows: guesses only in rows the others' prompt chunks leave
    // free, still lossless.
    std::map<uint64_t, BatchResult> out;
    while (!unlimited.idle())
        for (BatchResult& r : unlimited.step()) out[r.id] = std::move(r);
    Context solo(model, {.n_threads = 1, .max_batch = 64});
    for (auto& [id, r] : out) {
        EXPECT_EQ(r.tokens, plain(solo, *model, s, 10 + (id - 1)).tokens);
    }
}

// A request admitted while others decode runs its prompt in chunks inside their passes: the
// running requests emit a token in every one of those passes, each pass holds at most
// prefill_chunk prompt tokens, and every request still equals its own plain decoding.
TEST(BatchDecoder, PromptsRunInChunksInsideDecodePasses) {
    auto model = load("pycode-4m");
    Context ctx(model, {.n_threads = 2, .max_batch = 64});
    Context solo(model, {.n_threads = 1, .max_batch = 64});
    const int64_t chunk = 5;
    // A tight pass budget: guesses get trimmed in the very passes that end a prompt.
    BatchDecoder dec(ctx, {.prefill_chunk = chunk, .pass_tokens = 3});
    const std::vector<Spec> specs = {{4, 60, false, 0}, {0, 40, true, 0}, {2, 30, false, 4}, {5, 25, true, 3}};
    std::vector<uint64_t> ids;
    std::map<uint64_t, BatchResult> out;
    ids.push_back(dec.submit(request_of(*model, specs[0], 100)));
    for (BatchResult& r : dec.step()) out[r.id] = std::move(r); // "x": one token of prompt, first token
    // Admit the others one by one; while each prefills, the running request gains a token per pass.
    int64_t chunked_passes = 0;
    for (size_t i = 1; i < specs.size(); ++i) {
        ids.push_back(dec.submit(request_of(*model, specs[i], 100 + i)));
        const int64_t prompt = static_cast<int64_t>(model->tokenizer().encode(kTexts[specs[i].text]).size());
        ASSERT_GT(prompt, 2 * chunk) << "the test wants prompts of several chunks";
        for (int64_t p = 0; p < (prompt + chunk - 1) / chunk - 1; ++p) {
            const uint64_t before = ctx.tokens_processed();
            const int64_t live = static_cast<int64_t>(dec.active()) - 1;
            for (BatchResult& r : dec.step()) out[r.id] = std::move(r);
            const auto rows = static_cast<int64_t>(ctx.tokens_processed() - before);
            EXPECT_GE(rows, chunk) << "a full chunk of the new prompt";
            EXPECT_LE(rows, chunk + live * (1 + 4)) << "at most one chunk of prompt per pass";
            ++chunked_passes;
        }
    }
    EXPECT_GT(chunked_passes, 10);
    while (!dec.idle())
        for (BatchResult& r : dec.step()) out[r.id] = std::move(r);
    ASSERT_EQ(out.size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
        const BatchResult& r = out.at(ids[i]);
        const GenerateResult want = plain(solo, *model, specs[i], 100 + i);
        EXPECT_FALSE(r.failed) << r.error;
        EXPECT_EQ(r.tokens, want.tokens) << "request " << i;
        EXPECT_EQ(r.stop, want.stop) << "request " << i;
        if (i > 0) {
            EXPECT_GT(r.stats.prompt_seconds, 0.0) << "request " << i;
        }
    }
    // The first request ran throughout: it emitted in every pass until it retired.
    EXPECT_EQ(out.at(ids[0]).stats.passes, static_cast<int64_t>(out.at(ids[0]).tokens.size()));
}

// Cancelling a request while its prompt is still being run in chunks retires it at the next step
// with no tokens and frees its KV budget; the request decoding beside it goes on unchanged.
TEST(BatchDecoder, CancelDuringPrefillRetiresItAlone) {
    auto model = load("pycode-4m");
    Context ctx(model, {.n_threads = 1, .max_batch = 64});
    BatchDecoder dec(ctx, {.prefill_chunk = 4});
    const Spec runner{4, 20, false, 0}, late{2, 20, true, 3};
    const uint64_t a = dec.submit(request_of(*model, runner, 100));
    std::map<uint64_t, BatchResult> out;
    for (BatchResult& r : dec.step()) out[r.id] = std::move(r);
    const uint64_t bytes = dec.kv_bytes_in_use();
    const uint64_t b = dec.submit(request_of(*model, late, 101));
    for (int s = 0; s < 2; ++s)
        for (BatchResult& r : dec.step()) out[r.id] = std::move(r); // b: 8 of its prompt tokens in
    EXPECT_TRUE(dec.cancel(b));
    const auto retired = dec.step();
    ASSERT_EQ(retired.size(), 1u);
    EXPECT_EQ(retired[0].id, b);
    EXPECT_EQ(retired[0].stop, StopReason::Cancelled);
    EXPECT_TRUE(retired[0].tokens.empty());
    EXPECT_EQ(dec.kv_bytes_in_use(), bytes);
    while (!dec.idle())
        for (BatchResult& r : dec.step()) out[r.id] = std::move(r);
    EXPECT_EQ(out.at(a).tokens, plain(ctx, *model, runner, 100).tokens);
}

// pass_tokens caps pending tokens + guesses per pass: guesses are dropped (least likely to
// stand first), never a request's own next token, and nothing changes in any output.
TEST(BatchDecoder, PassTokenBudgetTrimsGuessesOnly) {
    auto model = load("pycode-4m");
    Context ctx(model, {.n_threads = 1, .max_batch = 256});
    Context solo(model, {.n_threads = 1, .max_batch = 64});
    const std::vector<Spec> specs = {{0, 40, false, 6}, {2, 40, false, 6}, {5, 40, true, 6}, {3, 40, false, 6}};
    for (int64_t budget : {int64_t(4), int64_t(6), int64_t(1)}) {
        SCOPED_TRACE("pass_tokens " + std::to_string(budget));
        BatchDecoder dec(ctx, {.prefill_chunk = 256, .pass_tokens = budget});
        std::vector<uint64_t> ids;
        for (size_t i = 0; i < specs.size(); ++i) ids.push_back(dec.submit(request_of(*model, specs[i], 100 + i)));
        std::map<uint64_t, BatchResult> out;
        for (BatchResult& r : dec.step()) out[r.id] = std::move(r); // every prompt whole, a first token each
        while (!dec.idle()) {
            const uint64_t before = ctx.tokens_processed();
            const auto live = static_cast<int64_t>(dec.active());
            for (BatchResult& r : dec.step()) out[r.id] = std::move(r);
            EXPECT_LE(static_cast<int64_t>(ctx.tokens_processed() - before), std::max(budget, live));
        }
        int64_t proposed = 0;
        for (size_t i = 0; i < specs.size(); ++i) {
            const BatchResult& r = out.at(ids[i]);
            EXPECT_EQ(r.tokens, plain(solo, *model, specs[i], 100 + i).tokens) << "request " << i;
            proposed += r.stats.proposed;
        }
        if (budget <= 4) {
            EXPECT_EQ(proposed, 0) << "no row left for a guess while all four run";
        } else {
            EXPECT_GT(proposed, 0);
        }
    }
}

// A request whose prompt starts like an active request's copies that prefix of its cache instead
// of running it again, and still equals its own plain decoding.
TEST(BatchDecoder, SharedPromptPrefixIsCopiedNotRecomputed) {
    auto model = load("pycode-4m");
    Context ctx(model, {.n_threads = 1, .max_batch = 64});
    Context solo(model, {.n_threads = 1, .max_batch = 64});
    const Tokenizer& tok = model->tokenizer();
    const std::string base = kTexts[2];
    const std::vector<std::string> prompts = {base, base, base + "        return self.items.pop()\n", "import os\n"};
    auto request = [&](const std::string& text, bool sampled) {
        BatchRequest r;
        r.prompt = tok.encode(text);
        r.generate.max_tokens = 20;
        if (sampled) {
            r.generate.sampler.temperature = 0.8f;
            r.generate.sampler.seed = 7;
        }
        return r;
    };
    uint64_t rows[2] = {0, 0};    // [share]: tokens run through the context
    int64_t copied[2] = {0, 0};   // [share]: prompt positions copied
    for (bool share : {true, false}) {
        SCOPED_TRACE(share ? "sharing" : "not sharing");
        BatchDecoder dec(ctx, {.prefill_chunk = 16, .share_prefixes = share});
        const uint64_t t0 = ctx.tokens_processed();
        std::vector<uint64_t> ids;
        std::map<uint64_t, BatchResult> out;
        ids.push_back(dec.submit(request(prompts[0], false)));
        for (int s = 0; s < 2; ++s) // part of the first prompt is in
            for (BatchResult& r : dec.step()) out[r.id] = std::move(r);
        for (size_t i = 1; i < prompts.size(); ++i) ids.push_back(dec.submit(request(prompts[i], i == 2)));
        while (!dec.idle())
            for (BatchResult& r : dec.step()) out[r.id] = std::move(r);
        int64_t shared = 0;
        for (size_t i = 0; i < prompts.size(); ++i) {
            const BatchResult& r = out.at(ids[i]);
            KvCache c(*model);
            const GenerateResult want = generate_plain(solo, c, tok.encode(prompts[i]), request(prompts[i], i == 2).generate);
            EXPECT_EQ(r.tokens, want.tokens) << "request " << i;
            shared += r.prompt_tokens_shared;
        }
        const auto P = static_cast<int64_t>(tok.encode(base).size());
        if (share) {
            EXPECT_EQ(out.at(ids[0]).prompt_tokens_shared, 0);
            EXPECT_EQ(out.at(ids[1]).prompt_tokens_shared, 32) << "what the first had run by then";
            EXPECT_GE(out.at(ids[2]).prompt_tokens_shared, 32);
            EXPECT_LE(out.at(ids[2]).prompt_tokens_shared, P);
            EXPECT_EQ(out.at(ids[3]).prompt_tokens_shared, 1) << "BOS";
        } else {
            EXPECT_EQ(shared, 0);
        }
        rows[share] = ctx.tokens_processed() - t0;
        copied[share] = shared;
    }
    EXPECT_EQ(rows[0] - rows[1], static_cast<uint64_t>(copied[1])) << "every copied position is one not run";
}

TEST(BatchDecoder, RefusesBadOptions) {
    auto model = load("pycode-600k");
    Context ctx(model, {.n_threads = 1, .max_batch = 8});
    for (const BatchOptions& o : {BatchOptions{.prefill_chunk = 0}, BatchOptions{.pass_tokens = -1},
                                  BatchOptions{.pass_fixed_seconds = -1}, BatchOptions{.pass_row_seconds = NAN},
                                  BatchOptions{.pass_fixed_seconds = INFINITY, .pass_row_seconds = 1}}) {
        try {
            BatchDecoder dec(ctx, o);
            ADD_FAILURE() << "accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::argument);
            EXPECT_NE(std::string(e.what()).find("must be"), std::string::npos) << e.what();
        }
    }
}

TEST(BatchDecoder, RefusesLlamaCppNumerics) {
    auto model = load("pycode-600k");
    Context ctx(model, {.n_threads = 1, .max_batch = 8, .numerics = Numerics::LlamaCpp});
    try {
        BatchDecoder dec(ctx);
        ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::state);
    }
}

} // namespace

namespace {

// Every request's tokens and speculation counts, by submission order.
struct Decisions {
    std::vector<std::vector<TokenId>> tokens;
    std::vector<int64_t> proposed, accepted, passes;
};

Decisions run_decisions(Context& ctx, const Model& m, const std::vector<Spec>& specs, const BatchOptions& bo) {
    BatchDecoder dec(ctx, bo);
    std::vector<uint64_t> ids;
    const auto out = run_all(dec, m, specs, specs.size(), ids);
    Decisions d;
    for (uint64_t id : ids) {
        const BatchResult& r = out.at(id);
        EXPECT_FALSE(r.failed) << r.error;
        d.tokens.push_back(r.tokens);
        d.proposed.push_back(r.stats.proposed);
        d.accepted.push_back(r.stats.accepted);
        d.passes.push_back(r.stats.passes);
    }
    return d;
}

} // namespace

// With a fixed pass cost (a + b * rows, no timing involved), the cost model's choices are the
// same on every run and follow the cost: rows that cost far more than the fixed part buy no
// guess at all; nearly free rows keep every guess (as without the cost model); in between,
// some. The tokens never change.
TEST(BatchDecoder, CostModelWithAFixedPassCostDecidesDeterministically) {
    auto model = load("pycode-4m");
    // Every prompt whole in the first pass (then a pass's rows are its requests' own and their
    // guesses: with a prompt chunk in the same pass, a guess is cheap beside it and may stay).
    Context ctx(model, {.n_threads = 2, .max_batch = 256});
    Context solo(model, {.n_threads = 1, .max_batch = 64});
    const std::vector<Spec> specs = {{0, 40, false, 6}, {2, 40, false, 6}, {3, 40, false, 6}, {5, 40, false, 6}};
    std::vector<std::vector<TokenId>> want;
    for (size_t i = 0; i < specs.size(); ++i) want.push_back(plain(solo, *model, specs[i], 100 + i).tokens);

    const Decisions free_rows = run_decisions(ctx, *model, specs, {.prefill_chunk = 256, .cost_model = false});
    const Decisions cheap = run_decisions(
        ctx, *model, specs,
        {.prefill_chunk = 256, .cost_model = true, .pass_fixed_seconds = 1.0, .pass_row_seconds = 1e-9});
    const Decisions dear = run_decisions(
        ctx, *model, specs,
        {.prefill_chunk = 256, .cost_model = true, .pass_fixed_seconds = 1e-3, .pass_row_seconds = 1.0});
    const BatchOptions mid{
        .prefill_chunk = 256, .cost_model = true, .pass_fixed_seconds = 0.03, .pass_row_seconds = 0.003};
    const Decisions mid1 = run_decisions(ctx, *model, specs, mid);
    const Decisions mid2 = run_decisions(ctx, *model, specs, mid);
    int64_t p_free = 0, p_mid = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        SCOPED_TRACE("request " + std::to_string(i));
        for (const Decisions* d : {&free_rows, &cheap, &dear, &mid1, &mid2}) EXPECT_EQ(d->tokens[i], want[i]);
        EXPECT_EQ(cheap.proposed[i], free_rows.proposed[i]);
        EXPECT_EQ(cheap.passes[i], free_rows.passes[i]);
        EXPECT_EQ(dear.proposed[i], 0) << "a guess's row costs more than any token it could bring";
        EXPECT_EQ(dear.passes[i], static_cast<int64_t>(want[i].size()));
        EXPECT_EQ(mid1.proposed[i], mid2.proposed[i]);
        EXPECT_EQ(mid1.accepted[i], mid2.accepted[i]);
        EXPECT_EQ(mid1.passes[i], mid2.passes[i]);
        p_free += free_rows.proposed[i];
        p_mid += mid1.proposed[i];
    }
    EXPECT_GT(p_mid, 0) << "a likely first guess pays for its row at a = 10 b";
    EXPECT_LT(p_mid, p_free) << "unlikely guesses are dropped at a = 10 b";
}

// The decoding passes are counted by the number of requests they carried, and add up to the
// totals: four requests admitted together (their prompts in the first pass) decode four at a
// time until the shortest retires.
TEST(BatchDecoder, DecodePassesAreCountedByRequestsCarried) {
    auto model = load("pycode-4m");
    Context ctx(model, {.n_threads = 1, .max_batch = 256});
    BatchDecoder dec(ctx, {.prefill_chunk = 256});
    const std::vector<Spec> specs = {{0, 10, false, 0}, {2, 20, false, 0}, {3, 30, false, 0}, {5, 40, false, 0}};
    for (size_t i = 0; i < specs.size(); ++i) dec.submit(request_of(*model, specs[i], 100 + i));
    int64_t emitted = 0;
    while (!dec.idle())
        for (const BatchResult& r : dec.step()) emitted += static_cast<int64_t>(r.tokens.size());
    ASSERT_EQ(emitted, 100);
    const auto lv = dec.decode_levels();
    ASSERT_EQ(lv.size(), 257u);
    // Pass 1: every prompt but its last token. Then 10 passes of four (the first request's 10
    // tokens), 10 of three, 10 of two, 10 of one.
    EXPECT_EQ(dec.decode_passes(), 40);
    EXPECT_EQ(lv[4].passes, 10);
    EXPECT_EQ(lv[3].passes, 10);
    EXPECT_EQ(lv[2].passes, 10);
    EXPECT_EQ(lv[1].passes, 10);
    EXPECT_EQ(lv[4].tokens, 40);
    EXPECT_EQ(lv[4].rows, 40) << "plain decoding: one row per request";
    int64_t passes = 0, tokens = 0;
    double seconds = 0;
    for (const DecodeLevel& l : lv) {
        passes += l.passes;
        tokens += l.tokens;
        seconds += l.seconds;
    }
    EXPECT_EQ(passes, dec.decode_passes());
    EXPECT_EQ(tokens, dec.decode_tokens());
    EXPECT_NEAR(seconds, dec.decode_seconds(), 1e-9 * (1 + dec.decode_seconds()));
    EXPECT_EQ(tokens, 100);
}
