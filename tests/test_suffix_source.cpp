// SuffixSource and SuffixCache on synthetic token sequences: tree shape and ranking, adaptive
// depth, the shared cache (documents from finished generations, eviction, memory bound, two
// threads at once) and option checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/speculate/batch_decoder.h"
#include "rewind/speculate/suffix_source.h"

using rwd::TokenId;
using namespace rwd::speculate;

namespace {

GenerationStart start_of(const std::vector<TokenId>& prompt) {
    GenerationStart g;
    g.prompt = prompt;
    return g;
}

Proposal propose(SuffixSource& s, const std::vector<TokenId>& ctx, int k) {
    Proposal p;
    s.propose(ctx, k, p);
    check_proposal("suffix", p); // every proposal must be a well-formed tree
    return p;
}

// Guesses on the path from the context to guess i, guess i included.
int depth_of(const Proposal& p, size_t i) {
    int d = 0;
    for (int32_t at = static_cast<int32_t>(i); at >= 0; at = p.parent(static_cast<size_t>(at))) ++d;
    return d;
}

int depth_of(const Proposal& p) {
    int d = 0;
    for (size_t i = 0; i < p.tokens.size(); ++i) d = std::max(d, depth_of(p, i));
    return d;
}

// A generation as a decoder drives it: reset with the prompt, then the output accepted.
void generate(SuffixSource& s, const std::vector<TokenId>& prompt, const std::vector<TokenId>& output) {
    s.reset(start_of(prompt));
    std::vector<TokenId> ctx = prompt;
    ctx.insert(ctx.end(), output.begin(), output.end());
    s.accept(ctx);
}

std::vector<TokenId> seq(TokenId from, int n) {
    std::vector<TokenId> v;
    for (int i = 0; i < n; ++i) v.push_back(from + i);
    return v;
}

} // namespace

TEST(SuffixSource, RanksItsOwnTextsContinuationsByFrequency) {
    SuffixSourceOptions o;
    o.min_weight = 0.0f;
    o.alpha = 4.0f;
    SuffixSource src(nullptr, o);
    // "5 6" is followed by 7 three times (7 3 twice) and by 8 once, the latest.
    const std::vector<TokenId> ctx{5, 6, 7, 1, 5, 6, 7, 3, 5, 6, 7, 3, 5, 6, 8, 4, 9, 5, 6};
    src.reset(start_of(ctx));
    const Proposal p = propose(src, ctx, 8);
    // Best first: 7 (3/4), 7 3 (2/4), 7 3 5 and 7 3 5 6 (2/4: weight 1), then the paths of 1/4,
    // the newest occurrence's first: 8 4 9 5.
    EXPECT_EQ(p.tokens, (std::vector<TokenId>{7, 3, 5, 6, 8, 4, 9, 5}));
    EXPECT_EQ(p.parents, (std::vector<int32_t>{-1, 0, 1, 2, -1, 4, 5, 6}));
    ASSERT_EQ(p.weights.size(), 8u);
    EXPECT_FLOAT_EQ(p.weights[0], 0.75f);
    EXPECT_FLOAT_EQ(p.weights[1], 2.0f / 3.0f);
    EXPECT_FLOAT_EQ(p.weights[3], 1.0f);
    EXPECT_FLOAT_EQ(p.weights[4], 0.25f);
    EXPECT_EQ(src.local_proposals(), 1);
    EXPECT_EQ(src.cache_proposals(), 0);

    // min_weight leaves out the rare branch; one branch leaves a single path.
    o.min_weight = 0.3f;
    SuffixSource strict(nullptr, o);
    strict.reset(start_of(ctx));
    const Proposal q = propose(strict, ctx, 8);
    ASSERT_FALSE(q.tokens.empty());
    for (size_t i = 0; i < q.tokens.size(); ++i) {
        EXPECT_GE(q.weights[i], 0.3f);
        EXPECT_FALSE(q.parents[i] == -1 && q.tokens[i] == 8); // 1/4 of the matches
    }
    o.branches = 1;
    o.min_weight = 0.0f;
    SuffixSource single(nullptr, o);
    single.reset(start_of(ctx));
    const Proposal r = propose(single, ctx, 5);
    for (size_t i = 0; i < r.tokens.size(); ++i) EXPECT_EQ(r.parents[i], static_cast<int32_t>(i) - 1);
    EXPECT_EQ(r.tokens[0], 7);
}

TEST(SuffixSource, DepthGrowsWithTheMatchLength) {
    // "1 2" occurs once before, followed by a long run: the match is 2 tokens long.
    std::vector<TokenId> ctx{1, 2};
    for (TokenId t = 10; t < 40; ++t) ctx.push_back(t);
    ctx.insert(ctx.end(), {0, 1, 2});
    for (const auto& [alpha, want] : std::vector<std::pair<float, int>>{{1.0f, 2}, {1.5f, 3}, {2.0f, 4}, {100.0f, 12}}) {
        SuffixSourceOptions o;
        o.alpha = alpha;
        SuffixSource src(nullptr, o);
        src.reset(start_of(ctx));
        const Proposal p = propose(src, ctx, 12);
        EXPECT_EQ(depth_of(p), want) << "alpha " << alpha; // min(k, ceil(alpha * 2))
        EXPECT_EQ(p.tokens.size(), static_cast<size_t>(want)) << "alpha " << alpha;
        EXPECT_EQ(p.tokens[0], 10);
    }
    // A longer match (here 4 tokens: "30 31 32 33") guesses deeper at the same alpha.
    SuffixSource src;
    std::vector<TokenId> longer = ctx;
    longer.insert(longer.end(), {30, 31, 32, 33});
    src.reset(start_of(longer));
    EXPECT_EQ(depth_of(propose(src, longer, 12)), 4);
    // k bounds every tree.
    for (int k = 1; k <= 4; ++k) EXPECT_LE(propose(src, longer, k).tokens.size(), static_cast<size_t>(k));
}

TEST(SuffixSource, EarlierGenerationsHelpLaterOnesThroughASharedCache) {
    auto cache = std::make_shared<SuffixCache>();
    const std::vector<TokenId> prompt_a{100, 101, 102};
    const std::vector<TokenId> output_a = seq(200, 20);
    {
        SuffixSource a(cache);
        generate(a, prompt_a, output_a);
        EXPECT_EQ(cache->n_documents(), 0); // still in progress
        // The next generation starts: the first one's output enters the cache.
        a.reset(start_of({7}));
        EXPECT_EQ(cache->n_documents(), 1);
        EXPECT_EQ(cache->n_tokens(), 20);
    } // a generation that produced nothing adds nothing
    EXPECT_EQ(cache->n_documents(), 1);

    // Another source, another prompt: a suffix of the earlier output is guessed from the cache.
    SuffixSource b(cache);
    const std::vector<TokenId> ctx{55, 56, 205, 206, 207};
    b.reset(start_of(ctx));
    const Proposal p = propose(b, ctx, 4);
    EXPECT_EQ(p.tokens, (std::vector<TokenId>{208, 209, 210}));  // depth ceil(1.0 * 3)
    EXPECT_EQ(b.cache_proposals(), 1);
    SuffixSource alone; // a private cache knows nothing of it
    alone.reset(start_of(ctx));
    EXPECT_TRUE(propose(alone, ctx, 4).tokens.empty());

    // The destructor records too; cache_prompts adds the prompt as a document of its own.
    SuffixSourceOptions with_prompts;
    with_prompts.cache_prompts = true;
    {
        SuffixSource c(cache, with_prompts);
        generate(c, {1, 2, 3}, {4, 5});
    }
    EXPECT_EQ(cache->n_documents(), 3);
    EXPECT_EQ(cache->n_tokens(), 25);
    // record = false: nothing is added.
    SuffixSourceOptions quiet;
    quiet.record = false;
    {
        SuffixSource d(cache, quiet);
        generate(d, {1}, {2, 3, 4});
        d.reset(start_of({9}));
    }
    EXPECT_EQ(cache->n_documents(), 3);
}

TEST(SuffixSource, PrefersTheCacheWhenItsTreeScoresHigher) {
    auto cache = std::make_shared<SuffixCache>();
    // The cache saw "1 2 3 4 5" three times; the request's own text once, followed by 9.
    for (int i = 0; i < 3; ++i) cache->add(std::vector<TokenId>{1, 2, 3, 4, 5});
    SuffixSourceOptions o;
    o.alpha = 2.0f;
    SuffixSource src(cache, o);
    const std::vector<TokenId> own{1, 2, 9, 8, 7, 1, 2};
    src.reset(start_of(own));
    const Proposal p = propose(src, own, 4);
    // Own text: one path of 4 (9 8 7 1), score 4; cache: 3 4 5 three times, score 3. Own wins.
    EXPECT_EQ(p.tokens, (std::vector<TokenId>{9, 8, 7, 1}));
    // A longer match in the cache ("0 1 2" is not in the own text): the cache tree is deeper.
    cache->add(std::vector<TokenId>{0, 1, 2, 3, 4, 5, 6, 7});
    const std::vector<TokenId> ctx2{0, 1, 2};
    src.reset(start_of(ctx2));
    EXPECT_EQ(propose(src, ctx2, 6).tokens, (std::vector<TokenId>{3, 4, 5, 6, 7}));
    EXPECT_EQ(src.cache_proposals(), 1);
}

TEST(SuffixCache, EvictsTheOldestDocumentsAndStaysWithinItsBudget) {
    SuffixCacheOptions o;
    o.max_tokens = 10;
    SuffixCache cache(o);
    cache.add(std::vector<TokenId>{1, 2, 3, 4});
    cache.add(std::vector<TokenId>{5, 6, 7, 8});
    Continuations c;
    cache.lookup(std::vector<TokenId>{1, 2}, 8, 8, c);
    EXPECT_EQ(c.size(), 1u);
    cache.add(std::vector<TokenId>{9, 10, 11, 12}); // 12 > 10: the first document goes
    EXPECT_EQ(cache.n_documents(), 2);
    EXPECT_EQ(cache.n_tokens(), 8);
    cache.lookup(std::vector<TokenId>{1, 2}, 8, 8, c);
    EXPECT_EQ(c.size(), 0u);
    EXPECT_EQ(c.match_length, 0);
    cache.lookup(std::vector<TokenId>{6, 7}, 8, 8, c);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0][0], 8);
    // A document longer than the budget keeps its tail.
    cache.add(seq(100, 25));
    EXPECT_EQ(cache.n_documents(), 1);
    EXPECT_EQ(cache.n_tokens(), 10);
    cache.lookup(std::vector<TokenId>{115, 116}, 8, 8, c);
    EXPECT_EQ(c.size(), 1u);
    cache.lookup(std::vector<TokenId>{105, 106}, 8, 8, c);
    EXPECT_EQ(c.size(), 0u);

    // Many documents: the live text never passes the budget and the index (evicted text awaiting
    // compaction included) stays within 1.5 times it plus separators.
    SuffixCacheOptions big;
    big.max_tokens = 1000;
    SuffixCache many(big);
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> len(1, 120);
    for (int i = 0; i < 2000; ++i) {
        many.add(seq(i, len(rng)));
        ASSERT_LE(many.n_tokens(), 1000);
        ASSERT_LE(many.indexed_tokens(), 1500 + many.n_documents() + 1) << "after " << i;
    }
    // The newest documents are the ones kept: the last one is found.
    many.lookup(std::vector<TokenId>{1999, 2000}, 4, 4, c);
    EXPECT_GE(c.size(), 1u);
    many.clear();
    EXPECT_EQ(many.n_tokens(), 0);
    EXPECT_EQ(many.indexed_tokens(), 0);
}

TEST(SuffixCache, TwoThreadsShareOneCache) {
    SuffixCacheOptions o;
    o.max_tokens = 4000;
    auto cache = std::make_shared<SuffixCache>(o);
    auto worker = [&](TokenId base, int& proposals_seen, bool& failed) {
        try {
            SuffixSource src(cache);
            std::mt19937 rng(static_cast<unsigned>(base));
            std::uniform_int_distribution<TokenId> tok(0, 7);
            for (int g = 0; g < 60; ++g) {
                std::vector<TokenId> ctx{base, tok(rng)};
                src.reset(start_of(ctx));
                for (int step = 0; step < 40; ++step) {
                    Proposal p;
                    src.propose(ctx, 6, p);
                    check_proposal("suffix", p);
                    if (!p.tokens.empty()) ++proposals_seen;
                    ctx.push_back(p.tokens.empty() || step % 3 == 0 ? tok(rng) : p.tokens[0]);
                    src.accept(ctx);
                }
            }
        } catch (...) {
            failed = true;
        }
    };
    int seen_a = 0, seen_b = 0;
    bool failed_a = false, failed_b = false;
    std::thread a(worker, 1000, std::ref(seen_a), std::ref(failed_a));
    std::thread b(worker, 2000, std::ref(seen_b), std::ref(failed_b));
    // The test thread reads at the same time.
    for (int i = 0; i < 200; ++i) {
        Continuations c;
        cache->lookup(std::vector<TokenId>{1, 2, 3}, 8, 8, c);
        EXPECT_LE(cache->n_tokens(), 4000);
    }
    a.join();
    b.join();
    EXPECT_FALSE(failed_a);
    EXPECT_FALSE(failed_b);
    EXPECT_GT(seen_a, 0);
    EXPECT_GT(seen_b, 0);
    // Each source recorded 59 generations on reset and the last in its destructor: 120 outputs
    // of 40 tokens, more than the budget holds.
    EXPECT_EQ(cache->n_tokens(), 4000);
    EXPECT_EQ(cache->n_documents(), 100);
}

TEST(SuffixSource, RefusesBadOptions) {
    auto bad = [](auto edit) {
        SuffixSourceOptions o;
        edit(o);
        EXPECT_THROW(SuffixSource(nullptr, o), rwd::Error);
    };
    bad([](SuffixSourceOptions& o) { o.alpha = 0.0f; });
    bad([](SuffixSourceOptions& o) { o.alpha = -1.0f; });
    bad([](SuffixSourceOptions& o) { o.alpha = std::numeric_limits<float>::quiet_NaN(); });
    bad([](SuffixSourceOptions& o) { o.alpha = std::numeric_limits<float>::infinity(); });
    bad([](SuffixSourceOptions& o) { o.min_weight = 1.5f; });
    bad([](SuffixSourceOptions& o) { o.min_weight = -0.1f; });
    bad([](SuffixSourceOptions& o) { o.branches = 0; });
    bad([](SuffixSourceOptions& o) { o.max_occurrences = 0; });
    bad([](SuffixSourceOptions& o) { o.range = {3, 2}; });
    bad([](SuffixSourceOptions& o) { o.cache.max_tokens = 0; });
    bad([](SuffixSourceOptions& o) { o.cache.max_tokens = SuffixCacheOptions::kMaxTokens + 1; });
    try {
        SuffixSourceOptions o;
        o.alpha = -2.0f;
        SuffixSource s(nullptr, o);
        FAIL() << "accepted alpha -2";
    } catch (const rwd::Error& e) {
        EXPECT_EQ(e.code(), rwd::ErrorCode::argument);
        EXPECT_NE(std::string(e.what()).find("alpha"), std::string::npos) << e.what();
    }
    SuffixCache cache;
    cache.add(std::vector<TokenId>{1, 2, 3});
    EXPECT_THROW(cache.add(std::vector<TokenId>{4, -5, 6}), rwd::Error);
    EXPECT_EQ(cache.n_tokens(), 3); // unchanged
    cache.add(std::vector<TokenId>{});
    EXPECT_EQ(cache.n_documents(), 1);
    SuffixSource src;
    Proposal p;
    EXPECT_THROW(src.propose(std::vector<TokenId>{1, 2}, 0, p), rwd::Error);
}

// In a batch, every request's suffix source shares one cache: a finished request's output helps
// the requests after it (more guesses accepted), and every output equals plain decoding.
TEST(SuffixSource, BatchedRequestsShareOneCacheAndEqualPlainDecoding) {
    auto model = rwd::Model::load(std::string(REWIND_SHARED_DIR) + "/models/pycode-4m.gguf");
    rwd::Context ctx(model, {.n_threads = 2, .max_batch = 64});
    const char* texts[] = {"def read_config(path):\n", "import json\n\ndef load(path):\n"};
    std::vector<std::vector<TokenId>> prompts, want;
    for (const char* t : texts) {
        prompts.push_back(model->tokenizer().encode(t));
        rwd::KvCache c(*model, {.capacity = 256});
        rwd::GenerateOptions g;
        g.max_tokens = 48;
        g.stop_at_eog = false;
        want.push_back(rwd::generate_plain(ctx, c, prompts.back(), g).tokens);
    }
    auto shared = std::make_shared<SuffixCache>();
    BatchDecoder dec(ctx);
    auto run = [&](std::vector<int> which) {
        std::map<uint64_t, int> of;
        for (int i : which) {
            BatchRequest r;
            r.prompt = prompts[static_cast<size_t>(i)];
            r.generate.max_tokens = 48;
            r.generate.stop_at_eog = false;
            r.source = std::make_unique<SuffixSource>(shared);
            r.k = 8;
            of[dec.submit(std::move(r))] = i;
        }
        std::map<int, BatchResult> out;
        while (dec.active() > 0)
            for (BatchResult& r : dec.step()) out[of[r.id]] = std::move(r);
        return out;
    };
    auto first = run({0});
    EXPECT_EQ(first[0].tokens, want[0]);
    EXPECT_EQ(shared->n_documents(), 1);
    EXPECT_EQ(shared->n_tokens(), 48); // the whole output, the last pass's tokens included
    auto again = run({0, 1});
    EXPECT_EQ(again[0].tokens, want[0]);
    EXPECT_EQ(again[1].tokens, want[1]);
    EXPECT_GT(again[0].stats.accepted, first[0].stats.accepted); // it copied its earlier output
    EXPECT_EQ(shared->n_documents(), 3);
}
