// TokenIndex on synthetic token sequences: longest-suffix matching within [n_min, n_max], latest
// occurrence, document boundaries, incremental updates, overlapping copies, bad input.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "rewind/error.h"
#include "rewind/speculate/token_index.h"

using rwd::TokenId;
using namespace rwd::speculate;

namespace {
std::vector<TokenId> copy_of(const TokenIndex& idx, std::span<const TokenId> ctx, int k, RunOff r = RunOff::Stop) {
    std::vector<TokenId> out;
    idx.copy(idx.find(ctx), k, r, out);
    return out;
}
} // namespace

TEST(TokenIndex, FindsLongestSuffixAndItsContinuation) {
    TokenIndex idx({2, 4});
    // 1 2 3 9 | 5 2 3 7 | ... the 2-gram "2 3" occurs twice; "1 2 3" once.
    idx.push(std::vector<TokenId>{1, 2, 3, 9, 5, 2, 3, 7, 8});
    const std::vector<TokenId> a{4, 1, 2, 3};
    auto m = idx.find(a);
    ASSERT_TRUE(m.found());
    EXPECT_EQ(m.n, 3);
    EXPECT_EQ(m.pos, 3);
    EXPECT_EQ(copy_of(idx, a, 2), (std::vector<TokenId>{9, 5}));
    // Only "2 3" matches: the latest occurrence wins.
    const std::vector<TokenId> b{6, 2, 3};
    m = idx.find(b);
    EXPECT_EQ(m.n, 2);
    EXPECT_EQ(m.pos, 7);
    EXPECT_EQ(copy_of(idx, b, 8), (std::vector<TokenId>{7, 8}));
}

TEST(TokenIndex, RespectsNMinAndNMax) {
    TokenIndex idx({2, 3});
    idx.push(std::vector<TokenId>{1, 2, 3, 4, 5});
    // A single matching token is below n_min.
    EXPECT_FALSE(idx.find(std::vector<TokenId>{9, 3}).found());
    // Four matching tokens: only n_max = 3 of them count.
    const auto m = idx.find(std::vector<TokenId>{1, 2, 3, 4});
    ASSERT_TRUE(m.found());
    EXPECT_EQ(m.n, 3);
    EXPECT_EQ(m.pos, 4);
    // A context shorter than n_min finds nothing.
    EXPECT_FALSE(idx.find(std::vector<TokenId>{4}).found());
    EXPECT_FALSE(idx.find(std::vector<TokenId>{}).found());

    TokenIndex uni({1, 1});
    uni.push(std::vector<TokenId>{5, 6, 5, 7});
    const auto u = uni.find(std::vector<TokenId>{5});
    EXPECT_EQ(u.pos, 3); // latest: 5 -> 7
}

TEST(TokenIndex, TheNewestTokenHasNoContinuationYet) {
    TokenIndex idx({2, 2});
    idx.push(std::vector<TokenId>{1, 2});
    // "1 2" is stored but nothing follows it yet.
    EXPECT_FALSE(idx.find(std::vector<TokenId>{1, 2}).found());
    idx.push(3);
    const auto m = idx.find(std::vector<TokenId>{1, 2});
    ASSERT_TRUE(m.found());
    EXPECT_EQ(m.pos, 2);
}

TEST(TokenIndex, IncrementalUpdatesMatchABulkBuild) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<TokenId> tok(0, 5); // small alphabet: many repeats
    std::vector<TokenId> seq(3000);
    for (auto& t : seq) t = tok(rng);
    TokenIndex inc({2, 6}), bulk({2, 6});
    bulk.push(seq);
    for (size_t i = 0; i < seq.size(); ++i) {
        inc.push(seq[i]);
        if (i % 97 == 0) {
            const std::span<const TokenId> prefix(seq.data(), i + 1);
            const auto m = inc.find(prefix);
            // The brute-force answer: the longest n in [2, 6] whose suffix occurs earlier with a
            // following token inside the prefix, latest occurrence.
            IndexMatch want;
            for (int n = std::min<int>(6, static_cast<int>(i + 1)); n >= 2 && !want.found(); --n) {
                for (int64_t end = static_cast<int64_t>(i); end >= n; --end) { // continuation at end (<= i)
                    if (std::equal(seq.begin() + (end - n), seq.begin() + end, prefix.end() - n)) {
                        want = {end, n};
                        break;
                    }
                }
            }
            EXPECT_EQ(m.pos, want.pos) << "at " << i;
            EXPECT_EQ(m.n, want.n) << "at " << i;
        }
    }
    EXPECT_EQ(inc.n_entries(), bulk.n_entries());
    EXPECT_EQ(inc.find(seq).pos, bulk.find(seq).pos);
}

TEST(TokenIndex, DocumentsDoNotLeakIntoEachOther) {
    TokenIndex idx({2, 4});
    idx.push(std::vector<TokenId>{1, 2, 3});
    idx.end_document();
    idx.push(std::vector<TokenId>{4, 5, 6});
    idx.end_document();
    // "2 3" ends document 0: nothing follows it.
    EXPECT_FALSE(idx.find(std::vector<TokenId>{2, 3}).found());
    // "3 4" spans the boundary: not an n-gram of either document.
    EXPECT_FALSE(idx.find(std::vector<TokenId>{3, 4}).found());
    EXPECT_EQ(copy_of(idx, std::vector<TokenId>{1, 2}, 8), (std::vector<TokenId>{3}));
    EXPECT_EQ(copy_of(idx, std::vector<TokenId>{4, 5}, 8), (std::vector<TokenId>{6}));
    // Empty documents add no separator.
    const auto size = idx.size();
    idx.end_document();
    EXPECT_EQ(idx.size(), size);
}

TEST(TokenIndex, OverlappingCopyExtendsARepeatingPattern) {
    TokenIndex idx({2, 4});
    idx.push(std::vector<TokenId>{9, 1, 2, 3, 1, 2, 3, 1, 2});
    const std::vector<TokenId> ctx{9, 1, 2, 3, 1, 2, 3, 1, 2};
    EXPECT_EQ(copy_of(idx, ctx, 7, RunOff::Overlap), (std::vector<TokenId>{3, 1, 2, 3, 1, 2, 3}));
    // Without overlap the copy ends where the text does.
    EXPECT_EQ(copy_of(idx, ctx, 7, RunOff::Stop), (std::vector<TokenId>{3, 1, 2}));
    // A closed document never overlaps.
    idx.end_document();
    EXPECT_EQ(copy_of(idx, ctx, 7, RunOff::Overlap), (std::vector<TokenId>{3, 1, 2}));
}

TEST(TokenIndex, ClearForgetsEverything) {
    TokenIndex idx({2, 3});
    idx.push(std::vector<TokenId>{1, 2, 3, 1, 2});
    ASSERT_TRUE(idx.find(std::vector<TokenId>{1, 2}).found());
    idx.clear();
    EXPECT_EQ(idx.size(), 0);
    EXPECT_EQ(idx.n_entries(), 0);
    EXPECT_FALSE(idx.find(std::vector<TokenId>{1, 2}).found());
}

TEST(TokenIndex, GrowsPastItsInitialTable) {
    TokenIndex idx({1, 8});
    std::vector<TokenId> seq;
    for (TokenId i = 0; i < 20000; ++i) seq.push_back(i);
    idx.push(seq);
    EXPECT_EQ(idx.n_entries(), 8 * 20000 - 36); // every n-gram with a follower
    const std::vector<TokenId> ctx{100, 101, 102};
    EXPECT_EQ(copy_of(idx, ctx, 3), (std::vector<TokenId>{103, 104, 105}));
}

TEST(TokenIndex, RejectsBadInput) {
    EXPECT_THROW(TokenIndex({0, 4}), rwd::Error);
    EXPECT_THROW(TokenIndex({3, 2}), rwd::Error);
    EXPECT_THROW(TokenIndex({1, NgramRange::kLimit + 1}), rwd::Error);
    TokenIndex idx;
    EXPECT_THROW(idx.push(-1), rwd::Error);
    std::vector<TokenId> out;
    EXPECT_EQ(idx.copy(IndexMatch{}, 4, RunOff::Stop, out), 0);
}

TEST(TokenIndex, WalksEveryOccurrenceNewestFirst) {
    TokenIndex idx({2, 3});
    // positions: 0:1 1:2 2:5 3:1 4:2 5:6 6:1 7:2 8:7 9:1 10:2
    idx.push(std::vector<TokenId>{1, 2, 5, 1, 2, 6, 1, 2, 7, 1, 2});
    const std::vector<TokenId> ctx{1, 2};
    const auto m = idx.find(ctx);
    ASSERT_EQ(m.pos, 8);
    std::vector<int64_t> at;
    EXPECT_EQ(idx.occurrences(m, 16, at), 3);
    EXPECT_EQ(at, (std::vector<int64_t>{8, 5, 2}));
    at.clear();
    EXPECT_EQ(idx.occurrences(m, 2, at), 2); // the cap bounds the walk
    EXPECT_EQ(at, (std::vector<int64_t>{8, 5}));
    at.clear();
    EXPECT_EQ(idx.occurrences(m, 16, at, 4), 2); // nothing before min_pos
    EXPECT_EQ(at, (std::vector<int64_t>{8, 5}));
    at.clear();
    EXPECT_EQ(idx.occurrences(IndexMatch{}, 16, at), 0);
    EXPECT_EQ(idx.occurrences(m, 0, at), 0);
    // find() skips occurrences before min_pos, falling back to a shorter live match.
    EXPECT_EQ(idx.find(std::vector<TokenId>{6, 1, 2}).n, 3);
    const auto late = idx.find(std::vector<TokenId>{6, 1, 2}, 9);
    EXPECT_FALSE(late.found()); // "1 2" at 8 is the newest and 8 < 9
    const auto mid = idx.find(std::vector<TokenId>{5, 1, 2}, 6);
    EXPECT_EQ(mid.n, 2);
    EXPECT_EQ(mid.pos, 8);

    Continuations c;
    idx.continuations(m, 16, 3, RunOff::Stop, c);
    ASSERT_EQ(c.size(), 3u);
    EXPECT_EQ(c.match_length, 2);
    EXPECT_EQ(std::vector<TokenId>(c[0].begin(), c[0].end()), (std::vector<TokenId>{7, 1, 2}));
    EXPECT_EQ(std::vector<TokenId>(c[1].begin(), c[1].end()), (std::vector<TokenId>{6, 1, 2}));
    EXPECT_EQ(std::vector<TokenId>(c[2].begin(), c[2].end()), (std::vector<TokenId>{5, 1, 2}));
    idx.continuations(IndexMatch{}, 16, 3, RunOff::Stop, c);
    EXPECT_EQ(c.size(), 0u);
    EXPECT_EQ(c.match_length, 0);
}

TEST(TokenIndex, OccurrencesStayInsideDocumentsAndMatchABruteForceWalk) {
    std::mt19937 rng(11);
    std::uniform_int_distribution<TokenId> tok(0, 3);
    TokenIndex idx({2, 5});
    std::vector<TokenId> all;
    for (int d = 0; d < 6; ++d) {
        for (int i = 0; i < 200; ++i) {
            const TokenId t = tok(rng);
            idx.push(t);
            all.push_back(t);
        }
        idx.end_document();
        all.push_back(TokenIndex::kSeparator);
    }
    ASSERT_EQ(idx.size(), static_cast<int64_t>(all.size()));
    for (int trial = 0; trial < 50; ++trial) {
        std::vector<TokenId> ctx(5);
        for (auto& t : ctx) t = tok(rng);
        const auto m = idx.find(ctx);
        if (!m.found()) continue;
        std::vector<int64_t> got;
        idx.occurrences(m, 1 << 20, got);
        // Every position p whose n tokens before it (no separator among them) equal the context's
        // last n, and that holds a token (not a separator), newest first.
        std::vector<int64_t> want;
        for (int64_t p = static_cast<int64_t>(all.size()) - 1; p >= m.n; --p) {
            if (all[static_cast<size_t>(p)] == TokenIndex::kSeparator) continue;
            if (std::equal(all.begin() + (p - m.n), all.begin() + p, ctx.end() - m.n)) want.push_back(p);
        }
        EXPECT_EQ(got, want) << "trial " << trial;
    }
}

TEST(TokenIndex, FollowAppendsOrRebuilds) {
    TokenIndex idx({2, 3});
    std::vector<TokenId> text{1, 2, 3};
    EXPECT_FALSE(idx.follow(text));
    text.insert(text.end(), {1, 2});
    EXPECT_FALSE(idx.follow(text)); // only the two new tokens are pushed
    EXPECT_EQ(idx.size(), 5);
    EXPECT_EQ(copy_of(idx, text, 2), (std::vector<TokenId>{3, 1}));
    const std::vector<TokenId> other{7, 8, 7};
    EXPECT_TRUE(idx.follow(other)); // history rewritten: rebuilt
    EXPECT_EQ(idx.size(), 3);
    EXPECT_TRUE(idx.follow(std::vector<TokenId>{7})); // shorter than what is stored
    EXPECT_EQ(idx.size(), 1);
}
