// Bit-exact invariants of Context::forward (memcmp, never a tolerance): batching, rollback and
// thread count never change a value; an F16 cache stays close to F32; decoding allocates nothing;
// bad input throws rwd::Error with the cache exactly as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <optional>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/kv_cache.h"
#include "rewind/kernels/packed.h"
#include "rewind/model.h"
#include "rewind/sampler.h"
#include "fixtures.h"
#include "gguf_test_util.h"
#include "model_test_util.h"

// Heap allocations made while g_count_allocations is set (any thread): the decode hot path must
// make none. Replacing the global operator new is the only way to see them all; every
// non-aligned form of new and delete is replaced, so each pair matches (AddressSanitizer checks).
static std::atomic<bool> g_count_allocations{false};
static std::atomic<long> g_allocations{0};
static std::atomic<std::size_t> g_largest{0}; // the largest single allocation while counting

// Out of line: inlined into callers, GCC pairs malloc() with delete and warns of a mismatch.
__attribute__((noinline)) static void* counted_malloc(std::size_t n) noexcept {
    if (g_count_allocations.load(std::memory_order_relaxed)) {
        g_allocations.fetch_add(1, std::memory_order_relaxed);
        std::size_t seen = g_largest.load(std::memory_order_relaxed);
        while (n > seen && !g_largest.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
        }
    }
    return std::malloc(n ? n : 1);
}
__attribute__((noinline)) void* operator new(std::size_t n) {
    if (void* p = counted_malloc(n)) return p;
    throw std::bad_alloc();
}
__attribute__((noinline)) void* operator new[](std::size_t n) {
    if (void* p = counted_malloc(n)) return p;
    throw std::bad_alloc();
}
__attribute__((noinline)) void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_malloc(n); }
__attribute__((noinline)) void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_malloc(n); }
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete[](void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, std::size_t) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace rwd {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
constexpr int kSplits = 6; // sanitizers run ~10x slower; fewer random splits, same coverage of paths
#else
constexpr int kSplits = 24;
#endif

using model_test::load;
using model_test::random_tokens;
using model_test::same_bits;

std::vector<float> copy(std::span<const float> s) { return {s.begin(), s.end()}; }

std::vector<TokenId> concat(const std::vector<TokenId>& a, std::span<const TokenId> b) {
    std::vector<TokenId> r(a);
    r.insert(r.end(), b.begin(), b.end());
    return r;
}

// F32 weights (pycode-4m) and Q8_0 weights (the bundled model) take different matmul paths; the
// arch-* files run each architecture's own steps (biases, Q/K norms, fused weights, GELU, window).
class Forward : public ::testing::TestWithParam<const char*> {};

// (a) forward(P, T) row i == forward(P + T[:i], [T[i]]), for random P, T and random chunkings of
// the prefix, with the caches bit-identical at the end.
TEST_P(Forward, RowsIndependentOfBatching) {
    auto model = load(GetParam());
    const int64_t V = model->n_vocab();
    Context ctx(model, {.n_threads = 1, .max_batch = 32});
    std::mt19937 rng(1234);
    // The kq-256 files (wider, 4 layers) cost ~5x a pycode split: fewer splits, same paths covered.
    const int splits = std::string(GetParam()).starts_with("kq-") ? std::max(2, kSplits / 4) : kSplits;
    for (int it = 0; it < splits; ++it) {
        const int64_t np = std::uniform_int_distribution<int64_t>(0, 60)(rng);
        const int64_t nt = std::uniform_int_distribution<int64_t>(1, 17)(rng);
        const auto P = random_tokens(rng, np, V);
        const auto T = random_tokens(rng, nt, V);
        SCOPED_TRACE("split " + std::to_string(it) + ": |P|=" + std::to_string(np) + " |T|=" + std::to_string(nt));

        KvCache whole(*model);
        if (np > 0) ctx.forward(whole, P, Logits::None);
        const auto all = copy(ctx.forward(whole, T, Logits::All));
        ASSERT_EQ(all.size(), static_cast<size_t>(nt * V));

        // P in random chunks (once), then for each i: T[:i] in random chunks on a fork, then T[i].
        auto feed = [&](KvCache& c, std::span<const TokenId> toks) {
            size_t done = 0;
            while (done < toks.size()) {
                const size_t n = std::min(toks.size() - done,
                                          static_cast<size_t>(std::uniform_int_distribution<int>(1, 40)(rng)));
                ctx.forward(c, toks.subspan(done, n), Logits::None);
                done += n;
            }
        };
        KvCache base(*model);
        feed(base, P);
        for (int64_t i = 0; i < nt; ++i) {
            KvCache c = base.fork();
            feed(c, std::span(T).first(static_cast<size_t>(i)));
            const auto row = ctx.forward(c, std::span(T).subspan(static_cast<size_t>(i), 1), Logits::Last);
            ASSERT_TRUE(same_bits(row, std::span(all).subspan(static_cast<size_t>(i * V), static_cast<size_t>(V))))
                << "row " << i;
            if (i == nt - 1) {
                EXPECT_TRUE(c.contents_equal(whole));
            }
        }
    }
}

// Logits::Last over several internal chunks equals the last row of one big pass; None fills
// the same cache without logits.
TEST_P(Forward, ChunkingAndLogitModes) {
    auto model = load(GetParam());
    std::mt19937 rng(7);
    const auto T = random_tokens(rng, 45, model->n_vocab());
    Context big(model, {.n_threads = 1, .max_batch = 64});
    Context small(model, {.n_threads = 1, .max_batch = 8});
    KvCache a(*model), b(*model), c(*model);
    const auto all = copy(big.forward(a, T, Logits::All));
    const auto last = small.forward(b, T, Logits::Last);
    EXPECT_TRUE(same_bits(last, std::span(all).last(static_cast<size_t>(model->n_vocab()))));
    EXPECT_TRUE(small.forward(c, T, Logits::None).empty());
    EXPECT_TRUE(a.contents_equal(b));
    EXPECT_TRUE(a.contents_equal(c));
    EXPECT_EQ(small.tokens_processed(), 90u);
}

// (b) truncate then recompute equals a fresh computation, logits and cache contents.
TEST_P(Forward, TruncateThenRecomputeEqualsFresh) {
    auto model = load(GetParam());
    const int64_t V = model->n_vocab();
    Context ctx(model, {.n_threads = 1, .max_batch = 32});
    std::mt19937 rng(99);
    for (int it = 0; it < std::max(2, kSplits / 4); ++it) {
        const auto P = random_tokens(rng, 20 + it, V);
        const auto bad = random_tokens(rng, 9, V);
        const auto good = random_tokens(rng, 6, V);
        KvCache c(*model);
        ctx.forward(c, P, Logits::None);
        ctx.forward(c, bad, Logits::All);
        c.truncate(static_cast<int64_t>(P.size()) + 2); // keep two of the rejected guesses
        const auto kept = concat(P, std::span(bad).first(2));
        const auto again = copy(ctx.forward(c, good, Logits::All));

        KvCache fresh(*model);
        ctx.forward(fresh, kept, Logits::None);
        const auto want = ctx.forward(fresh, good, Logits::All);
        EXPECT_TRUE(same_bits(again, want));
        EXPECT_TRUE(c.contents_equal(fresh));
    }
}

// (c) 1 thread == 2 threads == 3 threads, bit for bit.
TEST_P(Forward, ThreadCountDoesNotChangeBits) {
    auto model = load(GetParam());
    std::mt19937 rng(5);
    const auto P = random_tokens(rng, 37, model->n_vocab());
    const auto T = random_tokens(rng, 9, model->n_vocab());
    std::vector<float> ref;
    KvCache ref_cache(*model);
    for (int threads : {1, 2, 3}) {
        Context ctx(model, {.n_threads = threads, .max_batch = 16});
        KvCache c(*model);
        ctx.forward(c, P, Logits::Last);
        const auto l = copy(ctx.forward(c, T, Logits::All));
        if (threads == 1) {
            ref = l;
            ref_cache = c.fork();
        } else {
            EXPECT_TRUE(same_bits(l, ref)) << threads << " threads";
            EXPECT_TRUE(c.contents_equal(ref_cache)) << threads << " threads";
        }
    }
}

// And every 4/5/6-bit type, from llama.cpp's own quantizations: the pycode-4m files mix Q4_0, Q5_0,
// Q5_1, Q8_0 with Q4_K/Q5_K/Q6_K (its 192-wide rows force the fallbacks); the kq-256 files are
// almost all K-quants. And every architecture (arch-gemma3's window of 32 is crossed by the
// longer prefixes above).
INSTANTIATE_TEST_SUITE_P(Models, Forward,
                         ::testing::ValuesIn(model_test::kExactnessModels),
                         model_test::model_param_name<::testing::TestParamInfo<const char*>>);

// (d) An F16 cache runs, keeps the batching invariant, and stays close to the F32 cache.
TEST(ForwardF16, CloseToF32AndBatchInvariant) {
    auto model = load("pycode-4m");
    const int64_t V = model->n_vocab();
    Context ctx(model, {.n_threads = 2, .max_batch = 64});
    std::mt19937 rng(11);
    const auto T = random_tokens(rng, 40, V);
    KvCache c32(*model), c16(*model, {.capacity = 128, .type = KvType::F16});
    EXPECT_EQ(c16.dtype(), DType::F16);
    EXPECT_EQ(c16.bytes_per_position() * 2, c32.bytes_per_position());
    const auto l32 = copy(ctx.forward(c32, T, Logits::All));
    const auto l16 = copy(ctx.forward(c16, T, Logits::All));
    double worst = 0;
    for (size_t i = 0; i < l32.size(); ++i) worst = std::max(worst, std::fabs(double(l32[i]) - l16[i]));
    // Measured ~1e-2 on these 40 random tokens: K/V rounded to half precision (11-bit mantissa).
    EXPECT_LT(worst, 0.1) << "F16 cache strays from F32";
    EXPECT_GT(worst, 0.0) << "F16 cache should round something";

    KvCache step(*model, {.capacity = 128, .type = KvType::F16});
    ctx.forward(step, std::span(T).first(39), Logits::None);
    const auto last = ctx.forward(step, std::span(T).last(1), Logits::Last);
    EXPECT_TRUE(same_bits(last, std::span(l16).last(static_cast<size_t>(V))));
    EXPECT_TRUE(step.contents_equal(c16));
}

// Numerics::LlamaCpp: ggml's roundings, so rows depend on the pass size (one body under 64
// tokens, another from 64 on) but never on the thread count, nor on the split below 64.
TEST(ForwardLlamaCpp, ThreadsAndSmallSplitsKeepBitsPassSizeDoesNot) {
    auto model = load("pycode-4m");
    const int64_t V = model->n_vocab();
    std::mt19937 rng(5);
    const auto T = random_tokens(rng, 80, V);
    const KvCacheOptions f16{.capacity = 128, .type = KvType::F16};
    Context one(model, {.n_threads = 1, .max_batch = 128, .numerics = Numerics::LlamaCpp});
    Context two(model, {.n_threads = 2, .max_batch = 128, .numerics = Numerics::LlamaCpp});
    KvCache a(*model, f16), b(*model, f16);
    const auto la = copy(one.forward(a, T, Logits::All));
    EXPECT_TRUE(same_bits(la, two.forward(b, T, Logits::All)));
    EXPECT_TRUE(a.contents_equal(b));

    // 40 tokens, then 30 + 10: both passes under 64 tokens, so the same bits.
    KvCache c(*model, f16), d(*model, f16);
    const auto lc = copy(one.forward(c, std::span(T).first(40), Logits::All));
    one.forward(d, std::span(T).first(30), Logits::None);
    const auto ld = copy(one.forward(d, std::span(T).subspan(30, 10), Logits::All));
    EXPECT_TRUE(same_bits(std::span(lc).last(static_cast<size_t>(10 * V)), ld));
    // The 80-token pass took the tiled body: its first 40 rows differ from the 40-token pass.
    EXPECT_FALSE(same_bits(std::span(la).first(static_cast<size_t>(40 * V)), lc));
    double worst = 0;
    for (size_t i = 0; i < lc.size(); ++i) worst = std::max(worst, std::fabs(double(lc[i]) - la[i]));
    EXPECT_LT(worst, 0.05) << "the two ggml bodies should differ only by F16 roundings";
}

// The decode loop -- a pass over k+1 tokens (verification), a 1-token pass, sampling -- makes
// no heap allocation: every buffer was sized when the Context, cache and Sampler were made.
TEST(ForwardHotPath, DecodeAllocatesNothing) {
    for (int threads : {1, 2}) {
        for (Numerics numerics : {Numerics::Exact, Numerics::LlamaCpp}) {
            auto model = load("pycode-4m");
            Context ctx(model, {.n_threads = threads, .max_batch = 64, .numerics = numerics});
            KvCache cache(*model, {.capacity = 128});
            SamplerOptions so;
            so.temperature = 0.8f;
            so.top_k = 40;
            so.top_p = 0.9f;
            so.seed = 3;
            Sampler sampler(so, model->n_vocab());
            std::mt19937 rng(9);
            const auto prompt = random_tokens(rng, 30, model->n_vocab());
            std::vector<TokenId> history(prompt);
            history.reserve(128);
            ctx.forward(cache, prompt, Logits::Last); // warm-up outside the window
            std::vector<TokenId> nine(9, 5);
            g_allocations = 0;
            g_count_allocations = true;
            { // the counter sees an allocation when there is one (through a volatile pointer:
              // clang may elide a new/delete pair whose result does not escape)
                int* volatile probe = new int(1);
                const long seen = g_allocations.exchange(0);
                delete probe;
                ASSERT_EQ(seen, 1);
            }
            for (int step = 0; step < 8; ++step) {
                const auto all = ctx.forward(cache, nine, Logits::All);
                cache.truncate(cache.size() - 9);
                const auto last = ctx.forward(cache, std::span(history).last(1), Logits::Last);
                const TokenId t = sampler.sample(last.data(), cache.size(), history);
                history.push_back(t);
                (void)all;
            }
            g_count_allocations = false;
            EXPECT_EQ(g_allocations.load(), 0) << threads << " threads, numerics " << int(numerics);
        }
    }
}

// A batched pass (forward_batch) over sequences of different lengths and token counts -- the
// batch decoder's loop: verification rows, single-token rows, rollbacks -- allocates nothing,
// for each weight type's matmul path (F32, packed Q8_0, F16, the 4/5/6-bit mixes) and the expert
// FFN (once its experts are packed: a first use packs, allocating nothing of the heap either, but
// the untimed round keeps the count about the pass).
TEST(ForwardHotPath, BatchAllocatesNothing) {
    for (const char* name : {"pycode-4m", "bundled", "pycode-4m-f16", "pycode-4m-q4_k_m", "dummy-qwen3-moe-tiny-q4_k_m"})
    for (int threads : {1, 2}) {
        auto model = load(name);
        Context ctx(model, {.n_threads = threads, .max_batch = 64});
        std::mt19937 rng(4);
        std::vector<KvCache> caches;
        for (int i = 0; i < 3; ++i) {
            caches.emplace_back(*model, KvCacheOptions{.capacity = 128});
            ctx.forward(caches.back(), random_tokens(rng, 10 + 7 * i, model->n_vocab()), Logits::Last);
        }
        const std::vector<TokenId> nine(9, 5), one(1, 7);
        std::vector<BatchItem> items{{&caches[0], nine, Logits::All, {}},
                                     {&caches[1], one, Logits::Last, {}},
                                     {&caches[2], nine, Logits::All, {}}};
        ctx.forward_batch(items);
        caches[0].truncate(caches[0].size() - 9);
        caches[1].truncate(caches[1].size() - 1);
        caches[2].truncate(caches[2].size() - 9);
        g_allocations = 0;
        g_count_allocations = true;
        for (int step = 0; step < 6; ++step) {
            ctx.forward_batch(items);
            caches[0].truncate(caches[0].size() - 8);
            caches[2].truncate(caches[2].size() - 9);
        }
        g_count_allocations = false;
        EXPECT_EQ(g_allocations.load(), 0) << name << ", " << threads << " threads";
    }
}

// A file may claim any context length (fuzz_gguf: 2^31 positions made the Context reserve a
// 2 GiB attention scratch for a cache of 4). The scratch follows the caches actually run: small
// at construction, grown once (before anything changes) on the first pass of a longer cache,
// never again for it; the logits are the same bits whatever the claimed length or the cache.
TEST(ForwardHotPath, AttentionScratchFollowsTheCacheNotTheClaimedContext) {
    gguf_test::Builder b = gguf_test::Builder::load(gguf_test::model_path("pycode-600k.gguf"));
    b.set("llama.context_length", gguf_test::U32, gguf_test::raw<uint32_t>(0x7fffffffu));
    const std::string bytes = b.serialize();
    const auto huge = Model::load_from_memory(std::as_bytes(std::span(bytes.data(), bytes.size())), "huge-context.gguf");
    ASSERT_EQ(huge->hparams().n_ctx_train, 0x7fffffff);
    const auto model = load("pycode-600k");
    std::mt19937 rng(5);
    const auto toks = random_tokens(rng, 12, model->n_vocab());

    g_largest = 0;
    g_count_allocations = true;
    auto ctx = std::make_unique<Context>(huge, ContextOptions{.n_threads = 2, .max_batch = 16});
    g_count_allocations = false;
    EXPECT_LT(g_largest.load(), std::size_t{64} << 20) << "a Context of a 2^31-position model";

    Context plain(model, {.n_threads = 2, .max_batch = 16});
    KvCache small(*huge, {.capacity = 16}), ref(*model, {.capacity = 16});
    const auto want = copy(plain.forward(ref, toks, Logits::All));
    EXPECT_TRUE(same_bits(ctx->forward(small, toks, Logits::All), want));

    // Longer than the default capacity: the first pass grows the scratch, the next ones do not.
    KvCache longer(*huge, {.capacity = 3 * kDefaultKvCapacity});
    EXPECT_TRUE(same_bits(ctx->forward(longer, toks, Logits::All), want));
    longer.truncate(0);
    g_allocations = 0;
    g_count_allocations = true;
    const auto again = ctx->forward(longer, toks, Logits::All);
    g_count_allocations = false;
    EXPECT_EQ(g_allocations.load(), 0);
    EXPECT_TRUE(same_bits(again, want));
}

// A 17-token verification at the very end of a full context, with a Context that allows 256-token
// passes: its attention tile (17 tokens) is larger than a 256-token pass's (16), so sizing the
// scratch by the longest pass alone was too small there ("attention scratch too small").
TEST(ForwardHotPath, SeventeenTokensAtTheEndOfTheContextFit) {
    const auto model = load("pycode-600k");
    const int64_t n_ctx = model->hparams().n_ctx_train;
    std::mt19937 rng(6);
    const auto prompt = random_tokens(rng, n_ctx - 17, model->n_vocab());
    const auto tail = random_tokens(rng, 17, model->n_vocab());
    Context ctx(model, {.n_threads = 2, .max_batch = 256});
    KvCache cache(*model, {.capacity = n_ctx});
    ctx.forward(cache, prompt, Logits::None);
    EXPECT_NO_THROW(ctx.forward(cache, tail, Logits::All));
    EXPECT_EQ(cache.size(), n_ctx);
}

// Every bad input throws rwd::Error before anything changes.
TEST(ForwardErrors, BadInputLeavesCacheUnchanged) {
    auto model = load("pycode-4m");
    auto other = load("pycode-600k");
    const int64_t V = model->n_vocab();
    Context ctx(model, {.n_threads = 1, .max_batch = 8});
    KvCache c(*model, {.capacity = 24});
    std::mt19937 rng(3);
    ctx.forward(c, random_tokens(rng, 10, V), Logits::Last);
    const KvCache before = c.fork();
    const uint64_t processed = ctx.tokens_processed();

    auto expect_refused = [&](KvCache& cache, std::vector<TokenId> toks, Logits which, ErrorCode code,
                              const char* what) {
        SCOPED_TRACE(what);
        try {
            ctx.forward(cache, toks, which);
            ADD_FAILURE() << "no error";
        } catch (const Error& e) {
            EXPECT_FALSE(std::string(e.what()).empty());
            EXPECT_EQ(e.code(), code) << error_code_name(e.code()) << ": " << e.what();
        }
        EXPECT_EQ(ctx.tokens_processed(), processed);
    };
    expect_refused(c, {}, Logits::All, ErrorCode::argument, "empty input");
    expect_refused(c, {1, 2, static_cast<TokenId>(V)}, Logits::All, ErrorCode::argument, "id == n_vocab");
    expect_refused(c, {-1}, Logits::Last, ErrorCode::argument, "negative id");
    expect_refused(c, random_tokens(rng, 15, V), Logits::Last, ErrorCode::capacity, "capacity overflow (10 + 15 > 24)");
    expect_refused(c, random_tokens(rng, 9, V), Logits::All, ErrorCode::capacity, "Logits::All over max_batch");
    EXPECT_EQ(c.size(), 10);
    EXPECT_TRUE(c.contents_equal(before));

    KvCache foreign(*other, {.capacity = 24});
    Context octx(other);
    octx.forward(foreign, std::vector<TokenId>{1, 2, 3}, Logits::None);
    const KvCache foreign_before = foreign.fork();
    expect_refused(foreign, {1, 2}, Logits::Last, ErrorCode::state, "cache of another model");
    EXPECT_TRUE(foreign.contents_equal(foreign_before));

    // The cache still works after all that, and fills exactly to capacity.
    EXPECT_NO_THROW(ctx.forward(c, random_tokens(rng, 14, V), Logits::Last));
    EXPECT_EQ(c.size(), 24);
    const KvCache full = c.fork();
    const uint64_t processed_full = ctx.tokens_processed();
    EXPECT_THROW(ctx.forward(c, std::vector<TokenId>{5}, Logits::Last), Error);
    EXPECT_EQ(ctx.tokens_processed(), processed_full);
    EXPECT_TRUE(c.contents_equal(full));
}

TEST(ForwardErrors, BadOptionsAndFiles) {
    auto model = load("pycode-600k");
    EXPECT_THROW(Context(model, {.n_threads = 0}), Error);
    EXPECT_THROW(Context(model, {.n_threads = 1, .max_batch = 0}), Error);
    EXPECT_THROW(Context(model, {.n_threads = 1, .max_batch = 8, .numerics = static_cast<Numerics>(9)}), Error);
    EXPECT_THROW(Context(nullptr), Error);
    // max_batch is clamped to the context length: no pass can be longer.
    EXPECT_EQ(Context(model, {.n_threads = 1, .max_batch = 100000}).options().max_batch,
              model->hparams().n_ctx_train);
    auto code_of = [](auto&& f) -> std::optional<ErrorCode> {
        try {
            f();
        } catch (const Error& e) {
            return e.code();
        }
        return std::nullopt;
    };
    EXPECT_EQ(code_of([&] { Model::load("/nonexistent/model.gguf"); }), ErrorCode::io);
    EXPECT_EQ(code_of([&] { Model::load(std::string(REWIND_SHARED_DIR) + "/vocab/ggml-vocab-llama-spm.gguf"); }),
              ErrorCode::format);
    EXPECT_EQ(code_of([&] { Context(model, {.n_threads = 0}); }), ErrorCode::argument);
}

// A weight stored as a type the kernels cannot compute with is refused by name. The file is a
// copy of pycode-600k with one tensor's type id patched from F32 to Q8_1 (a type llama.cpp uses
// only for activations; its data shrinks, so the file stays well-formed).
TEST(ModelLoad, RefusesUnsupportedWeightTypeByName) {
    const std::string src = std::string(REWIND_SHARED_DIR) + "/models/pycode-600k.gguf";
    REWIND_NEED_FIXTURE(src);
    std::ifstream in(src, std::ios::binary);
    std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
    const std::string name = "blk.1.ffn_up.weight";
    // Tensor info: u64 name length, name, u32 n_dims, u64 dims[n_dims], u32 type, u64 offset.
    std::string needle(8, '\0');
    const uint64_t len = name.size();
    std::memcpy(needle.data(), &len, 8);
    needle += name;
    const auto at = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
    ASSERT_NE(at, bytes.end());
    size_t pos = static_cast<size_t>(at - bytes.begin()) + needle.size();
    uint32_t n_dims = 0, type = 0;
    std::memcpy(&n_dims, &bytes[pos], 4);
    pos += 4 + 8 * size_t{n_dims};
    std::memcpy(&type, &bytes[pos], 4);
    ASSERT_EQ(type, 0u); // F32
    type = 9;            // Q8_1
    std::memcpy(&bytes[pos], &type, 4);
    const std::string path = ::testing::TempDir() + "rewind_q8_1_patched.gguf";
    {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    try {
        Model::load(path);
        ADD_FAILURE() << "loaded a Q8_1 weight";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(name), std::string::npos) << msg;
        EXPECT_NE(msg.find("Q8_1"), std::string::npos) << msg;
        EXPECT_EQ(e.code(), ErrorCode::unsupported) << msg;
    }
    std::remove(path.c_str());
}

// The repacking at load runs on threads of its own; how many never changes a packed byte (every
// kind here: Q8_0, Q5_1 widened, Q5_K, Q6_K). A negative count is refused.
TEST(ModelLoad, RepackingThreadsDoNotChangeThePackedWeights) {
    const std::string path = std::string(REWIND_SHARED_DIR) + "/models/pycode-4m-q5_k_m.gguf";
    const auto one = Model::load(path, ModelOptions{.load_threads = 1});
    const auto three = Model::load(path, ModelOptions{.load_threads = 3});
    ASSERT_GT(one->packed_bytes(), 0u);
    EXPECT_EQ(one->packed_bytes(), three->packed_bytes());
    auto bytes = [](const MatrixView& w) { return packed_bytes(w.type, w.rows, w.cols); };
    std::map<DType, int> seen;
    for (size_t l = 0; l < one->layers.size(); ++l)
        for (auto mp : {&Model::Layer::wq, &Model::Layer::wk, &Model::Layer::wv, &Model::Layer::wo, &Model::Layer::ffn_gate,
                        &Model::Layer::ffn_up, &Model::Layer::ffn_down}) {
            const MatrixView& a = one->layers[l].*mp;
            const MatrixView& b = three->layers[l].*mp;
            if (!a.data) continue;
            ASSERT_NE(a.packed, nullptr) << "layer " << l << " " << dtype_name(a.type);
            ASSERT_NE(b.packed, nullptr);
            EXPECT_EQ(0, std::memcmp(a.packed, b.packed, bytes(a))) << "layer " << l << " " << dtype_name(a.type);
            ++seen[a.type];
        }
    for (DType t : {DType::Q5_1, DType::Q5_K, DType::Q6_K, DType::Q8_0}) EXPECT_GT(seen[t], 0) << dtype_name(t);
    try {
        Model::load(path, ModelOptions{.load_threads = -1});
        ADD_FAILURE() << "accepted load_threads -1";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::argument);
        EXPECT_NE(std::string(e.what()).find("load_threads"), std::string::npos) << e.what();
    }
}

TEST(ModelLoad, WeightsAndHyperparameters) {
    auto m = load("pycode-4m");
    const LlamaHparams& hp = m->hparams();
    EXPECT_EQ(hp.n_embd, 192);
    EXPECT_EQ(hp.n_layer, 6);
    EXPECT_EQ(hp.n_head_kv, 2);
    EXPECT_EQ(m->layers.size(), 6u);
    EXPECT_EQ(m->layers[0].wk.rows, hp.n_embd_kv());
    EXPECT_EQ(m->tok_embd.type, DType::F32);
    EXPECT_NE(m->output.data, m->tok_embd.data); // untied head
    auto q = load("bundled");
    EXPECT_EQ(q->layers[0].wq.type, DType::Q8_0);
    EXPECT_NE(q->output_norm, nullptr);
    auto tied = load("pycode-600k");
    EXPECT_EQ(tied->output.data, tied->tok_embd.data); // tied head
    auto f16 = load("pycode-4m-f16");
    EXPECT_EQ(f16->layers[0].ffn_up.type, DType::F16);
}

} // namespace
} // namespace rwd
