// Experts stay lazily paged: loading a mixture-of-experts file packs and touches no expert, and
// after some passes exactly the experts a pass routed to have packed copies resident in memory
// (mincore on each expert's own pages); concurrent first uses pack once and give the same bits.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gguf_test_util.h"
#include "model_test_util.h"
#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/gguf.h"
#include "rewind/kv_cache.h"

namespace rwd {
namespace {

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

// Whether any page of `bytes` (page-aligned, whole pages) is resident in this process's memory.
// The packed copies are anonymous memory, so resident means written by this process.
bool any_resident(std::span<const std::byte> bytes) {
    if (bytes.empty()) return false;
    const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> vec((bytes.size() + page - 1) / page);
    void* p = const_cast<std::byte*>(bytes.data());
    if (::mincore(p, bytes.size(), vec.data()) != 0) ADD_FAILURE() << "mincore failed";
    for (unsigned char c : vec)
        if (c & 1) return true;
    return false;
}

// Every expert of every layer: packed (and resident) iff `routed(layer, e)`.
template <class F>
void expect_resident_exactly(const Model& m, F&& routed) {
    const LlamaHparams& hp = m.hparams();
    for (int64_t il = 0; il < hp.n_layer; ++il)
        for (int64_t e = 0; e < hp.n_expert; ++e) {
            const bool want = routed(il, e);
            ASSERT_FALSE(m.expert_packed_bytes(il, e).empty());
            EXPECT_EQ(m.expert_packed(il, e), want) << "layer " << il << " expert " << e;
            EXPECT_EQ(any_resident(m.expert_packed_bytes(il, e)), want) << "layer " << il << " expert " << e;
        }
}

void run_some_passes(const std::shared_ptr<const Model>& m, int threads) {
    Context ctx(m, {.n_threads = threads, .max_batch = 16});
    KvCache c(*m);
    std::mt19937 rng(11);
    ctx.forward(c, model_test::random_tokens(rng, 9, m->n_vocab()), Logits::Last);
    for (int i = 0; i < 3; ++i) ctx.forward(c, model_test::random_tokens(rng, 1, m->n_vocab()), Logits::Last);
}

// With every FFN norm's weights zero, the router sees zero inputs, its logits tie, and the tie
// rule routes every token to experts 0..K-1 of each layer: a known subset. Only those are packed
// and resident; the other experts' reserved pages were never touched.
TEST(MoePaging, OnlyTheRoutedExpertsArePackedAndResident) {
    const std::string path = model_test::dummy_path("dummy-qwen3-moe-tiny-q4_k_m");
    std::string bytes = gguf_test::read_file(path);
    const GgufFile g = GgufFile::open(path);
    const LlamaHparams hp = model_test::load("dummy-qwen3-moe-tiny-q4_k_m")->hparams();
    // Where the data section starts: the last tensor's data ends the file, to within alignment
    // (checked below: every tensor must be found at its offset).
    uint64_t end = 0;
    for (const GgufTensorInfo& t : g.tensors()) end = std::max(end, t.offset + t.n_bytes);
    const uint64_t start = (g.file_size() - end) / g.alignment() * g.alignment();
    for (const GgufTensorInfo& t : g.tensors())
        ASSERT_EQ(std::memcmp(bytes.data() + start + t.offset, t.data, t.n_bytes), 0) << t.name;
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const GgufTensorInfo* t = g.find_tensor("blk." + std::to_string(il) + ".ffn_norm.weight");
        ASSERT_NE(t, nullptr);
        std::fill_n(bytes.begin() + static_cast<std::ptrdiff_t>(start + t->offset), t->n_bytes, '\0');
    }
    const auto m = Model::load_from_memory(std::as_bytes(std::span(bytes.data(), bytes.size())), "zero-norm");
    expect_resident_exactly(*m, [](int64_t, int64_t) { return false; }); // loading packs nothing
    run_some_passes(m, 2);
    expect_resident_exactly(*m, [&](int64_t, int64_t e) { return e < hp.n_expert_used; });
}

// On the file as made (real routing): one 1-token pass packs exactly the K experts per layer it
// read, and they alone are resident.
TEST(MoePaging, OneTokenPacksItsExpertsPerLayer) {
    const auto m = Model::load(model_test::dummy_path("dummy-qwen3-moe-tiny-q4_k_m"));
    const LlamaHparams& hp = m->hparams();
    Context ctx(m, {.n_threads = 1, .max_batch = 4});
    KvCache c(*m);
    ctx.forward(c, std::vector<TokenId>{5}, Logits::Last);
    EXPECT_EQ(ctx.experts_read(), hp.n_layer * hp.n_expert_used);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        int64_t packed = 0;
        for (int64_t e = 0; e < hp.n_expert; ++e) {
            packed += m->expert_packed(il, e) ? 1 : 0;
            EXPECT_EQ(any_resident(m->expert_packed_bytes(il, e)), m->expert_packed(il, e));
        }
        EXPECT_EQ(packed, hp.n_expert_used) << "layer " << il;
    }
    EXPECT_EQ(error_code_of([&] { (void)m->expert(hp.n_layer, 0); }), ErrorCode::argument);
    EXPECT_EQ(error_code_of([&] { (void)m->expert(0, hp.n_expert); }), ErrorCode::argument);
}

// Two contexts on two threads make their first passes over one fresh model at once: each
// expert is packed once, and both get the logits a context on a model packed alone gets.
TEST(MoePaging, ConcurrentFirstUsesGiveTheSameBits) {
    const std::string path = model_test::dummy_path("dummy-mixtral-tiny-q4_k_m");
    std::mt19937 rng(4);
    const auto tokens = model_test::random_tokens(rng, 12, 256);
    auto logits_of = [&](const std::shared_ptr<const Model>& m, std::vector<float>& out) {
        Context ctx(m, {.n_threads = 2, .max_batch = 16});
        KvCache c(*m);
        const auto l = ctx.forward(c, tokens, Logits::All);
        out.assign(l.begin(), l.end());
    };
    std::vector<float> want, a, b;
    logits_of(Model::load(path), want);
    const auto shared = Model::load(path);
    std::thread ta([&] { logits_of(shared, a); });
    std::thread tb([&] { logits_of(shared, b); });
    ta.join();
    tb.join();
    EXPECT_TRUE(model_test::same_bits(a, want));
    EXPECT_TRUE(model_test::same_bits(b, want));
}

} // namespace
} // namespace rwd
