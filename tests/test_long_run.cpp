// A long run (REWIND_LONG_TESTS=1 only): 100,000 tokens generated with speculation on
// pycode-600k, where every pass also verifies a deliberately unlikely last guess, so nearly every
// pass rolls the cache back. The output must equal plain decoding token for token, and resident
// memory must stay flat (nothing grows with the tokens generated).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "rewind/context.h"
#include "rewind/generate.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/ngram_source.h"

namespace rwd {
namespace {

bool long_tests() {
    const char* v = std::getenv("REWIND_LONG_TESTS");
    return v && std::string(v) == "1";
}

// Resident set size in KiB (/proc/self/statm).
long rss_kib() {
    long pages = 0, resident = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        std::fclose(f);
    }
    return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

// N-gram guesses, then one more that is almost never right (the token after the last guess in id
// order), so the pass ends in a rejection and a rollback.
class RollbackSource final : public speculate::GuessSource {
public:
    explicit RollbackSource(int64_t n_vocab) : n_vocab_(n_vocab) {}
    std::string_view name() const override { return "rollback"; }
    void reset(const speculate::GenerationStart& s) override { inner_.reset(s); }
    void propose(std::span<const TokenId> context, int k, speculate::Proposal& out) override {
        if (k > 1) inner_.propose(context, k - 1, out);
        const TokenId last = out.tokens.empty() ? context.back() : out.tokens.back();
        out.tokens.push_back(static_cast<TokenId>((last + 1) % n_vocab_));
    }
    void accept(std::span<const TokenId> context) override { inner_.accept(context); }

private:
    speculate::NgramSource inner_;
    int64_t n_vocab_;
};

TEST(LongRun, HundredThousandSpeculativeTokensEqualPlainWithFlatMemorySlow) {
    if (!long_tests()) GTEST_SKIP() << "set REWIND_LONG_TESTS=1 (about a minute in a Release build)";
    const auto model = Model::load(std::string(REWIND_SHARED_DIR) + "/models/pycode-600k.gguf");
    const int64_t n_ctx = model->hparams().n_ctx_train;
    Context ctx(model, ContextOptions{.n_threads = 1});
    KvCache plain_cache(*model), spec_cache(*model);
    RollbackSource source(model->n_vocab());
    GenerateOptions g;
    g.stop_at_eog = false;
    g.max_tokens = n_ctx - 64; // each segment fills the context from a 32-token prompt
    int64_t passes = 0, rollbacks = 0;
    speculate::SpeculativeOptions so;
    so.generate = g;
    so.k = 4;
    so.on_pass = [&](const speculate::PassReport& r) {
        ++passes;
        rollbacks += r.accepted < r.proposed;
    };

    // Segments: each prompt is the last 32 tokens of the previous segment's output, so the text
    // keeps going while every segment fits the context.
    std::vector<TokenId> prompt = model->tokenizer().encode("import os\nimport sys\n\n\ndef main(argv):\n", AddBos::Yes);
    constexpr int64_t kTarget = 100000;
    int64_t generated = 0, segments = 0;
    long rss_warm = 0, rss_max = 0;
    const auto t0 = std::chrono::steady_clock::now();
    while (generated < kTarget) {
        plain_cache.truncate(0);
        spec_cache.truncate(0);
        const auto plain = generate_plain(ctx, plain_cache, prompt, g);
        const auto spec = speculate::generate_speculative(ctx, spec_cache, prompt, source, so);
        ASSERT_EQ(spec.tokens, plain.tokens) << "segment " << segments << " after " << generated << " tokens";
        ASSERT_FALSE(plain.tokens.empty());
        generated += static_cast<int64_t>(plain.tokens.size());
        ++segments;
        const std::vector<TokenId>& out = plain.tokens;
        prompt.assign(out.end() - std::min<ptrdiff_t>(32, static_cast<ptrdiff_t>(out.size())), out.end());
        if (segments == 5) rss_warm = rss_kib();
        rss_max = std::max(rss_max, rss_kib());
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const long growth = rss_kib() - rss_warm;
    std::printf("long run: %lld tokens (each twice: plain and speculative) in %lld segments, %.1f s; %lld passes, "
                "%lld rolled back (%.2f%%); RSS after 5 segments %ld KiB, max %ld KiB, at the end %ld KiB\n",
                static_cast<long long>(generated), static_cast<long long>(segments), s, static_cast<long long>(passes),
                static_cast<long long>(rollbacks), 100.0 * static_cast<double>(rollbacks) / static_cast<double>(passes),
                rss_warm, rss_max, rss_kib());
    RecordProperty("tokens", static_cast<int>(generated));
    RecordProperty("rss_growth_kib", static_cast<int>(growth));
    EXPECT_GE(rollbacks, passes * 95 / 100) << "most passes must roll back";
    EXPECT_LT(growth, 1024) << "resident memory grew by " << growth << " KiB after warm-up";
}

} // namespace
} // namespace rwd
