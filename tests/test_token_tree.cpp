// Token trees, bit for bit: a gathered attention path gives the causal bits at every SIMD level;
// every node of a tree pass has the logits of a linear pass over its path (every weight type and
// architecture, 1 and 2 threads, every SIMD level, F32 and F16 caches); keep_path leaves the cache
// a linear pass over the accepted path would; and decoding with tree guesses equals plain decoding.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model_test_util.h"
#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/kernels/attention.h"
#include "rewind/kv_cache.h"
#include "rewind/speculate/batch_decoder.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/source_factory.h"

namespace rwd {
namespace {

using model_test::load;
using model_test::random_tokens;
using model_test::same_bits;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
constexpr int kTrees = 1; // sanitizers run ~10x slower: one random tree (several roots), the same paths
#else
constexpr int kTrees = 5;
#endif

// A random tree of n nodes: parents[i] in [-1, i), mostly the previous node or a recent one (so
// there are deep paths and branches); with several_roots, more than one node hangs off the prefix.
std::vector<int32_t> random_parents(std::mt19937& rng, int n, bool several_roots = false) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
        if (i == 0) {
            p[0] = -1;
            continue;
        }
        const int r = static_cast<int>(rng() % 10);
        if (several_roots && r == 0) p[static_cast<size_t>(i)] = -1;
        else if (r < 6) p[static_cast<size_t>(i)] = i - 1;
        else p[static_cast<size_t>(i)] = static_cast<int32_t>(rng() % static_cast<uint32_t>(i));
    }
    if (several_roots && n >= 2) p[static_cast<size_t>(n / 2)] = -1; // at least one more root
    return p;
}

// Node i's path from its root: node indices, root first.
std::vector<int32_t> path_to(const std::vector<int32_t>& parents, int32_t i) {
    std::vector<int32_t> path;
    for (int32_t a = i; a >= 0; a = parents[static_cast<size_t>(a)]) path.push_back(a);
    std::reverse(path.begin(), path.end());
    return path;
}

// ---- the kernel: a gathered path is the causal sequence it stands for --------------------------

std::vector<std::byte> random_rows(std::mt19937& rng, int64_t rows, int64_t width, DType type) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const size_t eb = type == DType::F32 ? 4 : 2;
    std::vector<std::byte> b(static_cast<size_t>(rows * width) * eb);
    for (int64_t i = 0; i < rows * width; ++i) {
        const float x = nd(rng);
        if (type == DType::F32) std::memcpy(b.data() + 4 * i, &x, 4);
        else {
            const uint16_t h = fp32_to_fp16(x);
            std::memcpy(b.data() + 2 * i, &h, 2);
        }
    }
    return b;
}

TEST(TreeAttention, GatheredPathGivesTheCausalBitsAtEveryLevel) {
    ThreadPool p2(2);
    std::mt19937 rng(11);
    struct Shape {
        int64_t prefix, path, queries, n_head, n_head_kv, head_dim, window;
    };
    // Queries are the path's last `queries` positions; windows that end inside the prefix and
    // inside the gathered part.
    const Shape shapes[] = {{20, 6, 3, 4, 2, 16, 0}, {130, 9, 9, 8, 2, 64, 0}, {5, 4, 1, 3, 1, 12, 0},
                            {70, 12, 5, 6, 3, 32, 8}, {40, 7, 7, 4, 4, 8, 50}, {0, 5, 2, 2, 1, 64, 0}};
    for (DType type : {DType::F32, DType::F16}) {
        for (const Shape& sh : shapes) {
            const int64_t W = sh.n_head_kv * sh.head_dim, total = sh.prefix + sh.path;
            // The tree's cache: prefix, then 3 * path slots, the path's rows scattered among them.
            const int64_t slots = sh.prefix + 3 * sh.path;
            const auto k = random_rows(rng, slots, W, type), v = random_rows(rng, slots, W, type);
            std::vector<int32_t> gather(static_cast<size_t>(sh.path));
            int32_t at = static_cast<int32_t>(sh.prefix);
            for (auto& g : gather) g = at += static_cast<int32_t>(1 + rng() % 3) - (at == sh.prefix ? 1 : 0);
            // The causal cache: prefix, then the gathered rows in order.
            const size_t eb = type == DType::F32 ? 4 : 2, row = static_cast<size_t>(W) * eb;
            std::vector<std::byte> lk(static_cast<size_t>(total) * row), lv(lk.size());
            std::memcpy(lk.data(), k.data(), static_cast<size_t>(sh.prefix) * row);
            std::memcpy(lv.data(), v.data(), static_cast<size_t>(sh.prefix) * row);
            for (int64_t j = 0; j < sh.path; ++j) {
                std::memcpy(lk.data() + (sh.prefix + j) * row, k.data() + gather[static_cast<size_t>(j)] * row, row);
                std::memcpy(lv.data() + (sh.prefix + j) * row, v.data() + gather[static_cast<size_t>(j)] * row, row);
            }
            AttentionShape s{sh.queries, total - sh.queries, sh.n_head, sh.n_head_kv, sh.head_dim};
            s.window = sh.window;
            std::vector<float> q(static_cast<size_t>(sh.queries * sh.n_head * sh.head_dim));
            std::normal_distribution<float> nd(0.0f, 2.0f);
            for (float& x : q) x = nd(rng);
            std::vector<float> scratch(static_cast<size_t>(attention_scratch_floats(s, 2)));
            std::vector<float> want(q.size()), got(q.size());
            attention(s, q.data(), lk.data(), lv.data(), type, want.data(), scratch.data(), nullptr, SimdLevel::Scalar);
            AttentionShape g = s;
            g.gather = gather.data();
            g.gather_from = sh.prefix;
            for (SimdLevel level : supported_simd_levels())
                for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p2}) {
                    std::fill(got.begin(), got.end(), NAN);
                    attention(g, q.data(), k.data(), v.data(), type, got.data(), scratch.data(), pool, level);
                    ASSERT_TRUE(same_bits(got, want)) << simd_name(level) << " " << dtype_name(type) << " prefix "
                                                      << sh.prefix << " window " << sh.window;
                }
            // And the double-precision reference reads through the same map.
            std::vector<float> ref_l(q.size()), ref_g(q.size());
            attention_reference(s, q.data(), lk.data(), lv.data(), type, ref_l.data());
            attention_reference(g, q.data(), k.data(), v.data(), type, ref_g.data());
            EXPECT_TRUE(same_bits(ref_l, ref_g));
        }
    }
}

TEST(TreeAttention, RefusesABadGatherMap) {
    AttentionShape s{2, 10, 2, 1, 8};
    std::vector<int32_t> gather{3, -1, 5};
    s.gather = gather.data();
    s.gather_from = 9;
    std::vector<float> q(32), out(32), kv(16 * 8), scratch(4096);
    EXPECT_THROW(attention(s, q.data(), kv.data(), kv.data(), DType::F32, out.data(), scratch.data(), nullptr),
                 Error);
    s.gather_from = 11; // after the first query
    gather = {3, 4};
    EXPECT_THROW(attention(s, q.data(), kv.data(), kv.data(), DType::F32, out.data(), scratch.data(), nullptr),
                 Error);
}

// ---- the forward pass: every node is its path's linear pass ------------------------------------

class TokenTree : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenTree, EveryNodeHasItsPathsLinearLogits) {
    auto model = load(GetParam());
    const int64_t V = model->n_vocab();
    std::mt19937 rng(23);
    for (int t = 0; t < kTrees; ++t) {
        const auto prefix = random_tokens(rng, 5 + static_cast<int64_t>(rng() % 40), V);
        const int n = 2 + static_cast<int>(rng() % 17);
        const auto parents = random_parents(rng, n, t == kTrees - 1);
        const auto tokens = random_tokens(rng, n, V);
        const KvCacheOptions kvo{.capacity = 128, .type = t % 2 ? KvType::F16 : KvType::F32};
        const auto P = static_cast<int64_t>(prefix.size());
        for (SimdLevel level : supported_simd_levels()) {
            for (int threads : {1, 2}) {
                Context ctx(model, {.n_threads = threads, .max_batch = 32, .simd = level});
                KvCache base(*model, kvo);
                ctx.forward(base, prefix, Logits::None);
                KvCache c = base.fork();
                const auto lt = ctx.forward_tree(c, tokens, parents);
                const std::vector<float> tree(lt.begin(), lt.end());
                ASSERT_EQ(c.size(), P + n);
                ASSERT_EQ(tree.size(), static_cast<size_t>(n * V));
                // One linear pass per leaf covers every node on its path.
                std::vector<bool> leaf(static_cast<size_t>(n), true);
                for (int32_t a : parents)
                    if (a >= 0) leaf[static_cast<size_t>(a)] = false;
                for (int32_t i = 0; i < n; ++i) {
                    if (!leaf[static_cast<size_t>(i)]) continue;
                    const auto path = path_to(parents, i);
                    std::vector<TokenId> pt;
                    for (int32_t a : path) pt.push_back(tokens[static_cast<size_t>(a)]);
                    KvCache lc = base.fork();
                    const auto lin = ctx.forward(lc, pt, Logits::All);
                    for (size_t d = 0; d < path.size(); ++d) {
                        const auto node = static_cast<size_t>(path[d]);
                        ASSERT_TRUE(same_bits(lin.subspan(d * static_cast<size_t>(V), static_cast<size_t>(V)),
                                              std::span<const float>(tree).subspan(node * static_cast<size_t>(V),
                                                                                   static_cast<size_t>(V))))
                            << GetParam() << " " << simd_name(level) << " threads " << threads << " tree " << t
                            << " node " << node << " depth " << d;
                    }
                    // Keeping that path leaves the cache the linear pass left.
                    KvCache kept = c.fork();
                    kept.keep_path(P, path);
                    ASSERT_TRUE(kept.contents_equal(lc)) << GetParam() << " leaf " << i;
                }
            }
        }
    }
}

// A tree in a batch is the tree alone, beside a chain and another tree.
TEST_P(TokenTree, TreesInABatchEqualTreesAlone) {
    auto model = load(GetParam());
    const int64_t V = model->n_vocab();
    std::mt19937 rng(31);
    Context ctx(model, {.n_threads = 2, .max_batch = 64});
    std::vector<KvCache> caches, solo;
    std::vector<std::vector<TokenId>> toks;
    std::vector<std::vector<int32_t>> pars;
    for (int s = 0; s < 3; ++s) {
        caches.emplace_back(*model, KvCacheOptions{.capacity = 128});
        ctx.forward(caches.back(), random_tokens(rng, 3 + 11 * s, V), Logits::None);
        solo.push_back(caches.back().fork());
        const int n = 4 + 3 * s;
        toks.push_back(random_tokens(rng, n, V));
        pars.push_back(s == 1 ? std::vector<int32_t>{} : random_parents(rng, n));
    }
    std::vector<BatchItem> items;
    for (int s = 0; s < 3; ++s) items.push_back(BatchItem{&caches[s], toks[s], Logits::All, {}, pars[s]});
    ctx.forward_batch(items);
    for (int s = 0; s < 3; ++s) {
        const std::vector<float> got(items[s].logits.begin(), items[s].logits.end());
        const auto want = pars[s].empty() ? ctx.forward(solo[s], toks[s]) : ctx.forward_tree(solo[s], toks[s], pars[s]);
        EXPECT_TRUE(same_bits(got, want)) << "sequence " << s;
        EXPECT_TRUE(caches[s].contents_equal(solo[s])) << "sequence " << s;
    }
}

INSTANTIATE_TEST_SUITE_P(Models, TokenTree,
                         ::testing::ValuesIn(model_test::kExactnessModels),
                         model_test::model_param_name<::testing::TestParamInfo<const char*>>);

TEST(TokenTreeErrors, BadTreesAreRefusedWithTheCacheUnchanged) {
    auto model = load("bundled");
    Context ctx(model, {.max_batch = 8});
    KvCache c(*model, {.capacity = 64});
    ctx.forward(c, std::vector<TokenId>{1, 2, 3}, Logits::None);
    const KvCache before = c.fork();
    const std::vector<TokenId> t{5, 6, 7};
    auto code = [&](std::span<const TokenId> tok, std::span<const int32_t> par) {
        try {
            ctx.forward_tree(c, tok, par);
        } catch (const Error& e) {
            return e.code();
        }
        return ErrorCode::io; // not thrown
    };
    EXPECT_EQ(code(t, std::vector<int32_t>{-1, 0}), ErrorCode::argument);       // a parent per token
    EXPECT_EQ(code(t, std::vector<int32_t>{-1, 0, 2}), ErrorCode::argument);    // parents come first
    EXPECT_EQ(code(t, std::vector<int32_t>{-1, -2, 0}), ErrorCode::argument);   // -1 is the prefix
    EXPECT_EQ(code(std::vector<TokenId>(9, 5), std::vector<int32_t>(9, -1)), ErrorCode::capacity); // one pass
    EXPECT_TRUE(c.contents_equal(before));
    // keep_path refuses what is not a path of the last pass.
    KvCache d = c.fork();
    ctx.forward_tree(d, t, std::vector<int32_t>{-1, 0, 0});
    EXPECT_THROW(d.keep_path(3, std::vector<int32_t>{0, 2, 1}), Error);
    EXPECT_THROW(d.keep_path(3, std::vector<int32_t>{1, 0}), Error);
    EXPECT_THROW(d.keep_path(3, std::vector<int32_t>{0, 3}), Error);
    EXPECT_THROW(d.keep_path(7, std::vector<int32_t>{}), Error);
    EXPECT_EQ(d.size(), 6);
    d.keep_path(3, std::vector<int32_t>{0, 2});
    EXPECT_EQ(d.size(), 5);
    // llama.cpp's numerics give a pass-size-dependent result: no trees there.
    Context lc(model, {.max_batch = 8, .numerics = Numerics::LlamaCpp});
    try {
        lc.forward_tree(c, t, std::vector<int32_t>{-1, 0, 0});
        ADD_FAILURE() << "LlamaCpp numerics ran a tree";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::unsupported);
    }
    EXPECT_TRUE(c.contents_equal(before));
}

// ---- decoding: tree guesses change no token ----------------------------------------------------

// Knows the plain output and proposes trees around it: at each level the true token (most of the
// time) among a few wrong siblings in random order, and wrong subtrees beside the true path, so
// passes accept through branches that are not first.
class OracleTree final : public speculate::GuessSource {
public:
    OracleTree(std::vector<TokenId> truth, int64_t n_vocab, uint32_t seed)
        : truth_(std::move(truth)), V_(n_vocab), rng_(seed) {}
    std::string_view name() const override { return "oracle-tree"; }
    void reset(const speculate::GenerationStart&) override {}
    void accept(std::span<const TokenId>) override {}
    void propose(std::span<const TokenId> context, int k, speculate::Proposal& out) override {
        const size_t p = context.size();
        int32_t parent = -1;
        for (size_t d = 0; static_cast<int>(out.tokens.size()) < k; ++d) {
            const bool right = p + d < truth_.size() && rng_() % 5 != 0;
            const int siblings = 1 + static_cast<int>(rng_() % 3);
            const int true_at = right ? static_cast<int>(rng_() % static_cast<uint32_t>(siblings)) : -1;
            int32_t next = -1;
            for (int s = 0; s < siblings && static_cast<int>(out.tokens.size()) < k; ++s) {
                TokenId tok = s == true_at ? truth_[p + d] : static_cast<TokenId>(rng_() % static_cast<uint32_t>(V_));
                if (s != true_at && p + d < truth_.size() && tok == truth_[p + d]) tok = (tok + 1) % static_cast<TokenId>(V_);
                bool dup = false;
                for (size_t j = 0; j < out.tokens.size(); ++j) dup = dup || (out.parents[j] == parent && out.tokens[j] == tok);
                if (dup) continue;
                out.tokens.push_back(tok);
                out.parents.push_back(parent);
                if (s == true_at) next = static_cast<int32_t>(out.tokens.size() - 1);
            }
            // A wrong child under the first wrong sibling, to give the tree side branches.
            if (!out.tokens.empty() && static_cast<int>(out.tokens.size()) < k && rng_() % 2) {
                out.tokens.push_back(static_cast<TokenId>(rng_() % static_cast<uint32_t>(V_)));
                out.parents.push_back(static_cast<int32_t>(out.tokens.size() - 2));
                // Siblings must differ: drop it if it repeats its parent's other child.
                for (size_t j = 0; j + 1 < out.tokens.size(); ++j)
                    if (out.parents[j] == out.parents.back() && out.tokens[j] == out.tokens.back()) {
                        out.tokens.pop_back();
                        out.parents.pop_back();
                        break;
                    }
            }
            if (next < 0) break;
            parent = next;
        }
        speculate::check_proposal(name(), out);
    }

private:
    std::vector<TokenId> truth_;
    int64_t V_;
    std::mt19937 rng_;
};

GenerateOptions sampled(int64_t n, bool sample) {
    GenerateOptions g;
    g.max_tokens = n;
    g.stop_at_eog = false;
    if (sample) {
        g.sampler.temperature = 0.8f;
        g.sampler.top_k = 40;
        g.sampler.seed = 1234;
    }
    return g;
}

speculate::SpeculativeOptions spec_options(const GenerateOptions& g, int k, KPolicy policy = KPolicy::Fixed,
                                           VerifyMode verify = VerifyMode::Exact) {
    speculate::SpeculativeOptions so;
    so.generate = g;
    so.k = k;
    so.k_policy = policy;
    so.verify = verify;
    return so;
}

// The prompt followed by what plain decoding generates from it: what an oracle proposes from.
std::vector<TokenId> with_output(std::vector<TokenId> prompt, const std::vector<TokenId>& generated) {
    prompt.insert(prompt.end(), generated.begin(), generated.end());
    return prompt;
}

TEST(TreeDecoding, SpeculativeOutputEqualsPlainGreedyAndSampled) {
    for (const char* name : {"pycode-4m", "bundled", "arch-gemma3", "arch-phi3"}) {
        auto model = load(name);
        const auto prompt = model->tokenizer().encode("def fibonacci(n):\n    if n < 2:\n        return n\n");
        for (bool sample : {false, true}) {
            const GenerateOptions g = sampled(48, sample);
            Context ctx(model, {.n_threads = 2});
            KvCache pc(*model, {.capacity = 256});
            const GenerateResult plain = generate_plain(ctx, pc, prompt, g);
            const auto truth = with_output(prompt, plain.tokens);
            for (int k : {1, 5, 12}) {
                OracleTree src(truth, model->n_vocab(), static_cast<uint32_t>(k));
                KvCache sc(*model, {.capacity = 256});
                const auto r = speculate::generate_speculative(ctx, sc, prompt, src, spec_options(g, k));
                EXPECT_EQ(r.tokens, plain.tokens) << name << " sample " << sample << " k " << k;
                EXPECT_GT(r.stats.accepted, 0) << name;
                if (k > 1) {
                    EXPECT_GT(r.stats.tree_passes, 0) << name;
                }
                // The cache holds exactly what plain decoding left.
                EXPECT_TRUE(sc.contents_equal(pc)) << name << " sample " << sample << " k " << k;
            }
        }
    }
}

TEST(TreeDecoding, BatchedTreesEqualPlain) {
    auto model = load("pycode-4m");
    Context ctx(model, {.n_threads = 2, .max_batch = 64});
    const char* texts[] = {"import os\n", "class Stack:\n    def __init__(self):\n", "for i in range(10):\n"};
    std::vector<std::vector<TokenId>> want;
    speculate::BatchDecoder dec(ctx);
    std::vector<uint64_t> ids;
    for (int i = 0; i < 3; ++i) {
        const auto prompt = model->tokenizer().encode(texts[i]);
        const GenerateOptions g = sampled(40, i == 1);
        KvCache pc(*model, {.capacity = 256});
        want.push_back(generate_plain(ctx, pc, prompt, g).tokens);
        speculate::BatchRequest r;
        r.prompt = prompt;
        r.generate = g;
        r.source = std::make_unique<OracleTree>(with_output(prompt, want.back()), model->n_vocab(),
                                                7u + static_cast<uint32_t>(i));
        r.k = 6 + 2 * i;
        ids.push_back(dec.submit(std::move(r)));
    }
    std::map<uint64_t, speculate::BatchResult> out;
    while (dec.active() > 0)
        for (auto& r : dec.step()) out[r.id] = std::move(r);
    for (int i = 0; i < 3; ++i) {
        ASSERT_FALSE(out[ids[i]].failed) << out[ids[i]].error;
        EXPECT_EQ(out[ids[i]].tokens, want[i]) << "request " << i;
        EXPECT_GT(out[ids[i]].stats.tree_passes, 0);
    }
}

// The cost policy keeps the guesses that pay for their rows: with a steep cost curve it verifies
// fewer than proposed, with a flat one all of them, and never changes a token.
TEST(TreeDecoding, CostPolicyTrimsByTheCostCurveAndChangesNoToken) {
    auto model = load("pycode-4m");
    const auto prompt = model->tokenizer().encode("def fibonacci(n):\n    if n < 2:\n");
    Context ctx(model);
    KvCache pc(*model, {.capacity = 256});
    const GenerateOptions g = sampled(40, false);
    const auto plain = generate_plain(ctx, pc, prompt, g);
    const auto truth = with_output(prompt, plain.tokens);
    double guesses[2] = {0, 0};
    for (int steep : {0, 1}) {
        std::vector<double> curve;
        for (int n = 1; n <= 16; ++n) curve.push_back(steep ? n : 1.0 + 1e-6 * n);
        OracleTree src(truth, model->n_vocab(), 5);
        KvCache sc(*model, {.capacity = 256});
        speculate::SpeculativeOptions so = spec_options(g, 12, KPolicy::Cost);
        so.pass_seconds = curve;
        const auto r = speculate::generate_speculative(ctx, sc, prompt, src, so);
        EXPECT_EQ(r.tokens, plain.tokens) << "steep " << steep;
        guesses[steep] = r.stats.guesses_per_pass();
    }
    EXPECT_LT(guesses[1], guesses[0]);
    EXPECT_GT(guesses[0], 4.0);
}

// Every source of the factory, asked to branch, proposes trees and changes no token: greedy and
// seeded sampling, fixed and cost-sized passes.
TEST(TreeDecoding, EveryBranchingSourceEqualsPlain) {
    auto target = load("pycode-4m");
    auto draft = load("pycode-600k");
    const std::string text = "def parse(line):\n    parts = line.split(',')\n    return [p.strip() for p in parts]\n\n"
                             "def parse_all(lines):\n    return [parse(l) for l in lines]\n\ndef parse";
    const auto prompt = target->tokenizer().encode(text);
    Context ctx(target);
    for (bool sample : {false, true}) {
        const GenerateOptions g = sampled(40, sample);
        KvCache pc(*target, {.capacity = 512});
        const auto plain = generate_plain(ctx, pc, prompt, g);
        for (const char* kind : {"ngram", "ref", "suffix", "draft", "auto"}) {
            for (KPolicy policy : {KPolicy::Fixed, KPolicy::Cost}) {
                speculate::SourceSpec spec;
                speculate::parse_source_kind(kind, spec);
                spec.branches = 3;
                if (spec.kind == speculate::SourceKind::Ref || spec.kind == speculate::SourceKind::Auto)
                    spec.references = {text + "(lines):\n    return [parse(l) for l in lines if l]\n"};
                if (spec.kind == speculate::SourceKind::Draft || spec.kind == speculate::SourceKind::Auto) spec.draft = draft;
                auto src = speculate::make_guess_source(spec, *target, 512);
                KvCache sc(*target, {.capacity = 512});
                const auto r = speculate::generate_speculative(ctx, sc, prompt, *src, spec_options(g, 12, policy));
                EXPECT_EQ(r.tokens, plain.tokens) << kind << " sample " << sample << " " << k_policy_name(policy);
                EXPECT_TRUE(sc.contents_equal(pc)) << kind;
            }
        }
    }
}

// Rejection mode judges a chain: a tree proposal is cut to its first children, and runs.
TEST(TreeDecoding, RejectionModeVerifiesTheFirstChildren) {
    auto model = load("pycode-4m");
    const auto prompt = model->tokenizer().encode("def add(a, b):\n");
    Context ctx(model);
    KvCache pc(*model, {.capacity = 256});
    const GenerateOptions g = sampled(32, true);
    const auto plain = generate_plain(ctx, pc, prompt, g);
    OracleTree src(with_output(prompt, plain.tokens), model->n_vocab(), 3);
    KvCache sc(*model, {.capacity = 256});
    const auto r = speculate::generate_speculative(ctx, sc, prompt, src,
                                                   spec_options(g, 8, KPolicy::Fixed, VerifyMode::Rejection));
    EXPECT_EQ(r.tokens.size(), 32u);
    EXPECT_EQ(r.stats.tree_passes, 0);
}

} // namespace
} // namespace rwd
