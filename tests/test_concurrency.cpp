// Threads: a loaded Model (and its Tokenizer) is immutable and shared; every Context, KvCache,
// Session, Sampler and guess source belongs to one thread at a time. Several threads, each with
// its own context and cache over one shared model, produce exactly the outputs of the same runs
// done one after another. CI runs this file (with the runtime tests) under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rewind/context.h"
#include "rewind/generate.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"
#include "rewind/session.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/ngram_source.h"

namespace rwd {
namespace {

// Everything one run produces: its tokens (plain and speculative) and the logits of its last
// forward pass, bit for bit.
struct RunOutput {
    std::vector<TokenId> plain, spec, sampled;
    std::vector<float> logits;
    bool operator==(const RunOutput& o) const {
        return plain == o.plain && spec == o.spec && sampled == o.sampled && logits.size() == o.logits.size() &&
               std::memcmp(logits.data(), o.logits.data(), logits.size() * sizeof(float)) == 0;
    }
};

struct Job {
    std::string prompt;
    int n_threads; // the context's own pool: threads inside threads
    uint64_t seed;
};

RunOutput run_job(const std::shared_ptr<const Model>& model, const Job& job, int n_tokens) {
    RunOutput out;
    Context ctx(model, ContextOptions{.n_threads = job.n_threads});
    const std::vector<TokenId> prompt = model->tokenizer().encode(job.prompt, AddBos::Yes);
    GenerateOptions g;
    g.max_tokens = n_tokens;
    g.stop_at_eog = false;
    {
        KvCache cache(*model, {.capacity = 256});
        out.plain = generate_plain(ctx, cache, prompt, g).tokens;
    }
    {
        KvCache cache(*model, {.capacity = 256});
        speculate::NgramSource src;
        out.spec = speculate::generate_speculative(ctx, cache, prompt, src,
                                                   speculate::SpeculativeOptions{.generate = g, .k = 4})
                       .tokens;
    }
    {
        KvCache cache(*model, {.capacity = 256});
        GenerateOptions s = g;
        s.sampler.temperature = 0.8f;
        s.sampler.seed = job.seed;
        out.sampled = generate_plain(ctx, cache, prompt, s).tokens;
        std::vector<TokenId> all = prompt;
        all.insert(all.end(), out.sampled.begin(), out.sampled.end());
        KvCache fresh(*model, {.capacity = 256});
        const auto l = ctx.forward(fresh, all, Logits::Last);
        out.logits.assign(l.begin(), l.end());
    }
    return out;
}

TEST(Concurrency, ThreadsSharingOneModelMatchSequentialRuns) {
    const auto model = Model::load(std::string(REWIND_SHARED_DIR) + "/models/pycode-600k.gguf");
    const std::vector<Job> jobs = {
        {"def parse_args(argv):\n", 1, 1}, {"import os\nimport sys\n", 2, 2},
        {"class Stack:\n    def __init__(self):\n", 1, 3}, {"for i in range(10):\n", 2, 4},
    };
    constexpr int kTokens = 24;
    std::vector<RunOutput> sequential;
    for (const Job& j : jobs) sequential.push_back(run_job(model, j, kTokens));

    // All jobs at once, twice over (each job on two threads), started together.
    std::vector<RunOutput> concurrent(2 * jobs.size());
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (size_t i = 0; i < concurrent.size(); ++i)
        threads.emplace_back([&, i] {
            ready.fetch_add(1);
            while (ready.load() < static_cast<int>(concurrent.size())) std::this_thread::yield();
            concurrent[i] = run_job(model, jobs[i % jobs.size()], kTokens);
        });
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < concurrent.size(); ++i) {
        SCOPED_TRACE("job " + std::to_string(i % jobs.size()) + ", thread " + std::to_string(i));
        EXPECT_EQ(concurrent[i].plain.size(), static_cast<size_t>(kTokens));
        EXPECT_TRUE(concurrent[i] == sequential[i % jobs.size()]);
    }
}

// The model's read-only parts (tokenizer, loading) are safe to use from many threads at once:
// several threads load their own models and encode with one shared tokenizer.
TEST(Concurrency, SharedTokenizerAndParallelLoads) {
    const auto model = Model::load(std::string(REWIND_SHARED_DIR) + "/models/pycode-600k.gguf");
    const std::string text = "def f(x):\n    return x * 2  # ünïcödé\n";
    const std::vector<TokenId> want = model->tokenizer().encode(text, AddBos::Yes);
    std::vector<std::vector<TokenId>> got(4);
    std::vector<uint64_t> fingerprints(4);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < got.size(); ++i)
        threads.emplace_back([&, i] {
            for (int r = 0; r < 20; ++r) got[i] = model->tokenizer().encode(text, AddBos::Yes);
            fingerprints[i] = Model::load(std::string(REWIND_SHARED_DIR) + "/models/pycode-600k.gguf")->fingerprint();
        });
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i], want);
        EXPECT_EQ(fingerprints[i], model->fingerprint());
    }
}

} // namespace
} // namespace rwd
