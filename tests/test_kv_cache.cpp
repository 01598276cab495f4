// KvCache: truncate/fork/save/load/import/export round trips bit for bit; a restored cache
// continues exactly like the original; load refuses another model's cache and damaged files;
// every failure leaves the cache (and the file on disk) exactly as before.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <csignal>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"
#include "model_test_util.h"
#include "kv_storage.h" // runtime/src: the forward pass's view (commit, version)

namespace rwd {
namespace {

std::shared_ptr<const Model> load(const std::string& name) {
    static std::map<std::string, std::shared_ptr<const Model>> models;
    auto& m = models[name];
    if (!m) m = Model::load(std::string(REWIND_SHARED_DIR) + "/models/" + name + ".gguf");
    return m;
}

std::vector<TokenId> tokens(int n, uint32_t seed, int64_t n_vocab) {
    std::mt19937 rng(seed);
    std::vector<TokenId> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<TokenId>(rng() % static_cast<uint32_t>(n_vocab));
    return t;
}

using model_test::same_bits;

std::filesystem::path temp_dir() {
    return std::filesystem::temp_directory_path() / ("rewind_kv_" + std::to_string(::getpid()));
}
std::string temp_path(const std::string& name) {
    std::filesystem::create_directories(temp_dir());
    return (temp_dir() / name).string();
}

// Files in `dir` whose name starts with `prefix`.
int files_in(const std::filesystem::path& dir, const std::string& prefix) {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        n += e.path().filename().string().rfind(prefix, 0) == 0;
    return n;
}

std::vector<char> read_file(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}
void write_file(const std::string& p, const std::vector<char>& b) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

// Next-token logits after `next`, run on a throwaway fork so `c` is not changed.
std::vector<float> next_logits(Context& ctx, const KvCache& c, TokenId next) {
    KvCache f = c.fork();
    auto l = ctx.forward(f, std::span<const TokenId>(&next, 1), Logits::Last);
    return {l.begin(), l.end()};
}

class KvCacheTest : public ::testing::Test {
protected:
    static void TearDownTestSuite() { std::filesystem::remove_all(temp_dir()); }
    void SetUp() override {
        model = load("pycode-4m");
        ctx = std::make_unique<Context>(model, ContextOptions{.n_threads = 1, .max_batch = 64});
        cache = std::make_unique<KvCache>(*model, KvCacheOptions{.capacity = 96});
        ctx->forward(*cache, tokens(40, 1, model->n_vocab()), Logits::Last);
    }
    std::shared_ptr<const Model> model;
    std::unique_ptr<Context> ctx;
    std::unique_ptr<KvCache> cache;
};

TEST_F(KvCacheTest, ShapeAndIdentity) {
    EXPECT_EQ(cache->size(), 40);
    EXPECT_EQ(cache->capacity(), 96);
    EXPECT_EQ(cache->bytes_per_position(), 2u * 32u * 4u); // n_head_kv 2, head_dim 32, F32
    EXPECT_TRUE(cache->belongs_to(*model));
    EXPECT_FALSE(cache->belongs_to(*load("pycode-600k")));
    EXPECT_EQ(cache->identity(), KvCache::identity_of(*model));
    EXPECT_EQ(cache->identity().model_fingerprint, model->fingerprint());
    EXPECT_EQ(KvCache(*model).capacity(), model->hparams().n_ctx_train); // 0 = the model's context
    EXPECT_THROW(KvCache(*model, {.capacity = model->hparams().n_ctx_train + 1}), Error);
    EXPECT_THROW(KvCache(*model, {.capacity = -1}), Error);
}

TEST_F(KvCacheTest, TruncateIsRollback) {
    const KvCache before = cache->fork();
    EXPECT_THROW(cache->truncate(41), Error);
    EXPECT_THROW(cache->truncate(-1), Error);
    EXPECT_TRUE(cache->contents_equal(before));

    const TokenId next = 17;
    const auto want = next_logits(*ctx, *cache, next); // continuation from 40
    ctx->forward(*cache, tokens(7, 2, model->n_vocab()), Logits::All);
    EXPECT_EQ(cache->size(), 47);
    cache->truncate(40);
    EXPECT_TRUE(cache->contents_equal(before));
    EXPECT_TRUE(same_bits(next_logits(*ctx, *cache, next), want));
    cache->truncate(0);
    EXPECT_EQ(cache->size(), 0);
}

TEST_F(KvCacheTest, CommitBounds) {
    KvCache c(*model, {.capacity = 8});
    EXPECT_THROW(KvStorage::commit(c, 9), Error);
    KvStorage::commit(c, 5);
    EXPECT_THROW(KvStorage::commit(c, 4), Error);
    EXPECT_EQ(c.size(), 5);
}

// version() is what a device copy of the cache (the CUDA backend's mirror) is checked against:
// it changes with every write, never with a rollback, and no two caches share one.
TEST_F(KvCacheTest, VersionChangesOnWritesNotOnTruncate) {
    const uint64_t v0 = KvStorage::version(*cache);
    cache->truncate(30);
    EXPECT_EQ(KvStorage::version(*cache), v0);
    ctx->forward(*cache, tokens(2, 5, model->n_vocab()), Logits::None);
    const uint64_t v1 = KvStorage::version(*cache);
    EXPECT_NE(v1, v0);
    KvCache f = cache->fork();
    EXPECT_NE(KvStorage::version(f), v1);
    KvCache moved = std::move(f);
    EXPECT_NE(KvStorage::version(moved), v1);
    KvCache c(*model, {.capacity = 8});
    const uint64_t vc = KvStorage::version(c);
    KvStorage::commit(c, 3);
    EXPECT_NE(KvStorage::version(c), vc);
    EXPECT_NE(KvStorage::version(KvCache(*model, {.capacity = 8})), KvStorage::version(KvCache(*model, {.capacity = 8})));
}

TEST_F(KvCacheTest, ForkIsIndependent) {
    KvCache f = cache->fork();
    EXPECT_TRUE(f.contents_equal(*cache));
    EXPECT_EQ(f.capacity(), cache->capacity());
    ctx->forward(f, tokens(3, 3, model->n_vocab()), Logits::Last);
    EXPECT_EQ(cache->size(), 40);
    EXPECT_FALSE(f.contents_equal(*cache));
    f.truncate(40);
    EXPECT_TRUE(f.contents_equal(*cache));
}

// copy_prefix: a shared prompt prefix taken from another cache continues exactly as if run here.
TEST_F(KvCacheTest, CopyPrefixContinuesBitForBit) {
    const auto toks = tokens(40, 1, model->n_vocab()); // what SetUp ran
    KvCache c(*model, {.capacity = 50});
    ctx->forward(c, tokens(5, 9, model->n_vocab()), Logits::None);
    const uint64_t v0 = KvStorage::version(c);
    c.copy_prefix(*cache, 25);
    EXPECT_EQ(c.size(), 25);
    EXPECT_NE(KvStorage::version(c), v0);
    KvCache ref(*model, {.capacity = 50});
    ctx->forward(ref, std::span<const TokenId>(toks).first(25), Logits::None);
    EXPECT_TRUE(c.contents_equal(ref));
    const auto want = next_logits(*ctx, ref, 17);
    EXPECT_TRUE(same_bits(next_logits(*ctx, c, 17), want));

    // Refusals leave it unchanged.
    KvCache small(*model, {.capacity = 10});
    EXPECT_THROW(small.copy_prefix(*cache, 11), Error);
    EXPECT_THROW(small.copy_prefix(*cache, -1), Error);
    EXPECT_THROW(c.copy_prefix(*cache, 41), Error);
    EXPECT_THROW(c.copy_prefix(c, 3), Error);
    KvCache f16(*model, {.capacity = 50, .type = KvType::F16});
    try {
        f16.copy_prefix(*cache, 3);
        ADD_FAILURE() << "copied across KV types";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::state);
    }
    EXPECT_EQ(small.size(), 0);
    EXPECT_EQ(f16.size(), 0);
    EXPECT_EQ(c.size(), 25);
}

TEST_F(KvCacheTest, SaveLoadRoundTrip) {
    const std::string p = temp_path("roundtrip.kv");
    cache->save(p);
    EXPECT_EQ(files_in(temp_dir(), "roundtrip.kv.tmp"), 0) << "the temporary file is renamed into place";
    KvCache back = KvCache::load(p, *model, {.capacity = 96});
    EXPECT_TRUE(back.contents_equal(*cache));
    EXPECT_EQ(back.capacity(), 96);
    EXPECT_TRUE(same_bits(next_logits(*ctx, back, 5), next_logits(*ctx, *cache, 5)));
    // Default capacity: the model's context.
    EXPECT_EQ(KvCache::load(p, *model).capacity(), model->hparams().n_ctx_train);
    // An empty cache round-trips too.
    KvCache empty(*model, {.capacity = 4});
    empty.save(p);
    EXPECT_EQ(KvCache::load(p, *model).size(), 0);
    // A capacity below the saved length is refused.
    cache->save(p);
    EXPECT_THROW(KvCache::load(p, *model, {.capacity = 39}), Error);
}

TEST_F(KvCacheTest, F16SaveLoadAndTypeConversion) {
    KvCache h(*model, {.capacity = 64, .type = KvType::F16});
    ctx->forward(h, tokens(20, 4, model->n_vocab()), Logits::Last);
    const std::string p = temp_path("f16.kv");
    h.save(p);
    KvCache same = KvCache::load(p, *model, {.capacity = 64, .type = KvType::F16});
    EXPECT_TRUE(same.contents_equal(h));
    EXPECT_TRUE(same_bits(next_logits(*ctx, same, 9), next_logits(*ctx, h, 9)));
    // F16 -> F32 is exact: the exported floats agree bit for bit.
    KvCache wide = KvCache::load(p, *model, {.capacity = 64, .type = KvType::F32});
    EXPECT_EQ(wide.type(), KvType::F32);
    std::vector<float> k16, v16, k32, v32;
    h.export_kv(k16, v16);
    wide.export_kv(k32, v32);
    EXPECT_TRUE(same_bits(k16, k32));
    EXPECT_TRUE(same_bits(v16, v32));
}

TEST_F(KvCacheTest, LoadRefusesAnotherModel) {
    auto other = load("pycode-600k");
    Context octx(other);
    KvCache oc(*other, {.capacity = 32});
    octx.forward(oc, tokens(10, 5, other->n_vocab()), Logits::Last);
    const std::string p = temp_path("other.kv");
    oc.save(p);
    try {
        KvCache::load(p, *model);
        ADD_FAILURE() << "loaded another model's cache";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
        EXPECT_EQ(e.code(), ErrorCode::state) << e.what();
    }
    // Same shapes, different weights: the fingerprint alone tells them apart.
    auto f16 = load("pycode-4m-f16");
    cache->save(p);
    EXPECT_THROW(KvCache::load(p, *f16), Error);
}

TEST_F(KvCacheTest, LoadRefusesDamagedFiles) {
    const std::string p = temp_path("good.kv"), bad = temp_path("bad.kv");
    cache->save(p);
    const std::vector<char> good = read_file(p);
    ASSERT_GT(good.size(), 100u);
    auto refused = [&](const std::vector<char>& bytes, const char* expect, const char* what) {
        SCOPED_TRACE(what);
        write_file(bad, bytes);
        try {
            KvCache::load(bad, *model);
            ADD_FAILURE() << "accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << "message names the file: " << e.what();
        }
    };
    for (size_t cut : {size_t{0}, size_t{5}, size_t{12}, size_t{40}, size_t{100}, good.size() / 2, good.size() - 1})
        refused(std::vector<char>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)),
                "truncated", "truncated");
    std::vector<char> b = good;
    b[0] = 'X';
    refused(b, "bad magic", "bad magic");
    b = good;
    b[8] = 3; // version
    refused(b, "newer rewind", "future version");
    b = good;
    b[8] = 1;
    refused(b, "no longer supported", "old version");
    b = good;
    b[24] ^= 0x01; // n_layer, under the header checksum
    refused(b, "header is corrupted", "corrupted header");
    b = good;
    b[good.size() / 2] ^= 0x10; // one flipped bit in the K/V data
    refused(b, "data checksum", "corrupted data");
    b = good;
    b[good.size() - 3] ^= 0x01; // the payload checksum itself
    refused(b, "data checksum", "corrupted trailer");
    b = good;
    b.push_back('\0');
    refused(b, "unexpected bytes", "trailing byte");
    EXPECT_THROW(KvCache::load(temp_path("missing.kv"), *model), Error);
    EXPECT_THROW(KvCache::load(temp_dir().string(), *model), Error); // a directory
}

// An endless or oversized input is refused after reading at most the largest file a cache of
// this model can be, not read until memory runs out.
TEST_F(KvCacheTest, LoadRefusesEndlessAndOversizedInput) {
    try {
        KvCache::load("/dev/zero", *model);
        ADD_FAILURE() << "accepted /dev/zero";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("over the limit"), std::string::npos) << e.what();
    }
    const std::string p = temp_path("huge.kv");
    { std::ofstream create(p); }
    std::filesystem::resize_file(p, KvCache::max_file_bytes(*model) + 1); // sparse: no disk used
    try {
        KvCache::load(p, *model);
        ADD_FAILURE() << "accepted an oversized file";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("over the limit"), std::string::npos) << e.what();
    }
}

// The cache a failed load would have replaced stays as it was.
TEST_F(KvCacheTest, FailedLoadLeavesTargetUnchanged) {
    const std::string p = temp_path("target.kv");
    cache->save(p);
    std::vector<char> b = read_file(p);
    b[b.size() / 2] ^= 0x01;
    write_file(p, b);
    const KvCache before = cache->fork();
    EXPECT_THROW(*cache = KvCache::load(p, *model, {.capacity = 96}), Error);
    EXPECT_TRUE(cache->contents_equal(before));
}

// A save that fails midway (the file size limit is hit in a forked child) leaves the previous
// file whole and loadable, and no temporary file behind when the error could be handled.
TEST_F(KvCacheTest, WriteFailingMidwayKeepsPreviousFile) {
    const std::string p = temp_path("midway.kv");
    KvCache small = cache->fork();
    small.truncate(5);
    small.save(p);
    const std::vector<char> old = read_file(p);
    ASSERT_LT(old.size(), 64u * 1024);
    for (bool ignore_signal : {true, false}) {
        SCOPED_TRACE(ignore_signal ? "write fails with EFBIG" : "killed by SIGXFSZ mid-write");
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            const rlimit lim{64 * 1024, 64 * 1024}; // less than the full cache, more than the old file
            ::setrlimit(RLIMIT_FSIZE, &lim);
            if (ignore_signal) ::signal(SIGXFSZ, SIG_IGN);
            try {
                cache->save(p);
            } catch (const Error& e) {
                ::_exit(std::string(e.what()).find("write failed") != std::string::npos ? 0 : 1);
            }
            ::_exit(2); // the save succeeded: the limit did not bite
        }
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        if (ignore_signal) {
            ASSERT_TRUE(WIFEXITED(status));
            EXPECT_EQ(WEXITSTATUS(status), 0) << "1: wrong message, 2: no failure";
            EXPECT_EQ(files_in(temp_dir(), "midway.kv.tmp"), 0) << "the temporary file is removed";
        } else {
            ASSERT_TRUE(WIFSIGNALED(status));
            EXPECT_EQ(WTERMSIG(status), SIGXFSZ);
        }
        EXPECT_EQ(read_file(p), old) << "the previous file is intact";
        EXPECT_TRUE(KvCache::load(p, *model).contents_equal(small));
        for (const auto& e : std::filesystem::directory_iterator(temp_dir())) // a crash's stray temp
            if (e.path().filename().string().rfind("midway.kv.tmp", 0) == 0) std::filesystem::remove(e.path());
    }
}

TEST_F(KvCacheTest, SaveFailureLeavesCacheAndOldFile) {
    const KvCache before = cache->fork();
    EXPECT_THROW(cache->save("/nonexistent-dir/x/cache.kv"), Error);
    EXPECT_TRUE(cache->contents_equal(before));
    // Overwriting an existing file replaces it whole.
    const std::string p = temp_path("over.kv");
    cache->save(p);
    cache->truncate(10);
    cache->save(p);
    EXPECT_EQ(KvCache::load(p, *model).size(), 10);
}

TEST_F(KvCacheTest, ImportExportRoundTrip) {
    std::vector<float> k, v;
    cache->export_kv(k, v);
    const auto& id = cache->identity();
    ASSERT_EQ(k.size(), static_cast<size_t>(id.n_layer * 40 * id.n_head_kv * id.head_dim));
    KvCache imp = KvCache::import(*model, 40, k, v, {.capacity = 96});
    EXPECT_TRUE(imp.contents_equal(*cache));
    EXPECT_TRUE(same_bits(next_logits(*ctx, imp, 123), next_logits(*ctx, *cache, 123)));
    // Zero tokens: an empty cache.
    EXPECT_EQ(KvCache::import(*model, 0, {}, {}).size(), 0);
    // Into an F16 cache: rounded to half, and exports back as those rounded values.
    KvCache half = KvCache::import(*model, 40, k, v, {.capacity = 96, .type = KvType::F16});
    std::vector<float> hk, hv;
    half.export_kv(hk, hv);
    for (size_t i = 0; i < k.size(); i += 97) EXPECT_EQ(hk[i], fp16_to_fp32(fp32_to_fp16(k[i])));
}

TEST_F(KvCacheTest, ImportChecksEveryShape) {
    std::vector<float> k, v;
    cache->export_kv(k, v);
    auto refused = [&](int64_t n, std::vector<float> kk, std::vector<float> vv, KvCacheOptions o, const char* what) {
        SCOPED_TRACE(what);
        EXPECT_THROW(KvCache::import(*model, n, kk, vv, o), Error);
    };
    refused(41, k, v, {}, "n_tokens disagrees with the arrays");
    refused(39, k, v, {}, "n_tokens too small");
    refused(-1, k, v, {}, "negative n_tokens");
    refused(40, std::vector<float>(k.begin(), k.end() - 1), v, {}, "K one float short");
    refused(40, k, std::vector<float>(v.begin(), v.end() - 1), {}, "V one float short");
    refused(40, k, v, {.capacity = 39}, "over capacity");
    auto nan_k = k;
    nan_k[77] = std::nanf("");
    refused(40, nan_k, v, {}, "NaN in K");
    auto inf_v = v;
    inf_v[5] = INFINITY;
    refused(40, k, inf_v, {}, "inf in V");
    // Another model's arrays (600k: 2 layers, 1 KV head) do not fit this model.
    auto other = load("pycode-600k");
    EXPECT_THROW(KvCache::import(*other, 40, k, v), Error);
}

} // namespace
} // namespace rwd
