// Batch invariance of Context::forward_batch (memcmp, never a tolerance): a sequence's logits and
// cache contents are the same bits whether it runs alone or in one pass with others, in any
// order, with any thread count; bad batches are refused with every cache unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"
#include "model_test_util.h"

namespace rwd {
namespace {

// Sanitizer builds run ~10x slower: one round of random batches instead of three, same paths.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
constexpr int kRounds = 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
constexpr int kRounds = 1;
#else
constexpr int kRounds = 3;
#endif
#else
constexpr int kRounds = 3;
#endif

using model_test::load;
using model_test::random_tokens;
using model_test::same_bits;

// One sequence of a test batch: a cached prefix, new tokens, which logits.
struct Seq {
    std::vector<TokenId> prefix, tokens;
    Logits which = Logits::All;
    KvType kv = KvType::F32;
};

std::vector<Seq> random_batch(std::mt19937& rng, int n_seqs, int64_t V) {
    std::vector<Seq> seqs(static_cast<size_t>(n_seqs));
    for (Seq& s : seqs) {
        s.prefix = random_tokens(rng, std::uniform_int_distribution<int64_t>(0, 45)(rng), V);
        s.tokens = random_tokens(rng, std::uniform_int_distribution<int64_t>(1, 9)(rng), V);
        s.which = static_cast<Logits>(std::uniform_int_distribution<int>(0, 2)(rng));
        s.kv = std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? KvType::F16 : KvType::F32;
    }
    return seqs;
}

KvCache prefilled(Context& ctx, const Seq& s) {
    KvCache c(ctx.model(), {.capacity = 96, .type = s.kv});
    if (!s.prefix.empty()) ctx.forward(c, s.prefix, Logits::None);
    return c;
}

// The same weight types and architectures as the Forward invariance tests, minus the slower
// kq-256 files: F32, Q8_0 (packed), F16, the 4/5/6-bit mixes, and every architecture's own steps.
class Batch : public ::testing::TestWithParam<const char*> {};

TEST_P(Batch, SequenceBitsIndependentOfCompanionsOrderAndThreads) {
    auto model = load(GetParam());
    const int64_t V = model->n_vocab();
    std::mt19937 rng(77);
    for (int round = 0; round < kRounds; ++round) {
        const int n_seqs = 4 - round; // 4, 3, 2 sequences
        const auto seqs = random_batch(rng, n_seqs, V);
        SCOPED_TRACE("round " + std::to_string(round));

        // Each sequence alone, one thread: the reference bits.
        Context alone(model, {.n_threads = 1, .max_batch = 64});
        std::vector<std::vector<float>> ref_logits;
        std::vector<KvCache> ref_caches;
        for (const Seq& s : seqs) {
            KvCache c = prefilled(alone, s);
            const auto l = alone.forward(c, s.tokens, s.which);
            ref_logits.emplace_back(l.begin(), l.end());
            ref_caches.push_back(std::move(c));
        }

        for (int threads : {1, 2}) {
            Context ctx(model, {.n_threads = threads, .max_batch = 64});
            std::vector<int> order(static_cast<size_t>(n_seqs));
            for (int i = 0; i < n_seqs; ++i) order[static_cast<size_t>(i)] = i;
            for (int perm = 0; perm < 2; ++perm) {
                std::shuffle(order.begin(), order.end(), rng);
                SCOPED_TRACE(std::to_string(threads) + " threads, permutation " + std::to_string(perm));
                std::vector<KvCache> caches;
                for (const Seq& s : seqs) caches.push_back(prefilled(ctx, s));
                std::vector<BatchItem> items;
                for (int i : order) {
                    const Seq& s = seqs[static_cast<size_t>(i)];
                    items.push_back({&caches[static_cast<size_t>(i)], s.tokens, s.which, {}});
                }
                const uint64_t before = ctx.tokens_processed();
                ctx.forward_batch(items);
                uint64_t total = 0;
                for (size_t j = 0; j < items.size(); ++j) {
                    const auto i = static_cast<size_t>(order[j]);
                    total += seqs[i].tokens.size();
                    EXPECT_TRUE(same_bits(items[j].logits, ref_logits[i])) << "sequence " << i;
                    EXPECT_TRUE(caches[i].contents_equal(ref_caches[i])) << "sequence " << i;
                }
                EXPECT_EQ(ctx.tokens_processed() - before, total);
            }
        }
    }
}

// Decoding side by side: sequences of different lengths step together, one token each per
// pass, some dropping out, and every step's logits equal the sequence's own step alone.
TEST_P(Batch, StepwiseDecodeMatchesSoloDecode) {
    auto model = load(GetParam());
    const int64_t V = model->n_vocab();
    std::mt19937 rng(5);
    Context ctx(model, {.n_threads = 2, .max_batch = 32});
    Context solo(model, {.n_threads = 1, .max_batch = 32});
    const int n_seqs = 3;
    std::vector<KvCache> batch_caches, solo_caches;
    std::vector<std::vector<TokenId>> steps;
    for (int i = 0; i < n_seqs; ++i) {
        Seq s;
        s.prefix = random_tokens(rng, 5 + 17 * i, V);
        batch_caches.push_back(prefilled(ctx, s));
        solo_caches.push_back(prefilled(solo, s));
        steps.push_back(random_tokens(rng, 6 - 2 * i, V)); // 6, 4, 2 steps
    }
    for (size_t step = 0; step < 6; ++step) {
        std::vector<BatchItem> items;
        std::vector<size_t> who;
        for (size_t i = 0; i < steps.size(); ++i) {
            if (step >= steps[i].size()) continue;
            items.push_back({&batch_caches[i], std::span(steps[i]).subspan(step, 1), Logits::Last, {}});
            who.push_back(i);
        }
        ctx.forward_batch(items);
        for (size_t j = 0; j < items.size(); ++j) {
            const size_t i = who[j];
            const auto l = solo.forward(solo_caches[i], std::span(steps[i]).subspan(step, 1), Logits::Last);
            EXPECT_TRUE(same_bits(items[j].logits, l)) << "step " << step << " sequence " << i;
        }
    }
    for (size_t i = 0; i < steps.size(); ++i) EXPECT_TRUE(batch_caches[i].contents_equal(solo_caches[i]));
}

INSTANTIATE_TEST_SUITE_P(Models, Batch,
                         ::testing::Values("pycode-4m", "bundled", "pycode-4m-f16", "pycode-4m-q4_0",
                                           "pycode-4m-q4_k_m", "pycode-4m-q5_k_m", "pycode-4m-q6_k", "arch-llama3",
                                           "arch-qwen2", "arch-qwen3", "arch-phi3", "arch-gemma3",
                                           "dummy-qwen3-moe-tiny-q4_k_m", "dummy-mixtral-tiny-f32"),
                         model_test::model_param_name<::testing::TestParamInfo<const char*>>);

// Every bad batch throws rwd::Error with the right code before any cache or counter changes.
TEST(BatchErrors, RefusedBatchChangesNothing) {
    auto model = load("pycode-4m");
    auto other = load("pycode-600k");
    const int64_t V = model->n_vocab();
    Context ctx(model, {.n_threads = 1, .max_batch = 16});
    std::mt19937 rng(3);
    KvCache a(*model, {.capacity = 24}), b(*model, {.capacity = 24});
    ctx.forward(a, random_tokens(rng, 10, V), Logits::None);
    ctx.forward(b, random_tokens(rng, 20, V), Logits::None);
    KvCache foreign(*other, {.capacity = 24});
    const KvCache a0 = a.fork(), b0 = b.fork();
    const uint64_t processed = ctx.tokens_processed();
    const auto three = random_tokens(rng, 3, V);
    const auto five = random_tokens(rng, 5, V);
    const auto twelve = random_tokens(rng, 12, V);
    const std::vector<TokenId> bad_id{1, static_cast<TokenId>(V)};

    auto item = [](KvCache* c, std::span<const TokenId> t, Logits w = Logits::All) { return BatchItem{c, t, w, {}}; };
    auto expect_refused = [&](std::vector<BatchItem> items, ErrorCode code, const char* what) {
        SCOPED_TRACE(what);
        try {
            ctx.forward_batch(items);
            ADD_FAILURE() << "no error";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), code) << error_code_name(e.code()) << ": " << e.what();
            EXPECT_NE(std::string(e.what()).find("forward_batch"), std::string::npos) << e.what();
        }
        EXPECT_EQ(ctx.tokens_processed(), processed);
        EXPECT_TRUE(a.contents_equal(a0));
        EXPECT_TRUE(b.contents_equal(b0));
    };
    expect_refused({}, ErrorCode::argument, "no sequences");
    expect_refused({item(&a, three), item(nullptr, three)}, ErrorCode::argument, "null cache");
    expect_refused({item(&a, three), item(&b, {})}, ErrorCode::argument, "sequence without tokens");
    expect_refused({item(&a, three), item(&b, bad_id)}, ErrorCode::argument, "id == n_vocab");
    expect_refused({item(&a, three), item(&b, three, static_cast<Logits>(7))}, ErrorCode::argument, "unknown Logits");
    expect_refused({item(&a, three), item(&foreign, three)}, ErrorCode::state, "cache of another model");
    expect_refused({item(&a, three), item(&b, three), item(&a, three)}, ErrorCode::state, "the same cache twice");
    expect_refused({item(&a, three), item(&b, five)}, ErrorCode::capacity, "one sequence overflows (20 + 5 > 24)");
    expect_refused({item(&a, twelve), item(&b, three), item(nullptr, {})}, ErrorCode::argument, "null after valid ones");
    KvCache c(*model, {.capacity = 24});
    expect_refused({item(&a, twelve), item(&c, twelve)}, ErrorCode::capacity, "24 tokens in all > max_batch 16");
    EXPECT_EQ(c.size(), 0);

    // Still works, and fills b exactly to capacity.
    std::vector<BatchItem> ok{item(&a, five, Logits::Last), item(&b, std::span(twelve).first(4), Logits::All)};
    EXPECT_NO_THROW(ctx.forward_batch(ok));
    EXPECT_EQ(a.size(), 15);
    EXPECT_EQ(b.size(), 24);
    EXPECT_EQ(ok[0].logits.size(), static_cast<size_t>(V));
    EXPECT_EQ(ok[1].logits.size(), static_cast<size_t>(4 * V));
}

} // namespace
} // namespace rwd
