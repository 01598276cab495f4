// Mixture-of-experts models (qwen3moe, Mixtral-style llama; make-dummy's files): the routing
// kernels, loading and refusals, and the expert FFN's exactness: a token's logits are the same
// bits alone, in passes of 1..64, in a batch, in a tree and at every thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gguf_test_util.h"
#include "model_test_util.h"
#include "rewind/context.h"
#include "rewind/kernels/moe.h"
#include "rewind/kernels/thread_pool.h"
#include "rewind/kv_cache.h"
#include "rewind/llama_model.h"

namespace rwd {
namespace {

using model_test::same_bits;

using gguf_test::error_of;

std::vector<float> copy(std::span<const float> s) { return {s.begin(), s.end()}; }

// The code of the rwd::Error f throws; state if it throws none (no test expects that code).
template <class F>
ErrorCode error_code_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.code();
    }
    return ErrorCode::state;
}

// ---- routing kernels ----

TEST(MoeRouting, TopKTakesTheLowerIndexOfTiesAndRenormalises) {
    const float z[6] = {1.0f, 3.0f, 3.0f, 0.5f, 3.0f, 2.0f};
    int32_t ids[4];
    float w[4];
    route_top_k(z, 1, 6, 3, true, ids, w);
    EXPECT_EQ(ids[0], 1);
    EXPECT_EQ(ids[1], 2);
    EXPECT_EQ(ids[2], 4);
    EXPECT_EQ(w[0], w[1]);
    EXPECT_EQ(w[1], w[2]);
    EXPECT_NEAR(w[0] + w[1] + w[2], 1.0f, 1e-6f);
    // Without renormalisation: the softmax probabilities themselves, in descending order.
    route_top_k(z, 1, 6, 4, false, ids, w);
    double sum = 0;
    for (float v : z) sum += std::exp(double(v) - 3.0);
    EXPECT_EQ(ids[3], 5);
    EXPECT_NEAR(w[0], 1.0 / sum, 1e-6);
    EXPECT_NEAR(w[3], std::exp(-1.0) / sum, 1e-6);
}

TEST(MoeRouting, EachRowIsRoutedByItsOwnLogitsAlone) {
    std::mt19937 rng(3);
    std::normal_distribution<float> d;
    const int64_t n = 37, ne = 128, k = 8;
    std::vector<float> z(n * ne);
    for (float& v : z) v = d(rng);
    std::vector<int32_t> ids(n * k), one_ids(k);
    std::vector<float> w(n * k), one_w(k);
    route_top_k(z.data(), n, ne, k, true, ids.data(), w.data());
    for (int64_t t = 0; t < n; ++t) {
        route_top_k(z.data() + t * ne, 1, ne, k, true, one_ids.data(), one_w.data());
        EXPECT_TRUE(std::equal(one_ids.begin(), one_ids.end(), ids.begin() + t * k)) << t;
        EXPECT_TRUE(same_bits(one_w, std::span<const float>(w).subspan(t * k, k))) << t;
        for (int64_t j = 1; j < k; ++j) EXPECT_GE(w[t * k + j - 1], w[t * k + j]);
    }
}

TEST(MoeRouting, GroupingListsEachExpertsRowsInPassOrder) {
    // 4 tokens, 2 slots each, 5 experts (expert 3 unused).
    const int32_t ids[8] = {2, 0, 0, 4, 2, 1, 4, 2};
    int32_t off[6], rows[8];
    group_by_expert(ids, 4, 2, 5, off, rows);
    const std::vector<int32_t> want_off = {0, 2, 3, 6, 6, 8}, want_rows = {1, 2, 5, 0, 4, 7, 3, 6};
    EXPECT_EQ(std::vector<int32_t>(off, off + 6), want_off);
    EXPECT_EQ(std::vector<int32_t>(rows, rows + 8), want_rows);
    const int32_t bad[2] = {0, 5};
    EXPECT_EQ(error_code_of([&] { group_by_expert(bad, 1, 2, 5, off, rows); }), ErrorCode::argument);
}

TEST(MoeRouting, PortableProductIsTheSameForAnyTokenCountAndCloseToDouble) {
    std::mt19937 rng(9);
    std::normal_distribution<float> d;
    const int64_t rows = 64, cols = 2048 + 7, n = 33; // over the size from which the pool is used
    std::vector<float> w(rows * cols), x(n * cols), y(n * rows), y1(rows);
    for (float& v : w) v = d(rng);
    for (float& v : x) v = d(rng);
    matmul_f32_portable(w.data(), rows, cols, x.data(), n, y.data());
    ThreadPool pool(3);
    std::vector<float> y3(n * rows);
    matmul_f32_portable(w.data(), rows, cols, x.data(), n, y3.data(), &pool);
    EXPECT_TRUE(same_bits(y3, y)) << "3 threads";
    for (int64_t t = 0; t < n; ++t) {
        matmul_f32_portable(w.data(), rows, cols, x.data() + t * cols, 1, y1.data());
        EXPECT_TRUE(same_bits(y1, std::span<const float>(y).subspan(t * rows, rows)));
        for (int64_t r = 0; r < rows; ++r) {
            double ref = 0;
            for (int64_t c = 0; c < cols; ++c) ref += double(w[r * cols + c]) * x[t * cols + c];
            EXPECT_NEAR(y[t * rows + r], ref, 1e-3);
        }
    }
    EXPECT_EQ(error_code_of([&] { matmul_f32_portable(nullptr, 1, 1, x.data(), 1, y.data()); }), ErrorCode::argument);
    int32_t ids[2];
    float wt[2];
    EXPECT_EQ(error_code_of([&] { route_top_k(x.data(), 1, 4, 5, true, ids, wt); }), ErrorCode::argument);
}

// ---- loading ----

TEST(MoeLoad, ExpertKeysAndTensorsAreRead) {
    const auto q = model_test::load("dummy-qwen3-moe-tiny-q4_k_m");
    const LlamaHparams& hp = q->hparams();
    EXPECT_EQ(hp.architecture, "qwen3moe");
    EXPECT_EQ(hp.n_expert, 16);
    EXPECT_EQ(hp.n_expert_used, 4);
    EXPECT_EQ(hp.n_ff_exp, 256);
    EXPECT_EQ(hp.head_dim(), 128); // wider than n_embd / n_head, as Qwen3's heads
    const LlamaLayerWeights& lw = q->file().weights().layers.at(1);
    EXPECT_EQ(lw.ffn_gate_exps.experts, 16);
    EXPECT_EQ(lw.ffn_down_exps.rows, 256);
    EXPECT_EQ(lw.ffn_gate_inp.type, TensorType::F32);
    EXPECT_EQ(lw.ffn_down_exps.type, TensorType::Q6_K); // llama-quantize's more bits for the last layer
    EXPECT_EQ(lw.ffn_gate.data, nullptr);
    const Model::Layer& l = q->layers.at(0);
    ASSERT_EQ(l.gate_exps.size(), 16u);
    EXPECT_NE(l.gate_exps[0].data, l.gate_exps[1].data);
    EXPECT_EQ(l.gate_exps[15].packed, nullptr); // the file's slice; packed on first use (Model::expert)
    EXPECT_FALSE(q->expert_packed(0, 15));
    const Model::ExpertWeights w = q->expert(0, 15);
    EXPECT_TRUE(q->expert_packed(0, 15));
    EXPECT_NE(w.gate->packed, nullptr); // repacked like any K-quant matrix
    EXPECT_EQ(w.gate->data, l.gate_exps[15].data);

    const auto m = model_test::load("dummy-mixtral-tiny-q6_k");
    EXPECT_EQ(m->hparams().architecture, "llama");
    EXPECT_EQ(m->hparams().n_expert, 8);
    EXPECT_EQ(m->hparams().n_expert_used, 2);
    EXPECT_EQ(m->hparams().n_ff_exp, m->hparams().n_ff); // Mixtral's experts are feed_forward_length wide
    EXPECT_EQ(m->file().weights().layers.at(0).wk.type, TensorType::Q8_0); // 8 experts: llama-quantize's Q8_0 K
}

// The fingerprint reads every dense tensor whole and each expert tensor by windows spread over it
// (the first and last bytes among them): a change to either side's bytes there is another model.
TEST(MoeLoad, FingerprintCoversDenseTensorsAndSamplesExperts) {
    using namespace gguf_test;
    const std::string path = model_test::dummy_path("dummy-mixtral-tiny-f32");
    const uint64_t base = LlamaModelFile::open(path)->fingerprint();
    EXPECT_EQ(LlamaModelFile::open(path)->fingerprint(), base);
    TempDir dir;
    struct Flip {
        const char* tensor;
        bool last; // the tensor's last byte, else its first
    };
    for (const Flip f : {Flip{"blk.0.attn_q.weight", false}, Flip{"blk.0.ffn_gate_inp.weight", true},
                         Flip{"blk.0.ffn_up_exps.weight", false}, Flip{"blk.0.ffn_down_exps.weight", true}}) {
        SCOPED_TRACE(f.tensor);
        Builder b = Builder::load(path);
        std::string& d = b.tensor(f.tensor)->data;
        d[f.last ? d.size() - 1 : 0] ^= 0x10;
        b.write(dir.file("flip.gguf"));
        EXPECT_NE(LlamaModelFile::open(dir.file("flip.gguf"))->fingerprint(), base);
    }
}

TEST(MoeLoad, BrokenOrUnsupportedExpertFilesAreRefusedByName) {
    using namespace gguf_test;
    TempDir dir;
    const std::string q3 = model_test::dummy_path("dummy-qwen3-moe-tiny-f32");
    const std::string mix = model_test::dummy_path("dummy-mixtral-tiny-f32");
    struct Case {
        std::string file;
        const char* what;
        std::function<void(Builder&)> edit;
        std::vector<std::string> words;
    };
    const Case cases[] = {
        {q3, "no up experts", [](Builder& b) { b.remove_tensor("blk.1.ffn_up_exps.weight"); },
         {"blk.1.ffn_up_exps.weight", "missing"}},
        {q3, "one expert short",
         [](Builder& b) {
             RawTensor* t = b.tensor("blk.0.ffn_gate_exps.weight");
             t->dims[2] -= 1;
             t->data.resize(t->data.size() - 4 * t->dims[0] * t->dims[1]);
         },
         {"blk.0.ffn_gate_exps.weight", "shape", "[256, 256, 16]"}},
        {q3, "no expert count", [](Builder& b) { b.remove_kv("qwen3moe.expert_count"); },
         {"qwen3moe.expert_count", "required"}},
        {q3, "more used than there are",
         [](Builder& b) { b.set("qwen3moe.expert_used_count", U32, raw<uint32_t>(17)); },
         {"qwen3moe.expert_used_count", "exceeds"}},
        {q3, "sigmoid gating", [](Builder& b) { b.set("qwen3moe.expert_gating_func", U32, raw<uint32_t>(2)); },
         {"qwen3moe.expert_gating_func", "softmax"}},
        {q3, "shared experts", [](Builder& b) { b.set("qwen3moe.expert_shared_count", U32, raw<uint32_t>(1)); },
         {"expert_shared_count", "not supported"}},
        {mix, "a dense FFN beside the experts",
         [](Builder& b) { b.tensors.push_back({"blk.0.ffn_up.weight", {256, 256}, 0, std::string(256 * 256 * 4, '\0')}); },
         {"blk.0.ffn_up.weight", "unexpected"}},
        {mix, "expert width other than feed_forward_length",
         [](Builder& b) { b.set("llama.expert_feed_forward_length", U32, raw<uint32_t>(512)); },
         {"llama.expert_feed_forward_length", "differs"}},
        {model_path("arch-qwen2.gguf"), "experts on qwen2",
         [](Builder& b) { b.set("qwen2.expert_count", U32, raw<uint32_t>(8)); },
         {"qwen2.expert_count", "not supported"}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        Builder b = Builder::load(c.file);
        c.edit(b);
        const std::string path = dir.file("bad.gguf");
        b.write(path);
        const std::string m = error_of([&] { LlamaModelFile::open(path); });
        ASSERT_FALSE(m.empty()) << c.what << ": loaded without error";
        for (const std::string& w : c.words) EXPECT_NE(m.find(w), std::string::npos) << "lacks '" << w << "': " << m;
    }
}

// ---- exactness of the expert FFN ----

class MoeExact : public ::testing::TestWithParam<const char*> {};

// 64 tokens after an 8-token prefix: one pass of 64, passes of 1, and passes of mixed sizes give
// every row the same bits, at 1, 2 and 3 threads (each cache the same bytes too).
TEST_P(MoeExact, PassSizesOneToSixtyFourAndThreadCounts) {
    const auto model = model_test::load(GetParam());
    const int64_t V = model->n_vocab();
    std::mt19937 rng(17);
    const auto P = model_test::random_tokens(rng, 8, V);
    const auto T = model_test::random_tokens(rng, 64, V);
    std::vector<float> want;
    KvCache want_cache(*model);
    for (int threads : {1, 2, 3}) {
        Context ctx(model, {.n_threads = threads, .max_batch = 64});
        KvCache c(*model);
        ctx.forward(c, P, Logits::None);
        const auto all = copy(ctx.forward(c, T, Logits::All));
        if (threads == 1) {
            want = all;
            want_cache = c.fork();
        } else {
            EXPECT_TRUE(same_bits(all, want)) << threads << " threads";
            EXPECT_TRUE(c.contents_equal(want_cache)) << threads << " threads";
        }
    }
    Context ctx(model, {.n_threads = 2, .max_batch = 64});
    for (const int step_seed : {0, 1}) {
        KvCache c(*model);
        ctx.forward(c, P, Logits::None);
        std::mt19937 split(static_cast<unsigned>(step_seed));
        for (size_t i = 0; i < T.size();) {
            const size_t n = step_seed == 0 ? 1 : std::min<size_t>(T.size() - i, 1 + split() % 17);
            const auto got = ctx.forward(c, std::span(T).subspan(i, n), Logits::All);
            EXPECT_TRUE(same_bits(got, std::span<const float>(want).subspan(i * V, n * V)))
                << "tokens " << i << ".." << i + n << " in a pass of " << n;
            i += n;
        }
        EXPECT_TRUE(c.contents_equal(want_cache));
    }
}

// A sequence's rows are the same bits alone and in a batch with others; a tree's rows are those of
// its paths run as chains.
TEST_P(MoeExact, BatchAndTreeRowsAreTheirAloneRows) {
    const auto model = model_test::load(GetParam());
    const int64_t V = model->n_vocab();
    Context ctx(model, {.n_threads = 2, .max_batch = 64});
    std::mt19937 rng(23);
    std::vector<std::vector<TokenId>> prefixes, news;
    std::vector<std::vector<float>> alone;
    for (int s = 0; s < 3; ++s) {
        prefixes.push_back(model_test::random_tokens(rng, 5 + 4 * s, V));
        news.push_back(model_test::random_tokens(rng, 3 + 5 * s, V));
        KvCache c(*model);
        ctx.forward(c, prefixes.back(), Logits::None);
        alone.push_back(copy(ctx.forward(c, news.back(), Logits::All)));
    }
    std::vector<KvCache> caches;
    for (int s = 0; s < 3; ++s) {
        caches.emplace_back(*model);
        ctx.forward(caches.back(), prefixes[s], Logits::None);
    }
    std::vector<BatchItem> items;
    for (int s = 2; s >= 0; --s) items.push_back({.cache = &caches[s], .tokens = news[s], .which = Logits::All, .logits = {}});
    ctx.forward_batch(items);
    for (int s = 0; s < 3; ++s) EXPECT_TRUE(same_bits(items[2 - s].logits, alone[s])) << "sequence " << s;

    // A tree of 7 over a prefix: node i's row equals the last row of its path run as a chain.
    const auto prefix = model_test::random_tokens(rng, 6, V);
    const auto tree = model_test::random_tokens(rng, 7, V);
    const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2, -1};
    KvCache tc(*model);
    ctx.forward(tc, prefix, Logits::None);
    const auto rows = copy(ctx.forward_tree(tc, tree, parents));
    for (size_t i = 0; i < tree.size(); ++i) {
        std::vector<TokenId> path;
        for (int32_t a = static_cast<int32_t>(i); a >= 0; a = parents[static_cast<size_t>(a)]) path.insert(path.begin(), tree[a]);
        KvCache c(*model);
        ctx.forward(c, prefix, Logits::None);
        const auto last = ctx.forward(c, path, Logits::Last);
        EXPECT_TRUE(same_bits(last, std::span<const float>(rows).subspan(i * V, V))) << "tree node " << i;
    }
}

// A pass reads each expert its tokens chose once per layer: a 1-token pass n_expert_used per
// layer, a wider one the union of its tokens' choices (at most n_expert); dense models none.
TEST(MoeExpertsRead, EachChosenExpertOncePerLayerAndPass) {
    const auto model = model_test::load("dummy-qwen3-moe-tiny-q8_0");
    const LlamaHparams& hp = model->hparams();
    Context ctx(model, {.n_threads = 2, .max_batch = 64});
    EXPECT_EQ(ctx.experts_read(), 0);
    std::mt19937 rng(5);
    KvCache c(*model);
    ctx.forward(c, model_test::random_tokens(rng, 1, model->n_vocab()), Logits::Last);
    EXPECT_EQ(ctx.experts_read(), hp.n_layer * hp.n_expert_used);
    ctx.forward(c, model_test::random_tokens(rng, 64, model->n_vocab()), Logits::All);
    EXPECT_GT(ctx.experts_read(), hp.n_layer * hp.n_expert_used);
    EXPECT_LE(ctx.experts_read(), hp.n_layer * hp.n_expert);
    Context dense(model_test::load("pycode-4m"));
    KvCache d(dense.model());
    dense.forward(d, std::vector<TokenId>{1, 2, 3}, Logits::Last);
    EXPECT_EQ(dense.experts_read(), 0);
}

// Experts no token chose are never read: poisoning one expert's weights with NaN (in both layers,
// weights in the file's layout) changes nothing unless a layer chose it, and then the logits
// turn NaN. Exactly the experts the pass read (experts_read) are the ones that matter.
TEST(MoeExpertsRead, ExpertsNoTokenChoseAreNeverTouched) {
    using namespace gguf_test;
    const std::string path = model_test::dummy_path("dummy-mixtral-tiny-f32");
    const auto clean = Model::load(path, ModelOptions{.repack = false});
    const LlamaHparams& hp = clean->hparams();
    const std::vector<TokenId> token = {7};
    Context ctx(clean, {.n_threads = 1, .max_batch = 8});
    KvCache c0(*clean);
    const auto want = copy(ctx.forward(c0, token, Logits::Last));
    const int64_t read = ctx.experts_read();
    int64_t poisoned_read = 0;
    for (int64_t e = 0; e < hp.n_expert; ++e) {
        Builder b = Builder::load(path);
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            std::string& d = b.tensor("blk." + std::to_string(il) + ".ffn_up_exps.weight")->data;
            const size_t slice = d.size() / static_cast<size_t>(hp.n_expert);
            const float nan = std::numeric_limits<float>::quiet_NaN();
            for (size_t at = slice * static_cast<size_t>(e); at < slice * static_cast<size_t>(e + 1); at += 4)
                std::memcpy(&d[at], &nan, 4);
        }
        const std::string bytes = b.serialize();
        const auto m = Model::load_from_memory(std::as_bytes(std::span(bytes.data(), bytes.size())), "poisoned",
                                               ModelOptions{.repack = false});
        Context pc(m, {.n_threads = 1, .max_batch = 8});
        KvCache c(*m);
        const auto got = pc.forward(c, token, Logits::Last);
        if (std::isnan(got[0])) {
            ++poisoned_read;
        } else {
            EXPECT_TRUE(same_bits(got, want)) << "expert " << e;
        }
    }
    // Each chosen (layer, expert) is one read; an expert chosen by both layers is one poisoning.
    EXPECT_GE(poisoned_read, read / hp.n_layer);
    EXPECT_LE(poisoned_read, read);
    EXPECT_LT(poisoned_read, hp.n_expert);
}

INSTANTIATE_TEST_SUITE_P(Models, MoeExact, ::testing::ValuesIn(model_test::kMoeModels),
                         model_test::model_param_name<::testing::TestParamInfo<const char*>>);

} // namespace
} // namespace rwd
