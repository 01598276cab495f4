// Llama model files: every shared model loads with the hyperparameters the fixtures README lists,
// weights bind with the right shapes and types, fingerprints are stable and distinct, and broken
// or non-model files are refused with errors that name the file and the culprit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "gguf_test_util.h"
#include "rewind/kernels/ops.h"
#include "rewind/llama_model.h"

using namespace rwd;
using namespace gguf_test;

namespace {

struct Expect {
    const char* file;
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx, n_vocab, n_rot;
    bool tied;
    TensorType matmul_type;
};

// From shared/README.md, except aidreams260K: the README lists 5 layers and 8 heads, but the file
// itself says 4 layers (39 tensors) and 4 heads (rope dims 16 = 64/4, KV width 64), context 128,
// FFN 172; the file is what llama.cpp runs. Its output.weight is a byte copy of token_embd.
const Expect kExpect[] = {
    {"pycode-4m.gguf", 192, 6, 6, 2, 512, 512, 4096, 32, false, TensorType::F32},
    {"pycode-4m-f16.gguf", 192, 6, 6, 2, 512, 512, 4096, 32, false, TensorType::F16},
    {"pycode-4m-q8_0.gguf", 192, 6, 6, 2, 512, 512, 4096, 32, false, TensorType::Q8_0},
    {"pycode-600k.gguf", 96, 2, 3, 1, 256, 512, 4096, 32, true, TensorType::F32},
    {"aidreams260K.gguf", 64, 4, 4, 4, 172, 128, 512, 16, true, TensorType::F32},
};

void expect_weight(const WeightRef& w, int64_t rows, int64_t cols, TensorType type) {
    SCOPED_TRACE(w.name);
    EXPECT_NE(w.data, nullptr);
    EXPECT_EQ(w.rows, rows);
    EXPECT_EQ(w.cols, cols);
    EXPECT_EQ(w.type, type);
    uint64_t be = 0, bb = 0;
    ASSERT_TRUE(tensor_type_block(w.type, be, bb));
    EXPECT_EQ(w.n_bytes, static_cast<uint64_t>(rows * cols) / be * bb);
}

} // namespace

TEST(LlamaModel, SharedModelsLoadWithReadmeHyperparameters) {
    for (const Expect& e : kExpect) {
        SCOPED_TRACE(e.file);
        auto mf = LlamaModelFile::open(model_path(e.file));
        const LlamaHparams& hp = mf->hparams();
        EXPECT_EQ(hp.architecture, "llama");
        EXPECT_EQ(hp.n_embd, e.n_embd);
        EXPECT_EQ(hp.n_layer, e.n_layer);
        EXPECT_EQ(hp.n_head, e.n_head);
        EXPECT_EQ(hp.n_head_kv, e.n_head_kv);
        EXPECT_EQ(hp.n_ff, e.n_ff);
        EXPECT_EQ(hp.n_ctx_train, e.n_ctx);
        EXPECT_EQ(hp.n_vocab, e.n_vocab);
        EXPECT_EQ(hp.n_rot, e.n_rot);
        EXPECT_EQ(hp.head_dim(), e.n_embd / e.n_head);
        EXPECT_EQ(hp.n_embd_kv(), e.n_embd / e.n_head * e.n_head_kv);
        EXPECT_EQ(hp.rope_freq_base, 10000.0f);
        EXPECT_NEAR(hp.rms_eps, 1e-5f, 1e-9f);
        EXPECT_EQ(mf->tokenizer().n_vocab(), e.n_vocab);
        EXPECT_EQ(mf->tokenizer().bos(), 1);
        EXPECT_EQ(mf->tokenizer().eos(), 2);

        const LlamaWeights& w = mf->weights();
        EXPECT_EQ(w.tied_output, e.tied);
        ASSERT_EQ(w.layers.size(), static_cast<size_t>(e.n_layer));
        // Embeddings and the head: the quantized conversions quantize them too.
        expect_weight(w.tok_embd, e.n_vocab, e.n_embd, e.matmul_type);
        expect_weight(w.output, e.n_vocab, e.n_embd, e.matmul_type);
        if (e.tied) EXPECT_EQ(w.output.data, w.tok_embd.data);
        else EXPECT_NE(w.output.data, w.tok_embd.data);
        expect_weight(w.output_norm, 1, e.n_embd, TensorType::F32);
        const int64_t kv = e.n_embd / e.n_head * e.n_head_kv;
        for (size_t i = 0; i < w.layers.size(); ++i) {
            SCOPED_TRACE("layer " + std::to_string(i));
            const LlamaLayerWeights& l = w.layers[i];
            const std::string p = "blk." + std::to_string(i) + ".";
            EXPECT_EQ(l.wq.name, p + "attn_q.weight");
            EXPECT_EQ(l.ffn_down.name, p + "ffn_down.weight");
            expect_weight(l.attn_norm, 1, e.n_embd, TensorType::F32);
            expect_weight(l.ffn_norm, 1, e.n_embd, TensorType::F32);
            expect_weight(l.wq, e.n_embd, e.n_embd, e.matmul_type);
            expect_weight(l.wk, kv, e.n_embd, e.matmul_type);
            expect_weight(l.wv, kv, e.n_embd, e.matmul_type);
            expect_weight(l.wo, e.n_embd, e.n_embd, e.matmul_type);
            expect_weight(l.ffn_gate, e.n_ff, e.n_embd, e.matmul_type);
            expect_weight(l.ffn_up, e.n_ff, e.n_embd, e.matmul_type);
            expect_weight(l.ffn_down, e.n_embd, e.n_ff, e.matmul_type);
            // Weights are views into the mapping, not copies.
            EXPECT_EQ(l.wq.data, mf->gguf().find_tensor(p + "attn_q.weight")->data);
            const float* g = static_cast<const float*>(l.attn_norm.data);
            for (int64_t j = 0; j < e.n_embd; ++j) ASSERT_TRUE(std::isfinite(g[j]));
        }
    }
}

TEST(LlamaModel, BundledModelLoads) {
    auto mf = LlamaModelFile::open(std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf");
    EXPECT_EQ(mf->hparams().n_embd, 192);
    EXPECT_EQ(mf->hparams().name, "pycode-4m");
    EXPECT_EQ(mf->weights().layers[0].wq.type, TensorType::Q8_0);
    // It is a byte copy of the shared Q8_0 file, so it has the same fingerprint.
    EXPECT_EQ(mf->fingerprint(), LlamaModelFile::open(model_path("pycode-4m-q8_0.gguf"))->fingerprint());
}

TEST(LlamaModel, FingerprintStableAndDistinct) {
    std::set<uint64_t> seen;
    for (const Expect& e : kExpect) {
        uint64_t a = LlamaModelFile::open(model_path(e.file))->fingerprint();
        uint64_t b = LlamaModelFile::open(model_path(e.file))->fingerprint();
        EXPECT_EQ(a, b) << e.file;
        EXPECT_NE(a, 0u) << e.file;
        EXPECT_TRUE(seen.insert(a).second) << e.file << " shares a fingerprint";
    }

    // One flipped weight bit changes it; so does a changed hyperparameter.
    TempDir dir;
    Builder b = Builder::load(model_path("aidreams260K.gguf"));
    const uint64_t base = LlamaModelFile::open(model_path("aidreams260K.gguf"))->fingerprint();
    b.tensor("blk.2.ffn_up.weight")->data[1001] ^= 0x01;
    b.write(dir.file("flip.gguf"));
    EXPECT_NE(LlamaModelFile::open(dir.file("flip.gguf"))->fingerprint(), base);
    b.tensor("blk.2.ffn_up.weight")->data[1001] ^= 0x01;
    b.set("llama.attention.layer_norm_rms_epsilon", F32, raw<float>(1e-6f));
    b.write(dir.file("eps.gguf"));
    EXPECT_NE(LlamaModelFile::open(dir.file("eps.gguf"))->fingerprint(), base);
    // Re-serializing the same content (different header bytes) keeps it.
    b.set("llama.attention.layer_norm_rms_epsilon", F32, raw<float>(9.999999747378752e-06f));
    b.set("general.alignment", U32, raw<uint32_t>(64));
    b.alignment = 64;
    b.write(dir.file("same.gguf"));
    EXPECT_EQ(LlamaModelFile::open(dir.file("same.gguf"))->fingerprint(), base);
}

TEST(LlamaModel, VocabularyOnlyFileIsRefused) {
    for (const char* v : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"}) {
        std::string path = vocab_path(v);
        std::string m = error_of([&] { LlamaModelFile::open(path); });
        ASSERT_FALSE(m.empty()) << v;
        EXPECT_NE(m.find(path), std::string::npos) << m;
        EXPECT_NE(m.find("no tensors"), std::string::npos) << m;
        EXPECT_NE(m.find("vocabulary-only"), std::string::npos) << m;
    }
}

TEST(LlamaModel, TiedHeadWhenOutputIsAbsent) {
    TempDir dir;
    Builder b = Builder::load(model_path("pycode-4m.gguf"));
    b.remove_tensor("output.weight");
    b.write(dir.file("tied.gguf"));
    auto mf = LlamaModelFile::open(dir.file("tied.gguf"));
    EXPECT_TRUE(mf->weights().tied_output);
    EXPECT_EQ(mf->weights().output.data, mf->weights().tok_embd.data);
    EXPECT_EQ(mf->weights().output.rows, 4096);
}

TEST(LlamaModel, Defaults) {
    // aidreams has no vocab_size (counted from the tokens), rope base or alignment keys.
    auto a = LlamaModelFile::open(model_path("aidreams260K.gguf"));
    EXPECT_FALSE(a->gguf().find("llama.vocab_size"));
    EXPECT_FALSE(a->gguf().find("llama.rope.freq_base"));
    EXPECT_EQ(a->hparams().n_vocab, 512);
    EXPECT_EQ(a->hparams().rope_freq_base, 10000.0f);

    TempDir dir;
    Builder b = Builder::load(model_path("aidreams260K.gguf"));
    b.remove_kv("llama.attention.head_count_kv")
        .remove_kv("llama.rope.dimension_count")
        .remove_kv("llama.attention.layer_norm_rms_epsilon");
    b.write(dir.file("defaults.gguf"));
    auto d = LlamaModelFile::open(dir.file("defaults.gguf"));
    EXPECT_EQ(d->hparams().n_head_kv, 4);  // = n_head
    EXPECT_EQ(d->hparams().n_rot, 16);     // = head_dim
    EXPECT_EQ(d->hparams().rms_eps, 1e-5f);
    EXPECT_EQ(d->hparams().name, "llama");
}

// Edits that leave a well-formed GGUF but not a usable llama model.
TEST(LlamaModel, InconsistentFilesAreRefused) {
    TempDir dir;
    struct Case {
        const char* what;
        std::function<void(Builder&)> edit;
        std::vector<std::string> words;
    };
    const Case cases[] = {
        {"missing tensor", [](Builder& b) { b.remove_tensor("blk.1.ffn_up.weight"); },
         {"blk.1.ffn_up.weight", "missing"}},
        {"missing norm", [](Builder& b) { b.remove_tensor("output_norm.weight"); }, {"output_norm.weight", "missing"}},
        {"extra tensor",
         [](Builder& b) { b.tensors.push_back({"blk.0.attn_q.bias", {64}, 0, std::string(256, '\0')}); },
         {"blk.0.attn_q.bias", "unexpected", "llama"}},
        {"rope factors of the wrong length",
         [](Builder& b) { b.tensors.push_back({"rope_freqs.weight", {5}, 0, std::string(20, '\0')}); },
         {"rope_freqs.weight", "shape", "[8]"}},
        {"yarn rope scaling", [](Builder& b) { b.set("llama.rope.scaling.type", STR, raw_str("yarn")); },
         {"llama.rope.scaling.type", "yarn", "not supported"}},
        {"scaling factor without a type", [](Builder& b) { b.set("llama.rope.scaling.factor", F32, raw<float>(4.0f)); },
         {"llama.rope.scaling.factor"}},
        {"extra layer",
         [](Builder& b) {
             RawTensor t = *b.tensor("blk.0.attn_norm.weight");
             t.name = "blk.4.attn_norm.weight";
             b.tensors.push_back(t);
         },
         {"blk.4.attn_norm.weight", "unexpected"}},
        {"ffn length disagrees", [](Builder& b) { b.set("llama.feed_forward_length", U32, raw<uint32_t>(128)); },
         {"ffn_", "shape", "[64, 128]"}},
        {"more layers than tensors", [](Builder& b) { b.set("llama.block_count", U32, raw<uint32_t>(5)); },
         {"blk.4.", "missing"}},
        {"heads do not divide width", [](Builder& b) { b.set("llama.attention.head_count", U32, raw<uint32_t>(5)); },
         {"llama.attention.head_count", "divisible"}},
        {"kv heads do not divide heads",
         [](Builder& b) { b.set("llama.attention.head_count_kv", U32, raw<uint32_t>(3)); },
         {"llama.attention.head_count_kv", "divisible"}},
        {"kv width disagrees", [](Builder& b) { b.set("llama.attention.head_count_kv", U32, raw<uint32_t>(2)); },
         {"attn_k.weight", "shape"}},
        {"zero heads", [](Builder& b) { b.set("llama.attention.head_count", U32, raw<uint32_t>(0)); },
         {"llama.attention.head_count", "out of range"}},
        {"negative width", [](Builder& b) { b.set("llama.embedding_length", I32, raw<int32_t>(-64)); },
         {"llama.embedding_length", "out of range"}},
        {"huge context", [](Builder& b) { b.set("llama.context_length", U64, raw<uint64_t>(1ull << 40)); },
         {"llama.context_length", "out of range"}},
        {"width as a string", [](Builder& b) { b.set("llama.embedding_length", STR, raw_str("64")); },
         {"llama.embedding_length", "type"}},
        {"missing width", [](Builder& b) { b.remove_kv("llama.embedding_length"); },
         {"llama.embedding_length", "missing"}},
        {"odd rope dims", [](Builder& b) { b.set("llama.rope.dimension_count", U32, raw<uint32_t>(15)); },
         {"llama.rope.dimension_count", "even"}},
        {"rope dims past head", [](Builder& b) { b.set("llama.rope.dimension_count", U32, raw<uint32_t>(32)); },
         {"llama.rope.dimension_count"}},
        {"zero eps", [](Builder& b) { b.set("llama.attention.layer_norm_rms_epsilon", F32, raw<float>(0.0f)); },
         {"layer_norm_rms_epsilon", "positive"}},
        {"nan rope base", [](Builder& b) { b.set("llama.rope.freq_base", F32, raw<float>(NAN)); },
         {"llama.rope.freq_base", "positive"}},
        {"other architecture", [](Builder& b) { b.set("general.architecture", STR, raw_str("gpt2")); },
         {"general.architecture", "gpt2"}},
        {"no architecture", [](Builder& b) { b.remove_kv("general.architecture"); },
         {"general.architecture", "missing"}},
        {"vocab size disagrees", [](Builder& b) { b.set("llama.vocab_size", U32, raw<uint32_t>(500)); },
         {"token_embd.weight", "shape"}},
        {"norm not F32",
         [](Builder& b) {
             RawTensor* t = b.tensor("blk.0.ffn_norm.weight");
             t->type = 1; // F16
             t->data.resize(t->data.size() / 2);
         },
         {"blk.0.ffn_norm.weight", "F16"}},
        {"unsupported matmul type",
         [](Builder& b) {
             RawTensor* t = b.tensor("blk.0.attn_q.weight"); // 64x64 F32 -> 64x64 Q8_1 (36 bytes / 32)
             t->type = 9;
             t->data.resize(64 * 64 / 32 * 36);
         },
         {"blk.0.attn_q.weight", "Q8_1", "not supported"}},
        {"embedding transposed",
         [](Builder& b) {
             RawTensor* t = b.tensor("token_embd.weight");
             std::swap(t->dims[0], t->dims[1]);
         },
         {"token_embd.weight", "[512, 64]"}},
        {"no tokenizer", [](Builder& b) { b.remove_kv("tokenizer.ggml.tokens"); }, {"tokenizer.ggml.tokens"}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        Builder b = Builder::load(model_path("aidreams260K.gguf"));
        c.edit(b);
        std::string path = dir.file("bad.gguf");
        b.write(path);
        std::string m = error_of([&] { LlamaModelFile::open(path); });
        ASSERT_FALSE(m.empty()) << c.what << ": loaded without error";
        EXPECT_NE(m.find(path), std::string::npos) << m;
        for (const std::string& w : c.words) EXPECT_NE(m.find(w), std::string::npos) << "lacks '" << w << "': " << m;
    }
}

TEST(LlamaModel, MalformedGgufSurfacesAsError) {
    TempDir dir;
    std::string bytes = read_file(model_path("pycode-600k.gguf"));
    std::string path = dir.file("cut.gguf");
    write_file(path, bytes.substr(0, bytes.size() / 2));
    std::string m = error_of([&] { LlamaModelFile::open(path); });
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("past the end"), std::string::npos) << m;
}

// Each architecture file loads with its own hyperparameters and tensors.
TEST(ArchModels, LoadWithTheirOwnHyperparameters) {
    auto l = LlamaModelFile::open(model_path("arch-llama3.gguf"));
    EXPECT_EQ(l->hparams().arch->rope, RopeMode::Norm);
    EXPECT_EQ(l->hparams().rope_freq_base, 500000.0f);
    EXPECT_TRUE(l->weights().rope_freqs.data);
    EXPECT_TRUE(l->weights().tied_output);
    auto q2 = LlamaModelFile::open(model_path("arch-qwen2.gguf"));
    EXPECT_EQ(q2->hparams().arch->rope, RopeMode::Neox);
    EXPECT_TRUE(q2->weights().layers[0].bq.data && q2->weights().layers[3].bv.data);
    EXPECT_FALSE(q2->weights().tied_output);
    auto q3 = LlamaModelFile::open(model_path("arch-qwen3.gguf"));
    EXPECT_EQ(q3->weights().layers[1].attn_q_norm.cols, 32);
    auto p3 = LlamaModelFile::open(model_path("arch-phi3.gguf"));
    EXPECT_TRUE(p3->weights().layers[0].wqkv.data);
    EXPECT_EQ(p3->weights().layers[0].ffn_up.rows, 768);
    EXPECT_EQ(p3->hparams().n_swa, 0); // as llama.cpp: phi3's sliding_window is not applied
    EXPECT_EQ(p3->hparams().n_swa_file, 2047);
    auto g3 = LlamaModelFile::open(model_path("arch-gemma3.gguf"));
    const LlamaHparams& h = g3->hparams();
    EXPECT_EQ(h.n_swa, 32);
    EXPECT_EQ(h.swa_pattern, 6);
    EXPECT_EQ(h.rope_freq_base_swa, 10000.0f);
    for (int il = 0; il < 6; ++il) EXPECT_EQ(h.is_swa_layer(il), il != 5) << il;
    EXPECT_FLOAT_EQ(h.attn_scale, 1.0f / std::sqrt(32.0f));
    EXPECT_TRUE(g3->weights().tied_output);
}

// A file that claims an architecture but lacks one of its tensors, or has one of the wrong shape,
// is refused with the tensor's name; so are features this build does not implement.
TEST(ArchModels, MissingOrMisshapenTensorsAreRefusedByName) {
    TempDir dir;
    struct Case {
        const char* file;
        const char* what;
        std::function<void(Builder&)> edit;
        std::vector<std::string> words;
    };
    auto shrink = [](const char* name) {
        return [name](Builder& b) {
            RawTensor* t = b.tensor(name);
            t->dims[0] -= 1;
            t->data.resize(t->data.size() - 4 * (t->dims.size() > 1 ? t->dims[1] : 1));
        };
    };
    const Case cases[] = {
        {"arch-qwen2.gguf", "no K bias", [](Builder& b) { b.remove_tensor("blk.2.attn_k.bias"); },
         {"blk.2.attn_k.bias", "missing"}},
        {"arch-qwen2.gguf", "short V bias", shrink("blk.0.attn_v.bias"), {"blk.0.attn_v.bias", "shape", "[64]"}},
        {"arch-qwen3.gguf", "no K norm", [](Builder& b) { b.remove_tensor("blk.3.attn_k_norm.weight"); },
         {"blk.3.attn_k_norm.weight", "missing"}},
        {"arch-qwen3.gguf", "short Q norm", shrink("blk.1.attn_q_norm.weight"), {"blk.1.attn_q_norm.weight", "shape"}},
        {"arch-phi3.gguf", "no fused QKV", [](Builder& b) { b.remove_tensor("blk.0.attn_qkv.weight"); },
         {"blk.0.attn_qkv.weight", "missing"}},
        {"arch-phi3.gguf", "unfused ffn_up", shrink("blk.1.ffn_up.weight"), {"blk.1.ffn_up.weight", "shape"}},
        {"arch-phi3.gguf", "LongRoPE factors",
         [](Builder& b) { b.tensors.push_back({"rope_factors_long.weight", {16}, 0, std::string(64, '\0')}); },
         {"rope_factors_long.weight", "LongRoPE", "not supported"}},
        {"arch-gemma3.gguf", "no post-FFN norm", [](Builder& b) { b.remove_tensor("blk.5.post_ffw_norm.weight"); },
         {"blk.5.post_ffw_norm.weight", "missing"}},
        {"arch-gemma3.gguf", "no window", [](Builder& b) { b.remove_kv("gemma3.attention.sliding_window"); },
         {"gemma3.attention.sliding_window", "required"}},
        {"arch-gemma3.gguf", "attention soft-capping",
         [](Builder& b) { b.set("gemma3.attn_logit_softcapping", F32, raw<float>(50.0f)); },
         {"gemma3.attn_logit_softcapping", "not supported"}},
        {"arch-qwen2.gguf", "a sliding window on qwen2",
         [](Builder& b) { b.set("qwen2.attention.sliding_window", U32, raw<uint32_t>(64)); },
         {"qwen2.attention.sliding_window", "not supported"}},
        {"arch-llama3.gguf", "short rope factors", shrink("rope_freqs.weight"), {"rope_freqs.weight", "shape", "[16]"}},
        {"arch-llama3.gguf", "qwen2 tensors in a llama file",
         [](Builder& b) { b.tensors.push_back({"blk.0.attn_q.bias", {128}, 0, std::string(512, '\0')}); },
         {"blk.0.attn_q.bias", "unexpected"}},
        {"arch-qwen3.gguf", "longrope scaling", [](Builder& b) { b.set("qwen3.rope.scaling.type", STR, raw_str("longrope")); },
         {"qwen3.rope.scaling.type", "longrope"}},
        {"arch-qwen3.gguf", "unknown architecture", [](Builder& b) { b.set("general.architecture", STR, raw_str("mamba")); },
         {"mamba", "llama, qwen2, qwen3, phi3, gemma3"}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        Builder b = Builder::load(model_path(c.file));
        c.edit(b);
        const std::string path = dir.file("bad.gguf");
        b.write(path);
        const std::string m = error_of([&] { LlamaModelFile::open(path); });
        ASSERT_FALSE(m.empty()) << c.what << ": loaded without error";
        for (const std::string& w : c.words) EXPECT_NE(m.find(w), std::string::npos) << "lacks '" << w << "': " << m;
    }
}

// Linear rope scaling is applied (the angles times 1/factor), not ignored.
TEST(ArchModels, LinearRopeScalingIsRead) {
    TempDir dir;
    Builder b = Builder::load(model_path("arch-qwen2.gguf"));
    b.set("qwen2.rope.scaling.type", STR, raw_str("linear")).set("qwen2.rope.scaling.factor", F32, raw<float>(4.0f));
    b.write(dir.file("linear.gguf"));
    auto m = LlamaModelFile::open(dir.file("linear.gguf"));
    EXPECT_EQ(m->hparams().rope_scaling, "linear");
    EXPECT_EQ(m->hparams().rope_freq_scale, 0.25f);
    EXPECT_NE(m->fingerprint(), LlamaModelFile::open(model_path("arch-qwen2.gguf"))->fingerprint());
}
