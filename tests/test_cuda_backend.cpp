// The CUDA backend of Context (runtime/src/cuda_backend.cpp) and device selection
// (rewind/device.h): `--device` parsing and the clear refusal where CUDA is not built or no GPU
// is present (both run everywhere); on a GPU: logits within rounding of the CPU's with the same
// greedy tokens (margin rule), bit-identical logits for a token whatever its pass size (memcmp),
// truncate / fork / save / load round trips through the device mirror, and lossless speculative
// decoding on the device (every source; greedy and sampled).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "rewind/context.h"
#include "rewind/device.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/kernels/cuda.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/source_factory.h"

using namespace rwd;

namespace {

const std::string kShared = REWIND_SHARED_DIR;
constexpr int64_t kCapacity = 1024;

#define REQUIRE_GPU()                                                                                         \
    do {                                                                                                      \
        if (!cuda_backend_built()) GTEST_SKIP() << "built without the CUDA backend (REWIND_CUDA=OFF or no toolkit)"; \
        if (cuda_device_count() == 0)                                                                         \
            GTEST_SKIP() << "no CUDA device on this machine (or no driver): this GPU test runs in "           \
                            "scripts/gpu-check.sh on a machine with one";                                     \
    } while (0)

ContextOptions on_cuda(int64_t max_batch = 256) {
    return ContextOptions{.n_threads = 1, .max_batch = max_batch, .device = Device{DeviceKind::Cuda, 0}};
}

std::vector<TokenId> some_tokens(const Model& m, size_t n, uint32_t seed) {
    std::vector<TokenId> t(n);
    uint32_t x = seed;
    for (auto& id : t) {
        x = x * 1664525u + 1013904223u;
        id = static_cast<TokenId>((x >> 8) % static_cast<uint32_t>(m.n_vocab()));
    }
    return t;
}

TEST(Device, ParsesCpuCudaAndOrdinals) {
    EXPECT_EQ(parse_device("cpu"), Device{});
    EXPECT_EQ(parse_device("cuda"), (Device{DeviceKind::Cuda, 0}));
    EXPECT_EQ(parse_device("cuda:3"), (Device{DeviceKind::Cuda, 3}));
    EXPECT_EQ(device_name(parse_device("cuda:12")), "cuda:12");
    EXPECT_EQ(device_name(Device{}), "cpu");
    for (const char* bad : {"gpu", "", "cuda:", "cuda:-1", "cuda:x", "cuda:1000", "cuda:1 ", "CPU", "cuda0"}) {
        try {
            parse_device(bad);
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::argument);
            EXPECT_NE(std::string(e.what()).find("expected cpu, cuda or cuda:N"), std::string::npos) << e.what();
        }
    }
    EXPECT_NO_THROW(require_device(Device{}));
}

TEST(Device, CudaWithoutBackendOrGpuIsAClearUnsupportedError) {
    if (cuda_backend_built() && cuda_device_count() > 0)
        GTEST_SKIP() << "this machine has a CUDA device: the refusal cannot be shown here";
    const auto model = Model::load(kShared + "/models/pycode-600k.gguf");
    try {
        Context ctx(model, on_cuda());
        FAIL() << "a CUDA context was made without CUDA";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::unsupported);
        const std::string what = e.what();
        EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
        EXPECT_TRUE(what.find("no CUDA device") != std::string::npos || what.find("no CUDA backend") != std::string::npos)
            << what;
    }
    EXPECT_THROW(describe_device(Device{DeviceKind::Cuda, 0}), Error);
}

TEST(Device, LlamaCppNumericsAreCpuOnly) {
    REQUIRE_GPU();
    const auto model = Model::load(kShared + "/models/pycode-600k.gguf");
    ContextOptions o = on_cuda();
    o.numerics = Numerics::LlamaCpp;
    try {
        Context ctx(model, o);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::unsupported);
    }
}

TEST(Device, OutOfRangeOrdinalIsRefused) {
    REQUIRE_GPU();
    const auto model = Model::load(kShared + "/models/pycode-600k.gguf");
    ContextOptions o = on_cuda();
    o.device.index = cuda_device_count();
    EXPECT_THROW(Context(model, o), Error);
}

// Teacher-forced logits of `tokens` on the CPU and on the GPU: within rounding, and the GPU's
// greedy choice is the CPU's wherever the CPU's top two are not nearly tied.
void expect_gpu_agrees_with_cpu(const std::string& file, KvType kv) {
    SCOPED_TRACE(file);
    const auto model = Model::load(kShared + "/models/" + file);
    const auto tokens = some_tokens(*model, 40, 5);
    Context cpu(model), gpu(model, on_cuda());
    KvCache cc(*model, {kCapacity, kv}), gc(*model, {kCapacity, kv});
    const auto n_vocab = static_cast<size_t>(model->n_vocab());
    const auto lc = cpu.forward(cc, tokens, Logits::All);
    const std::vector<float> want(lc.begin(), lc.end());
    const auto lg = gpu.forward(gc, tokens, Logits::All);
    ASSERT_EQ(lg.size(), want.size());
    for (size_t t = 0; t < tokens.size(); ++t) {
        const float* w = want.data() + t * n_vocab;
        const float* g = lg.data() + t * n_vocab;
        float scale = 0, maxdiff = 0;
        for (size_t i = 0; i < n_vocab; ++i) {
            scale = std::max(scale, std::fabs(w[i]));
            maxdiff = std::max(maxdiff, std::fabs(w[i] - g[i]));
        }
        EXPECT_LE(maxdiff, 1e-3f * std::max(scale, 1.0f)) << "token " << t;
        std::vector<size_t> idx(n_vocab);
        for (size_t i = 0; i < n_vocab; ++i) idx[i] = i;
        std::partial_sort(idx.begin(), idx.begin() + 2, idx.end(), [&](size_t a, size_t b) { return w[a] > w[b]; });
        const size_t gbest = static_cast<size_t>(std::max_element(g, g + n_vocab) - g);
        if (w[idx[0]] - w[idx[1]] > 4 * maxdiff + 1e-5f) {
            EXPECT_EQ(gbest, idx[0]) << "token " << t;
        }
    }
    // The caches hold the same positions, K/V within rounding.
    std::vector<float> kc, vc, kg, vg;
    cc.export_kv(kc, vc);
    gc.export_kv(kg, vg);
    ASSERT_EQ(kc.size(), kg.size());
    for (size_t i = 0; i < kc.size(); ++i) ASSERT_NEAR(kc[i], kg[i], 1e-3f * (1 + std::fabs(kc[i]))) << i;
}

TEST(CudaBackend, LogitsAgreeWithTheCpuOnSharedModels) {
    REQUIRE_GPU();
    for (const char* f : {"pycode-4m.gguf", "pycode-4m-f16.gguf", "pycode-4m-q8_0.gguf", "arch-llama3.gguf",
                          "arch-qwen2.gguf", "arch-qwen3.gguf", "arch-phi3.gguf", "arch-gemma3.gguf"})
        expect_gpu_agrees_with_cpu(f, KvType::F32);
    expect_gpu_agrees_with_cpu("pycode-4m.gguf", KvType::F16);
}

// The promise speculative decoding rests on: k+1 tokens verified in one pass give each token the
// bits it gets decoded alone, and the caches end identical.
TEST(CudaBackend, QueryCountInvariantBitForBit) {
    REQUIRE_GPU();
    for (const char* f : {"pycode-4m.gguf", "pycode-4m-q8_0.gguf", "arch-gemma3.gguf", "arch-phi3.gguf"}) {
        for (KvType kv : {KvType::F32, KvType::F16}) {
            SCOPED_TRACE(std::string(f) + (kv == KvType::F16 ? " f16 cache" : " f32 cache"));
            const auto model = Model::load(kShared + "/models/" + f);
            const auto n_vocab = static_cast<size_t>(model->n_vocab());
            const auto prefix = some_tokens(*model, 300, 1); // crosses a 256-position attention split
            const auto batch = some_tokens(*model, 9, 2);
            Context ctx(model, on_cuda());
            KvCache a(*model, {kCapacity, kv}), b(*model, {kCapacity, kv});
            ctx.forward(a, prefix, Logits::None);
            ctx.forward(b, prefix, Logits::None);
            const auto la = ctx.forward(a, batch, Logits::All);
            const std::vector<float> all(la.begin(), la.end());
            for (size_t t = 0; t < batch.size(); ++t) {
                const auto l1 = ctx.forward(b, std::span<const TokenId>(&batch[t], 1), Logits::All);
                ASSERT_EQ(0, std::memcmp(l1.data(), all.data() + t * n_vocab, n_vocab * 4)) << "token " << t;
            }
            EXPECT_TRUE(a.contents_equal(b));
            // A prompt split differently (max_batch 7) fills the same cache bits.
            Context small(model, on_cuda(7));
            KvCache c(*model, {kCapacity, kv});
            small.forward(c, prefix, Logits::None);
            small.forward(c, batch, Logits::None);
            EXPECT_TRUE(a.contents_equal(c));
        }
    }
}

TEST(CudaBackend, TruncateForkSaveLoadAndCpuWrittenCachesRoundTrip) {
    REQUIRE_GPU();
    const auto model = Model::load(kShared + "/models/pycode-4m.gguf");
    const auto n_vocab = static_cast<size_t>(model->n_vocab());
    const auto p = some_tokens(*model, 50, 3), q = some_tokens(*model, 5, 4);
    Context gpu(model, on_cuda()), cpu(model);
    KvCache ref(*model, {kCapacity});
    gpu.forward(ref, p, Logits::None);
    const auto lr = gpu.forward(ref, q, Logits::All);
    const std::vector<float> want(lr.begin(), lr.end());

    // Truncate (the mirror stays valid) and run again.
    KvCache a(*model, {kCapacity});
    gpu.forward(a, p, Logits::None);
    gpu.forward(a, some_tokens(*model, 7, 9), Logits::None);
    a.truncate(static_cast<int64_t>(p.size()));
    auto la = gpu.forward(a, q, Logits::All);
    EXPECT_EQ(0, std::memcmp(la.data(), want.data(), want.size() * 4));
    EXPECT_TRUE(a.contents_equal(ref));

    // Fork, and the fork's continuation; the original still continues correctly after it.
    KvCache b(*model, {kCapacity});
    gpu.forward(b, p, Logits::None);
    KvCache f = b.fork();
    auto lf = gpu.forward(f, q, Logits::All);
    EXPECT_EQ(0, std::memcmp(lf.data(), want.data(), want.size() * 4));
    auto lb = gpu.forward(b, q, Logits::All);
    EXPECT_EQ(0, std::memcmp(lb.data(), want.data(), want.size() * 4));

    // Save, load, continue.
    KvCache c(*model, {kCapacity});
    gpu.forward(c, p, Logits::None);
    const auto path = (std::filesystem::temp_directory_path() / "rewind_cuda_backend_test.kvc").string();
    c.save(path);
    KvCache d = KvCache::load(path, *model, {kCapacity});
    std::filesystem::remove(path);
    auto ld = gpu.forward(d, q, Logits::All);
    EXPECT_EQ(0, std::memcmp(ld.data(), want.data(), want.size() * 4));

    // A cache a CPU context wrote after the GPU's last pass (the same object): its new rows are
    // uploaded again, never taken from the stale device copy.
    const auto p2 = some_tokens(*model, 40, 8);
    KvCache e(*model, {kCapacity});
    gpu.forward(e, p, Logits::None);
    e.truncate(10);
    cpu.forward(e, p2, Logits::None);
    const auto le = gpu.forward(e, q, Logits::All);
    const std::vector<float> got(le.begin(), le.end());
    KvCache h(*model, {kCapacity});
    gpu.forward(h, std::span<const TokenId>(p).first(10), Logits::None);
    cpu.forward(h, p2, Logits::None);
    Context fresh(model, on_cuda());
    const auto lh = fresh.forward(h, q, Logits::All);
    EXPECT_EQ(0, std::memcmp(lh.data(), got.data(), got.size() * 4));
    EXPECT_NE(0, std::memcmp(got.data(), want.data(), want.size() * 4));
    EXPECT_EQ(got.size(), q.size() * n_vocab);
}

// Speculative decoding on the device emits exactly plain decoding's tokens (on the device), for
// every guess source, greedy and sampled; the draft model runs in a second CUDA context on the
// same GPU.
TEST(CudaBackend, SpeculativeDecodingIsLosslessOnTheDevice) {
    REQUIRE_GPU();
    const auto target = Model::load(kShared + "/models/pycode-4m.gguf");
    const auto draft = Model::load(kShared + "/models/pycode-600k.gguf");
    Context ctx(target, on_cuda());
    KvCache cache(*target, {kCapacity});
    const auto prompt = target->tokenizer().encode("def fibonacci(n):\n    if n < 2:\n        return n\n");
    const std::string reference = "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n";
    for (const float temp : {0.0f, 0.8f}) {
        GenerateOptions go;
        go.max_tokens = 48;
        go.sampler.temperature = temp;
        go.sampler.seed = 99;
        cache.truncate(0);
        const GenerateResult plain = generate_plain(ctx, cache, prompt, go);
        ASSERT_FALSE(plain.tokens.empty());
        for (const std::string kind : {"ngram", "ref", "draft", "auto"}) {
            speculate::SourceSpec spec;
            speculate::parse_source_kind(kind, spec);
            if (kind == "ref" || kind == "auto") spec.references = {reference};
            if (kind == "draft" || kind == "auto") spec.draft = draft;
            spec.draft_options.context = on_cuda();
            auto src = speculate::make_guess_source(spec, *target, kCapacity);
            for (const int k : {1, 4, 8}) {
                speculate::SpeculativeOptions so;
                so.generate = go;
                so.k = k;
                cache.truncate(0);
                const auto res = speculate::generate_speculative(ctx, cache, prompt, *src, so);
                ASSERT_EQ(res.tokens, plain.tokens) << kind << " k " << k << " temp " << temp;
            }
        }
    }
}

} // namespace
