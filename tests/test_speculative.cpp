// Speculative decoding is lossless: for every guess source and k, exact verification emits
// exactly generate_plain's tokens (greedy and seeded sampling), stops at the same token, and
// leaves the KV cache bit-identical to a one-token-at-a-time replay. Rejection mode preserves
// the target's distribution (statistical check). Full sweeps: REWIND_LONG_TESTS=1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf_test_util.h"
#include "model_test_util.h"
#include "rewind/context.h"
#include "rewind/gguf.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/model.h"
#include "rewind/speculate/composite_source.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/draft_source.h"
#include "rewind/speculate/ngram_source.h"
#include "rewind/speculate/reference_source.h"
#include "rewind/speculate/source_factory.h"
#include "rewind/speculate/speculative_session.h"

using namespace rwd;
using namespace rwd::speculate;

namespace {

const std::string kShared = REWIND_SHARED_DIR;
constexpr int64_t kCapacity = 512;

struct Item {
    std::string id, prompt;
    std::vector<std::string> references;
    int64_t max_tokens = 0;
};

std::vector<Item> load_items(const std::string& kind) {
    std::ifstream in(kShared + "/workloads/" + kind + ".jsonl");
    if (!in) throw std::runtime_error("cannot open workload " + kind);
    std::vector<Item> items;
    for (std::string line; std::getline(in, line);) {
        if (line.empty()) continue;
        const auto j = nlohmann::json::parse(line);
        Item it;
        it.id = j.at("id").get<std::string>();
        it.prompt = j.at("prompt").get<std::string>();
        if (j.contains("references")) it.references = j.at("references").get<std::vector<std::string>>();
        it.max_tokens = j.at("max_tokens").get<int64_t>();
        items.push_back(std::move(it));
    }
    return items;
}

// Sanitizer builds run ~5x slower: their CI pass checks fewer combinations.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

bool long_tests() {
    const char* v = std::getenv("REWIND_LONG_TESTS");
    return v && std::string(v) == "1";
}

// A source that proposes whatever it was told, for rejection-mode point-mass guesses.
class Scripted final : public GuessSource {
public:
    std::vector<TokenId> guesses;
    std::string_view name() const override { return "scripted"; }
    void reset(const GenerationStart&) override {}
    void propose(std::span<const TokenId>, int k, Proposal& out) override {
        for (int i = 0; i < k && i < static_cast<int>(guesses.size()); ++i) out.tokens.push_back(guesses[static_cast<size_t>(i)]);
    }
    void accept(std::span<const TokenId>) override {}
};

class Speculative : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        target_ = Model::load(kShared + "/models/pycode-4m.gguf");
        draft_ = Model::load(kShared + "/models/pycode-600k.gguf");
    }
    static void TearDownTestSuite() {
        target_.reset();
        draft_.reset();
    }

    // The models a check runs: the fixture's pair unless a test names others.
    struct Pair {
        std::shared_ptr<const Model> target, draft;
        KvType kv = KvType::F32; // the target's and the draft's caches
    };
    Pair pair() const { return {target_, draft_}; }

    // Through the library's factory, as the CLI and the harness build theirs. "auto" gets every
    // member the item allows (references when it has them, and the draft).
    std::unique_ptr<GuessSource> make_source(const std::string& kind, const Item& item, const Pair& p) {
        SourceSpec spec;
        parse_source_kind(kind, spec);
        if (kind == "ref" || kind.starts_with("auto")) spec.references = item.references;
        if (kind == "draft" || kind.starts_with("auto")) spec.draft = p.draft;
        spec.draft_options.cache_type = p.kv;
        return make_guess_source(spec, *p.target, kCapacity);
    }
    std::unique_ptr<GuessSource> make_source(const std::string& kind, const Item& item) {
        return make_source(kind, item, pair());
    }

    std::vector<TokenId> prompt_of(const Item& item) { return target_->tokenizer().encode(item.prompt); }

    // Checks every (source, k, sampling) combination of `items` against generate_plain.
    // max_tokens_cap > 0 shortens the items' generations (the CI subset).
    void check_lossless(const std::vector<Item>& items, const std::vector<int>& ks,
                        const std::vector<std::string>& sources, KPolicy policy = KPolicy::Fixed,
                        int64_t max_tokens_cap = 0) {
        check_lossless(pair(), items, ks, sources, policy, max_tokens_cap);
    }
    void check_lossless(const Pair& p, const std::vector<Item>& items, const std::vector<int>& ks,
                        const std::vector<std::string>& sources, KPolicy policy = KPolicy::Fixed,
                        int64_t max_tokens_cap = 0) {
        const std::shared_ptr<const Model>& target = p.target;
        Context ctx(target);
        KvCache cache(*target, {kCapacity, p.kv});
        for (const Item& item : items) {
            const auto prompt = target->tokenizer().encode(item.prompt);
            for (const float temp : {0.0f, 0.8f}) {
                GenerateOptions go;
                go.max_tokens = max_tokens_cap > 0 ? std::min(item.max_tokens, max_tokens_cap) : item.max_tokens;
                go.sampler.temperature = temp;
                go.sampler.seed = 1234;
                cache.truncate(0);
                const GenerateResult plain = generate_plain(ctx, cache, prompt, go);
                ASSERT_FALSE(plain.tokens.empty());
                for (const std::string& kind : sources) {
                    if (kind == "ref" && item.references.empty()) continue;
                    auto src = make_source(kind, item, p);
                    for (const int k : ks) {
                        SpeculativeOptions so;
                        so.generate = go;
                        so.k = k;
                        so.k_policy = policy;
                        cache.truncate(0);
                        const auto spec = generate_speculative(ctx, cache, prompt, *src, so);
                        ASSERT_EQ(spec.tokens, plain.tokens) << target->hparams().architecture << " " << item.id
                                                             << " source " << kind << " k " << k << " temp " << temp;
                        ASSERT_EQ(spec.stop, plain.stop) << item.id << " " << kind << " k " << k;
                        EXPECT_EQ(spec.stats.emitted, static_cast<int64_t>(plain.tokens.size()));
                        EXPECT_EQ(cache.size(), static_cast<int64_t>(prompt.size() + plain.tokens.size()) - 1);
                    }
                }
            }
        }
    }

    static std::shared_ptr<const Model> target_, draft_;
};
std::shared_ptr<const Model> Speculative::target_;
std::shared_ptr<const Model> Speculative::draft_;

} // namespace

// The CI subset: two items per workload (one under a sanitizer), every source, a spread of k,
// 64 tokens each.
TEST_F(Speculative, LosslessOnWorkloads) {
    for (const std::string kind : {"edit", "ref", "free"}) {
        auto items = load_items(kind);
        items.resize(kSanitized ? 1 : 2);
        check_lossless(items, kSanitized ? std::vector<int>{1, 16} : std::vector<int>{1, 4, 16},
                       {"ngram", "ref", "draft", "auto", "auto-first"}, KPolicy::Fixed, 64);
    }
}

// Every architecture: every source, lossless (the draft is another architecture's file with the
// same pycode vocabulary, or the target itself). qwen2 and gemma3 (whose window of 32 every
// prompt here crosses) get the fuller run.
TEST_F(Speculative, LosslessOnEveryArchitecture) {
    auto arch = [](const std::string& a) { return Model::load(kShared + "/models/arch-" + a + ".gguf"); };
    const auto qwen2 = arch("qwen2"), qwen3 = arch("qwen3"), gemma3 = arch("gemma3"), llama3 = arch("llama3"),
               phi3 = arch("phi3");
    const std::vector<std::string> all = {"ngram", "ref", "draft", "auto"};
    for (const std::string kind : {"edit", "ref", "free"}) {
        auto items = load_items(kind);
        items.resize(1);
        check_lossless({qwen2, qwen3}, items, kSanitized ? std::vector<int>{4} : std::vector<int>{1, 4}, all,
                       KPolicy::Fixed, kSanitized ? 16 : 48);
        check_lossless({gemma3, llama3}, items, kSanitized ? std::vector<int>{4} : std::vector<int>{1, 4}, all,
                       KPolicy::Fixed, kSanitized ? 16 : 48);
    }
    const auto items = std::vector<Item>{load_items("ref").at(0)};
    check_lossless({qwen3, qwen3}, items, {4}, all, KPolicy::Adaptive, kSanitized ? 16 : 32);

    check_lossless({llama3, phi3}, items, {4}, all, KPolicy::Adaptive, kSanitized ? 16 : 32);
    check_lossless({phi3, gemma3}, items, {4}, all, KPolicy::Adaptive, kSanitized ? 16 : 32);
}

// Mixture-of-experts files (make-dummy's qwen3moe and Mixtral-style llama, with the pycode
// vocabulary, so pycode-600k drafts): every source, chains and trees (suffix), fixed, adaptive
// and cost-sized k.
TEST_F(Speculative, LosslessOnExpertModels) {
    const std::vector<std::string> all = {"ngram", "ref", "draft", "auto", "suffix"};
    for (const char* name : {"dummy-qwen3-moe-tiny-q4_k_m", "dummy-mixtral-tiny-q8_0"}) {
        const auto moe = model_test::load(name);
        for (const std::string kind : {"edit", "ref", "free"}) {
            auto items = load_items(kind);
            items.resize(1);
            check_lossless({moe, draft_}, items, kSanitized ? std::vector<int>{4} : std::vector<int>{1, 8}, all,
                           KPolicy::Fixed, kSanitized ? 16 : 40);
        }
        check_lossless({moe, draft_}, {load_items("edit").at(0)}, {4}, all, KPolicy::Adaptive, kSanitized ? 16 : 32);
        // The cost policy sizes each pass by the experts it reads (and may verify no guess).
        check_lossless({moe, draft_}, {load_items("edit").at(0)}, {8}, all, KPolicy::Cost, kSanitized ? 16 : 32);
    }
}

// The CLI's default cache type: exactness holds at a fixed cache type, so with F16 caches too
// every source equals plain decoding (with its F16 cache), on the pycode pair, every dense
// architecture and an expert model.
TEST_F(Speculative, LosslessWithF16Caches) {
    const std::vector<std::string> all = {"ngram", "ref", "draft", "auto", "suffix"};
    auto arch = [](const std::string& a) { return Model::load(kShared + "/models/arch-" + a + ".gguf"); };
    const auto gemma3 = arch("gemma3"), qwen3 = arch("qwen3"), phi3 = arch("phi3"), qwen2 = arch("qwen2"),
               llama3 = arch("llama3");
    const auto moe = model_test::load("dummy-qwen3-moe-tiny-q4_k_m");
    const std::vector<int> ks = kSanitized ? std::vector<int>{4} : std::vector<int>{1, 4};
    const int64_t cap = kSanitized ? 16 : 32;
    for (const std::string kind : {"edit", "ref", "free"}) {
        const std::vector<Item> items = {load_items(kind).at(0)};
        check_lossless({target_, draft_, KvType::F16}, items, kSanitized ? std::vector<int>{4} : std::vector<int>{1, 4, 16},
                       all, KPolicy::Fixed, kSanitized ? 16 : 48);
        check_lossless({gemma3, qwen3, KvType::F16}, items, ks, all, KPolicy::Fixed, cap);
        check_lossless({phi3, llama3, KvType::F16}, items, ks, all, KPolicy::Fixed, cap);
    }
    const std::vector<Item> edit = {load_items("edit").at(0)};
    check_lossless({qwen2, qwen3, KvType::F16}, edit, {4}, all, KPolicy::Adaptive, cap);
    check_lossless({moe, draft_, KvType::F16}, edit, ks, all, KPolicy::Fixed, cap);
}

TEST_F(Speculative, LosslessWithAdaptiveK) {
    for (const std::string kind : {"edit", "ref"}) {
        auto items = load_items(kind);
        items.resize(1);
        check_lossless(items, {16}, {"ngram", "draft", "auto"}, KPolicy::Adaptive);
    }
}

// Everything: all items, k in {1, 2, 4, 8, 16}, fixed and adaptive. Minutes; opt-in.
TEST_F(Speculative, LosslessAllWorkloadsSlow) {
    if (!long_tests()) GTEST_SKIP() << "set REWIND_LONG_TESTS=1";
    for (const std::string kind : {"edit", "ref", "free"}) {
        const auto items = load_items(kind);
        check_lossless(items, {1, 2, 4, 8, 16}, {"ngram", "ref", "draft", "auto"});
        check_lossless(items, {16}, {"ngram", "ref", "draft", "auto"}, KPolicy::Adaptive);
    }
}

// After every pass the cache equals, bit for bit, one built by feeding the text token by token.
TEST_F(Speculative, RollbackLeavesTheCacheAsAReplayWould) {
    const auto item = load_items("edit").at(0);
    const auto prompt = prompt_of(item);
    for (const std::string kind : {"ngram", "draft"}) {
        Context ctx(target_), replay_ctx(target_);
        KvCache cache(*target_, {kCapacity});
        auto src = make_source(kind, item);
        SpeculativeOptions so;
        so.generate.max_tokens = 64;
        so.generate.sampler.temperature = 0.8f;
        so.generate.sampler.seed = 7;
        so.k = 8;
        // Emitted tokens are final, so the replay only ever grows: feed it the new ones singly.
        KvCache replay(*target_, {kCapacity});
        int passes = 0, partial = 0;
        so.on_pass = [&](const PassReport& r) {
            ++passes;
            if (r.accepted < r.proposed) ++partial;
            ASSERT_EQ(r.cache.size(), static_cast<int64_t>(r.tokens.size()) - 1);
            for (auto i = static_cast<size_t>(replay.size()); i + 1 < r.tokens.size(); ++i)
                replay_ctx.forward(replay, r.tokens.subspan(i, 1), Logits::Last);
            ASSERT_TRUE(r.cache.contents_equal(replay)) << kind << " pass " << passes;
        };
        const auto res = generate_speculative(ctx, cache, prompt, *src, so);
        EXPECT_GT(passes, 1);
        EXPECT_GT(partial, 0) << kind << ": no pass rejected a guess, the rollback went untested";
        EXPECT_EQ(res.stats.passes, passes);
    }
}

// Every stop rule ends speculative decoding at plain decoding's token, with plain's cache.
TEST_F(Speculative, StopsExactlyWherePlainDecodingStops) {
    const auto item = load_items("edit").at(1);
    const auto prompt = prompt_of(item);
    Context ctx(target_);
    GenerateOptions base;
    base.max_tokens = 120;
    // Stop strings that the greedy output will contain, found from a plain run.
    KvCache probe(*target_, {kCapacity});
    const auto text = target_->tokenizer().decode(generate_plain(ctx, probe, prompt, base).tokens);
    ASSERT_GT(text.size(), 40u);

    std::vector<std::pair<std::string, GenerateOptions>> cases;
    {
        GenerateOptions o = base;
        o.stop_strings = {text.substr(30, 3)};
        cases.emplace_back("stop string", o);
    }
    {
        GenerateOptions o = base;
        o.max_tokens = 37;
        cases.emplace_back("max tokens", o);
    }
    {
        GenerateOptions o = base;
        o.sampler.temperature = 0.8f;
        o.sampler.seed = 99;
        o.stop_strings = {"\n\n", "):"};
        cases.emplace_back("sampled stop string", o);
    }
    for (const auto& [what, o] : cases) {
        for (const int64_t capacity : {kCapacity, static_cast<int64_t>(prompt.size()) + 20}) {
            KvCache pc(*target_, {capacity});
            const auto plain = generate_plain(ctx, pc, prompt, o);
            for (const int k : {3, 16}) {
                NgramSource src;
                KvCache sc(*target_, {capacity});
                SpeculativeOptions so;
                so.generate = o;
                so.k = k;
                const auto spec = generate_speculative(ctx, sc, prompt, src, so);
                EXPECT_EQ(spec.tokens, plain.tokens) << what << " capacity " << capacity << " k " << k;
                EXPECT_EQ(spec.stop, plain.stop) << what << " capacity " << capacity;
                EXPECT_TRUE(sc.contents_equal(pc)) << what << " capacity " << capacity << " k " << k;
            }
        }
    }
    // A callback that stops after 11 tokens.
    KvCache pc(*target_, {kCapacity}), sc(*target_, {kCapacity});
    int seen = 0;
    const auto plain = generate_plain(ctx, pc, prompt, base, [&](TokenId) { return ++seen < 11; });
    seen = 0;
    NgramSource src;
    SpeculativeOptions so;
    so.generate = base;
    so.k = 8;
    const auto spec = generate_speculative(ctx, sc, prompt, src, so, [&](TokenId) { return ++seen < 11; });
    EXPECT_EQ(spec.tokens, plain.tokens);
    EXPECT_EQ(spec.stop, StopReason::Cancelled);
    EXPECT_EQ(plain.stop, StopReason::Cancelled);
    EXPECT_TRUE(sc.contents_equal(pc));
}

TEST_F(Speculative, ReusesACachedPromptPrefixAndHandlesEdgeCases) {
    const auto item = load_items("free").at(0);
    const auto prompt = prompt_of(item);
    Context ctx(target_);
    GenerateOptions go;
    go.max_tokens = 30;
    KvCache pc(*target_, {kCapacity});
    const auto plain = generate_plain(ctx, pc, prompt, go);
    // The cache already holds most of the prompt.
    KvCache sc(*target_, {kCapacity});
    ctx.forward(sc, std::span<const TokenId>(prompt).first(prompt.size() - 3), Logits::None);
    NgramSource src;
    SpeculativeOptions so;
    so.generate = go;
    const auto spec = generate_speculative(ctx, sc, prompt, src, so);
    EXPECT_EQ(spec.tokens, plain.tokens);
    EXPECT_EQ(spec.prompt_tokens, 3);

    // max_tokens 0, a full cache, and bad calls.
    so.generate.max_tokens = 0;
    sc.truncate(0);
    EXPECT_TRUE(generate_speculative(ctx, sc, prompt, src, so).tokens.empty());
    EXPECT_EQ(sc.size(), static_cast<int64_t>(prompt.size()) - 1);
    so.generate.max_tokens = 10;
    KvCache tiny(*target_, {static_cast<int64_t>(prompt.size())});
    const auto full = generate_speculative(ctx, tiny, prompt, src, so);
    EXPECT_TRUE(full.tokens.empty());
    EXPECT_EQ(full.stop, StopReason::ContextFull);
    EXPECT_THROW(generate_speculative(ctx, sc, {}, src, so), rwd::Error);
    ctx.forward(sc, std::span<const TokenId>(prompt).last(1), Logits::None);
    EXPECT_THROW(generate_speculative(ctx, sc, prompt, src, so), rwd::Error); // cache holds it all
    sc.truncate(0);
    so.k = 0;
    EXPECT_THROW(generate_speculative(ctx, sc, prompt, src, so), rwd::Error);
    so.k = SpeculativeOptions::kMaxK + 1;
    EXPECT_THROW(generate_speculative(ctx, sc, prompt, src, so), rwd::Error);
    const auto other = Model::load(kShared + "/models/pycode-600k.gguf");
    KvCache foreign(*other, {kCapacity});
    so.k = 4;
    EXPECT_THROW(generate_speculative(ctx, foreign, prompt, src, so), rwd::Error);
    // llama.cpp's numerics change with the pass size: refused, the cache untouched.
    Context llama_like(target_, {.n_threads = 1, .max_batch = 64, .numerics = Numerics::LlamaCpp});
    sc.truncate(0);
    EXPECT_THROW(generate_speculative(llama_like, sc, prompt, src, so), rwd::Error);
    EXPECT_EQ(sc.size(), 0);
}

TEST_F(Speculative, StatisticsAddUp) {
    const auto item = load_items("edit").at(0);
    const auto prompt = prompt_of(item);
    Context ctx(target_);
    KvCache cache(*target_, {kCapacity});
    NgramSource src;
    SpeculativeOptions so;
    so.generate.max_tokens = item.max_tokens;
    so.k = 8;
    const auto r = generate_speculative(ctx, cache, prompt, src, so);
    const DecodeStats& s = r.stats;
    EXPECT_EQ(s.emitted, static_cast<int64_t>(r.tokens.size()));
    EXPECT_LE(s.accepted, s.proposed);
    EXPECT_EQ(s.proposed_at.size(), 8u);
    int64_t prop = 0, acc = 0;
    for (size_t i = 0; i < s.proposed_at.size(); ++i) {
        prop += s.proposed_at[i];
        acc += s.accepted_at[i];
        EXPECT_LE(s.accepted_at[i], s.proposed_at[i]);
        if (i > 0) {
            EXPECT_LE(s.accepted_at[i], s.accepted_at[i - 1]); // a guess stands only after its predecessors
        }
    }
    EXPECT_EQ(prop, s.proposed);
    EXPECT_EQ(acc, s.accepted);
    // The edit workload repeats the prompt: prompt lookup must pay off here.
    EXPECT_GT(s.tokens_per_pass(), 1.5);
    EXPECT_LT(s.passes, static_cast<int64_t>(r.tokens.size()));
    EXPECT_LE(s.propose_seconds + s.verify_seconds, s.total_seconds * 1.01 + 1e-4);
    EXPECT_FALSE(format_stats(s).empty());
}

namespace {

// Pearson's chi-square of observed counts against probabilities, bins with an expected count
// below 5 pooled into one; returns {statistic, degrees of freedom}.
std::pair<double, int> chi_square(const std::map<TokenId, int>& counts, const std::vector<float>& p, int n) {
    double stat = 0, pooled_e = 0, pooled_o = 0;
    int bins = 0;
    for (size_t v = 0; v < p.size(); ++v) {
        const double e = p[v] * n;
        const auto it = counts.find(static_cast<TokenId>(v));
        const double o = it == counts.end() ? 0 : it->second;
        if (e < 5) {
            pooled_e += e;
            pooled_o += o;
            continue;
        }
        stat += (o - e) * (o - e) / e;
        ++bins;
    }
    if (pooled_e > 0) {
        stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / std::max(pooled_e, 1.0);
        ++bins;
    }
    return {stat, bins - 1};
}

// A generous critical value: Wilson-Hilferty's chi-square quantile at z = 4.5 (p ~ 3e-6).
double critical(int df) {
    const double d = df, z = 4.5;
    const double t = 1 - 2 / (9 * d) + z * std::sqrt(2 / (9 * d));
    return d * t * t * t;
}

} // namespace

// Rejection sampling keeps the target's distribution: the first two generated tokens of many
// seeded runs follow the target's own next-token probabilities, with a draft model and with
// plain point-mass guesses.
TEST_F(Speculative, RejectionModePreservesTheTargetDistribution) {
    const auto prompt = target_->tokenizer().encode("for i in range(");
    Context ctx(target_);
    SamplerOptions sopt;
    sopt.temperature = 0.8f;
    Sampler sampler(sopt, target_->n_vocab());
    // The target's distribution at the first generated position.
    KvCache c(*target_, {kCapacity});
    std::vector<float> p1;
    sampler.distribution(ctx.forward(c, prompt, Logits::Last).data(), prompt, p1);
    const TokenId top = static_cast<TokenId>(std::max_element(p1.begin(), p1.end()) - p1.begin());
    // ... and at the second, after the most likely first token.
    std::vector<TokenId> prompt2 = prompt;
    prompt2.push_back(top);
    std::vector<float> p2;
    sampler.distribution(ctx.forward(c, std::span<const TokenId>(&top, 1), Logits::Last).data(), prompt2, p2);

    const int runs = long_tests() ? 20000 : 1500;
    // Draft every guess asked for: an unsure draft that skips a position leaves it to plain
    // sampling, which would not test the acceptance rule there.
    DraftSourceOptions every;
    every.min_confidence = 0.0f;
    DraftSource draft(draft_, *target_, kCapacity, every);
    Scripted scripted;
    scripted.guesses = {top, top};
    for (GuessSource* src : std::initializer_list<GuessSource*>{&draft, &scripted}) {
        KvCache cache(*target_, {kCapacity});
        ctx.forward(cache, std::span<const TokenId>(prompt).first(prompt.size() - 1), Logits::None);
        std::map<TokenId, int> first, second;
        int n_second = 0;
        int64_t accepted = 0, proposed = 0;
        for (int seed = 0; seed < runs; ++seed) {
            SpeculativeOptions so;
            so.generate.max_tokens = 3; // the first pass guesses positions 1 and 2
            so.generate.stop_at_eog = false;
            so.generate.sampler = sopt;
            so.generate.sampler.seed = static_cast<uint64_t>(seed);
            so.k = 4;
            so.verify = VerifyMode::Rejection;
            cache.truncate(static_cast<int64_t>(prompt.size()) - 1);
            const auto r = generate_speculative(ctx, cache, prompt, *src, so);
            ASSERT_EQ(r.tokens.size(), 3u);
            ++first[r.tokens[0]];
            if (r.tokens[0] == top) {
                ++second[r.tokens[1]];
                ++n_second;
            }
            accepted += r.stats.accepted;
            proposed += r.stats.proposed;
        }
        const auto [x1, df1] = chi_square(first, p1, runs);
        const auto [x2, df2] = chi_square(second, p2, n_second);
        EXPECT_LT(x1, critical(df1)) << src->name() << ": first token, df " << df1;
        EXPECT_LT(x2, critical(df2)) << src->name() << ": second token, df " << df2 << ", n " << n_second;
        // The test must have exercised both acceptance and rejection, at both positions.
        EXPECT_GT(accepted, 0) << src->name();
        EXPECT_LT(accepted, proposed) << src->name();
        // Every run's first pass guessed positions 1 and 2.
        EXPECT_GE(proposed, 2 * static_cast<int64_t>(runs)) << src->name();
        std::printf("%s: first token chi2 %.1f (df %d, critical %.1f), second %.1f (df %d, n %d), "
                    "acceptance %.2f\n", std::string(src->name()).c_str(), x1, df1, critical(df1), x2, df2,
                    n_second, static_cast<double>(accepted) / static_cast<double>(proposed));
    }
}

// Greedy rejection mode degenerates to exact verification: same tokens as plain decoding.
TEST_F(Speculative, GreedyRejectionModeIsExact) {
    const auto item = load_items("edit").at(0);
    const auto prompt = prompt_of(item);
    Context ctx(target_);
    GenerateOptions go;
    go.max_tokens = 60;
    KvCache pc(*target_, {kCapacity});
    const auto plain = generate_plain(ctx, pc, prompt, go);
    DraftSource draft(draft_, *target_, kCapacity);
    KvCache sc(*target_, {kCapacity});
    SpeculativeOptions so;
    so.generate = go;
    so.verify = VerifyMode::Rejection;
    EXPECT_EQ(generate_speculative(ctx, sc, prompt, draft, so).tokens, plain.tokens);
}

// A Session that speculates (append, generate, append, generate) emits exactly what a plain
// Session emits, call after call, for every source, greedy and seeded sampling; it reuses the
// prefix (only the held-back token runs as the second call's prompt) and ends with the same
// tokens and KV cache.
TEST_F(Speculative, SessionSpeculatesLosslessly) {
    const Item item = load_items("ref").at(0);
    const size_t cut = item.prompt.find('\n', item.prompt.size() / 2);
    ASSERT_NE(cut, std::string::npos);
    const std::string part1 = item.prompt.substr(0, cut + 1), part2 = item.prompt.substr(cut + 1) + "\n";
    const KvCacheOptions sopts{.capacity = kCapacity};
    Context sctx(target_);
    int64_t accepted = 0; // guesses that stood: the sessions really speculated
    for (const float temp : {0.0f, 0.8f}) {
        GenerateOptions go;
        go.max_tokens = kSanitized ? 12 : 32;
        go.sampler.temperature = temp;
        go.sampler.seed = 1234;
        Session plain(target_, sopts);
        plain.append_text(sctx, part1);
        const GenerateResult p1 = plain.generate(sctx, go);
        plain.append_text(sctx, part2);
        const GenerateResult p2 = plain.generate(sctx, go);
        for (const std::string kind : {"ngram", "ref", "draft", "auto", "auto-first"}) {
            auto src = make_source(kind, item);
            for (const KPolicy policy : {KPolicy::Fixed, KPolicy::Adaptive}) {
                SpeculativeOptions so;
                so.generate = go;
                so.k = 4;
                so.k_policy = policy;
                Session s(target_, sopts);
                s.append_text(sctx, part1);
                const SpeculativeResult r1 = generate_speculative(sctx, s, *src, so);
                ASSERT_EQ(r1.tokens, p1.tokens) << kind << " temp " << temp;
                s.append_text(sctx, part2);
                const SpeculativeResult r2 = generate_speculative(sctx, s, *src, so);
                ASSERT_EQ(r2.tokens, p2.tokens) << kind << " temp " << temp;
                EXPECT_EQ(r2.stop, p2.stop);
                EXPECT_EQ(r2.prompt_tokens, 1); // the prefix was reused
                EXPECT_EQ(r2.stats.emitted, static_cast<int64_t>(p2.tokens.size()));
                EXPECT_EQ(s.tokens(), plain.tokens());
                EXPECT_TRUE(s.cache().contents_equal(plain.cache())) << kind << " temp " << temp;
                accepted += r1.stats.accepted + r2.stats.accepted;
            }
        }
    }
    EXPECT_GT(accepted, 0);
}

TEST_F(Speculative, SessionRefusesBadOptionsWithNothingChanged) {
    NgramSource src;
    SpeculativeOptions so;
    so.generate.max_tokens = 8;
    Context sctx(target_);
    Session empty(target_, {.capacity = 64});
    EXPECT_THROW(generate_speculative(sctx, empty, src, so), Error);
    Session s(target_, {.capacity = 64});
    s.append_text(sctx, "def f(x):\n");
    const std::vector<TokenId> before(s.tokens());
    const int64_t cached = s.cache().size();
    so.k = 0;
    EXPECT_THROW(generate_speculative(sctx, s, src, so), Error);
    so.k = 4;
    so.generate.sampler.top_p = 0.0f;
    EXPECT_THROW(generate_speculative(sctx, s, src, so), Error);
    EXPECT_EQ(s.tokens(), before);
    EXPECT_EQ(s.cache().size(), cached);
}

namespace {

// `name` from ../shared/models with `extra` entries appended to its vocabulary ("[PAD<id>]" of
// token type `type`, 5 = unused) and embedding / head rows for them (`fill` each), as converters
// pad Qwen2.5's larger files; `rename` > 0 also changes the text of that token.
std::string with_padding(const gguf_test::TempDir& dir, const std::string& name, int extra, int32_t type,
                         float fill = 0.0f, int rename = -1) {
    using namespace gguf_test;
    const std::string src = kShared + "/models/" + name + ".gguf";
    const GgufFile g = GgufFile::open(src);
    auto toks = *g.get_string_array("tokenizer.ggml.tokens");
    auto types = *g.get_int_array("tokenizer.ggml.token_type");
    auto scores = g.get_float_array("tokenizer.ggml.scores");
    const size_t n0 = toks.size();
    for (int i = 0; i < extra; ++i) {
        toks.push_back("[PAD" + std::to_string(n0 + size_t(i)) + "]");
        types.push_back(type);
        if (scores) scores->push_back(0.0f);
    }
    if (rename >= 0) toks[size_t(rename)] += "x";
    Builder b = Builder::load(src);
    Enc et;
    et.u32(STR).u64(toks.size());
    for (const auto& t : toks) et.str(t);
    b.set("tokenizer.ggml.tokens", ARR, et.b);
    Enc ty;
    ty.u32(I32).u64(types.size());
    for (int64_t t : types) ty.put(int32_t(t));
    b.set("tokenizer.ggml.token_type", ARR, ty.b);
    if (scores) {
        Enc sc;
        sc.u32(F32).u64(scores->size());
        for (float f : *scores) sc.put(f);
        b.set("tokenizer.ggml.scores", ARR, sc.b);
    }
    if (g.find("llama.vocab_size")) b.set("llama.vocab_size", U32, raw<uint32_t>(uint32_t(toks.size())));
    for (const char* t : {"token_embd.weight", "output.weight"}) {
        RawTensor* r = b.tensor(t);
        if (!r) continue;
        for (size_t i = 0; i < size_t(extra) * r->dims[0]; ++i) r->data.append(reinterpret_cast<const char*>(&fill), 4);
        r->dims[1] += uint64_t(extra);
    }
    const std::string path = dir.file(name + "-padded-" + std::to_string(extra) + "-" + std::to_string(type) + ".gguf");
    b.write(path);
    return path;
}

} // namespace

// Draft and target vocabularies that agree on every real token and differ only in unused padding
// (up to 128 entries, either side larger) are accepted: the draft never proposes padding, even
// when its logits there are the largest, and decoding stays lossless. Anything else is refused
// with the first differing token named.
TEST_F(Speculative, DraftVocabularyMayDifferOnlyInPadding) {
    gguf_test::TempDir dir;
    // Padding rows of 0.5 in the tied head: their logits dwarf every real token's.
    const auto padded_draft = Model::load(with_padding(dir, "pycode-600k", 64, 5, 0.5f));
    const auto padded_target = Model::load(with_padding(dir, "pycode-4m", 128, 5));
    const auto items = std::vector<Item>{load_items("edit").at(0)};
    check_lossless({target_, padded_draft}, items, {4}, {"draft", "auto"}, KPolicy::Fixed, 32);
    check_lossless({padded_target, draft_}, items, {4}, {"draft", "auto"}, KPolicy::Fixed, 32);

    // Proposals stay inside the common vocabulary; rejection-mode rows are the target's size.
    const auto prompt = prompt_of(items[0]);
    DraftSourceOptions always;
    always.min_confidence = 0.0f;
    for (VerifyMode mode : {VerifyMode::Exact, VerifyMode::Rejection}) {
        DraftSource src(padded_draft, *target_, kCapacity, always);
        GenerationStart start;
        start.prompt = prompt;
        start.verify = mode;
        start.sampler.temperature = 0.8f;
        src.reset(start);
        Proposal p;
        src.propose(prompt, 8, p);
        ASSERT_EQ(p.tokens.size(), 8u);
        for (TokenId t : p.tokens) EXPECT_LT(t, 4096);
        if (mode == VerifyMode::Rejection) {
            EXPECT_EQ(p.probs.size(), 8u * 4096u);
        }
        DraftSource small(draft_, *padded_target, kCapacity, always);
        small.reset(start);
        Proposal q;
        small.propose(prompt, 3, q);
        if (mode == VerifyMode::Rejection) {
            ASSERT_EQ(q.probs.size(), 3u * 4224u);
            for (size_t i = 4096; i < 4224; ++i) EXPECT_EQ(q.probs[i], 0.0f);
        }
    }

    auto refusal = [&](const std::string& draft_file, const std::string& target_file) {
        const auto d = Model::load(draft_file);
        const auto t = Model::load(target_file);
        return gguf_test::error_of([&] { check_draft_compatible(*d, *t, kCapacity); });
    };
    const std::string m4 = kShared + "/models/pycode-4m.gguf";
    std::string m = refusal(with_padding(dir, "pycode-600k", 129, 5), m4);
    EXPECT_NE(m.find("more than the 128"), std::string::npos) << m;
    m = refusal(with_padding(dir, "pycode-600k", 4, 1), m4); // a normal token, not padding
    EXPECT_NE(m.find("token 4096"), std::string::npos) << m;
    EXPECT_NE(m.find("not unused padding"), std::string::npos) << m;
    m = refusal(with_padding(dir, "pycode-600k", 8, 5, 0.0f, 300), m4);
    EXPECT_NE(m.find("token 300 differs"), std::string::npos) << m;
}
