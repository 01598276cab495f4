// make-dummy's engine: llama-quantize's per-tensor type choices on the real shapes (no files
// written), and small files (the `tiny` shape) that load in rewind, generate, have the stated
// weight statistics and are the same bytes for a seed whatever the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "gguf_test_util.h"
#include "rewind/context.h"
#include "rewind/dummy_model.h"
#include "rewind/generate.h"
#include "rewind/gguf.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kv_cache.h"
#include "rewind/llama_model.h"
#include "rewind/model.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/ngram_source.h"

using namespace rwd;
using namespace gguf_test;

namespace {

const std::string kPycodeVocab = model_path("pycode-4m.gguf");

DummyOptions tiny(const std::string& type, const std::string& out, uint64_t seed = 1, int threads = 1) {
    DummyOptions o;
    o.shape = "tiny";
    o.file_type = type;
    o.vocab_path = kPycodeVocab;
    o.seed = seed;
    o.threads = threads;
    o.out_path = out;
    return o;
}

TensorType type_of(DummyFileType ft, const DummyShape& s, const std::string& name, int64_t layer = -1) {
    int64_t cols = s.n_embd;
    if (name.find("ffn_down") != std::string::npos) cols = s.n_ff;
    return dummy_tensor_type(ft, name, cols, layer, s.n_layer, s.tied_output);
}

} // namespace

TEST(DummyModel, ShapesAndNames) {
    const DummyShape& s = find_dummy_shape("llama-1b");
    EXPECT_EQ(s.n_embd, 2048);
    EXPECT_EQ(s.n_layer, 16);
    EXPECT_EQ(s.n_head, 32);
    EXPECT_EQ(s.n_head_kv, 8);
    EXPECT_EQ(s.n_ff, 8192);
    EXPECT_EQ(find_dummy_shape("qwen-7b").n_ff, 18944);
    EXPECT_NE(error_of([] { find_dummy_shape("llama-70b"); }).find("known: tiny, llama-1b"), std::string::npos);
    EXPECT_EQ(parse_dummy_file_type("Q4_K_M"), DummyFileType::Q4_K_M);
    EXPECT_NE(error_of([] { parse_dummy_file_type("q5_k_s"); }).find("known: f32"), std::string::npos);
}

// The full-size expert shape (its 18 GB file is for benchmarks, not made here): Qwen3-30B-A3B's
// sizes, and llama-quantize's types for its expert tensors in a Q4_K_M file.
TEST(DummyModel, Qwen3MoeShapeAndExpertTypes) {
    const DummyShape& s = find_dummy_shape("qwen3-30b-a3b");
    EXPECT_EQ(s.arch, "qwen3moe");
    EXPECT_EQ(s.n_layer, 48);
    EXPECT_EQ(s.n_embd, 2048);
    EXPECT_EQ(s.head_size() * s.n_head, 4096); // 32 heads of 128
    EXPECT_EQ(s.n_head_kv, 4);
    EXPECT_EQ(s.n_expert, 128);
    EXPECT_EQ(s.n_expert_used, 8);
    EXPECT_EQ(s.n_ff_exp, 768);
    const auto ft = DummyFileType::Q4_K_M;
    EXPECT_EQ(dummy_tensor_type(ft, "blk.3.ffn_gate_inp.weight", 2048, 3, 48, false, 128), TensorType::F32);
    EXPECT_EQ(dummy_tensor_type(ft, "blk.3.ffn_gate_exps.weight", 2048, 3, 48, false, 128), TensorType::Q4_K);
    EXPECT_EQ(dummy_tensor_type(ft, "blk.47.ffn_down_exps.weight", 768, 47, 48, false, 128), TensorType::Q6_K);
    EXPECT_EQ(dummy_tensor_type(ft, "blk.7.ffn_down_exps.weight", 768, 7, 48, false, 128), TensorType::Q4_K);
    EXPECT_EQ(dummy_tensor_type(ft, "blk.3.ffn_down_exps.weight", 768, 3, 48, false, 128), TensorType::Q6_K); // first eighth
    EXPECT_EQ(dummy_tensor_type(ft, "blk.3.attn_k.weight", 2048, 3, 48, false, 128), TensorType::Q4_K);
    EXPECT_EQ(dummy_tensor_type(ft, "blk.3.attn_k.weight", 2048, 3, 48, false, 8), TensorType::Q8_0); // Mixtral's 8
}

// llama-quantize's choices: the head (the token embedding when tied) to Q6_K, attn_v and ffn_down
// of the "more bits" layers to Q6_K in Q4_K_M, fallbacks where rows are not a multiple of 256.
TEST(DummyModel, LlamaQuantizeTypeChoices) {
    using T = TensorType;
    using F = DummyFileType;
    const DummyShape& l1 = find_dummy_shape("llama-1b"); // tied, 16 layers
    EXPECT_EQ(type_of(F::Q4_K_M, l1, "token_embd.weight"), T::Q6_K);
    EXPECT_EQ(type_of(F::Q4_K_M, l1, "blk.0.attn_q.weight", 0), T::Q4_K);
    EXPECT_EQ(type_of(F::Q4_K_M, l1, "blk.5.attn_output.weight", 5), T::Q4_K);
    EXPECT_EQ(type_of(F::Q4_K_M, l1, "blk.5.ffn_up.weight", 5), T::Q4_K);
    // use_more_bits(i, 16): i < 2, i >= 14, or (i - 2) % 3 == 2: layers 0,1,4,7,10,13,14,15.
    std::vector<int> more;
    for (int i = 0; i < 16; ++i)
        if (type_of(F::Q4_K_M, l1, "blk." + std::to_string(i) + ".attn_v.weight", i) == T::Q6_K) more.push_back(i);
    EXPECT_EQ(more, (std::vector<int>{0, 1, 4, 7, 10, 13, 14, 15}));
    EXPECT_EQ(type_of(F::Q4_K_M, l1, "blk.4.ffn_down.weight", 4), T::Q6_K);
    EXPECT_EQ(type_of(F::Q4_K_M, l1, "blk.5.ffn_down.weight", 5), T::Q4_K);
    for (int i = 0; i < 16; ++i) // Q5_K_M: the same layers get Q6_K
        EXPECT_EQ(type_of(F::Q5_K_M, l1, "blk." + std::to_string(i) + ".attn_v.weight", i),
                  std::find(more.begin(), more.end(), i) != more.end() ? T::Q6_K : T::Q5_K);
    EXPECT_EQ(type_of(F::Q5_K_M, l1, "token_embd.weight"), T::Q6_K);
    EXPECT_EQ(type_of(F::Q5_K_M, l1, "blk.2.ffn_gate.weight", 2), T::Q5_K);
    EXPECT_EQ(type_of(F::Q4_0, l1, "token_embd.weight"), T::Q6_K);
    EXPECT_EQ(type_of(F::Q4_0, l1, "blk.0.attn_v.weight", 0), T::Q4_0);
    EXPECT_EQ(type_of(F::Q8_0, l1, "token_embd.weight"), T::Q8_0);
    EXPECT_EQ(type_of(F::Q6_K, l1, "blk.3.ffn_gate.weight", 3), T::Q6_K);
    EXPECT_EQ(type_of(F::F16, l1, "token_embd.weight"), T::F16);
    EXPECT_EQ(type_of(F::BF16, l1, "blk.0.attn_k.weight", 0), T::BF16);

    const DummyShape& l8 = find_dummy_shape("llama-8b"); // untied: the embedding keeps the file's type
    EXPECT_EQ(type_of(F::Q4_K_M, l8, "token_embd.weight"), T::Q4_K);
    EXPECT_EQ(type_of(F::Q4_K_M, l8, "output.weight"), T::Q6_K);
    EXPECT_EQ(type_of(F::Q4_0, l8, "output.weight"), T::Q6_K);

    const DummyShape& q = find_dummy_shape("qwen-0.5b"); // rows of 896 = 3.5 x 256
    EXPECT_EQ(type_of(F::Q4_K_M, q, "token_embd.weight"), T::Q8_0);            // Q6_K head falls back
    EXPECT_EQ(type_of(F::Q4_K_M, q, "blk.3.attn_q.weight", 3), T::Q5_0);       // Q4_K falls back
    EXPECT_EQ(type_of(F::Q4_K_M, q, "blk.0.attn_v.weight", 0), T::Q8_0);       // Q6_K falls back
    EXPECT_EQ(type_of(F::Q4_K_M, q, "blk.3.ffn_down.weight", 3), T::Q4_K);     // 4864 = 19 x 256
    EXPECT_EQ(type_of(F::Q4_K_M, q, "blk.0.ffn_down.weight", 0), T::Q6_K);
    EXPECT_EQ(type_of(F::Q5_K_M, q, "token_embd.weight"), T::Q8_0);            // Q6_K head falls back
    EXPECT_EQ(type_of(F::Q5_K_M, q, "blk.3.attn_q.weight", 3), T::Q5_1);       // Q5_K falls back
    EXPECT_EQ(type_of(F::Q5_K_M, q, "blk.0.attn_v.weight", 0), T::Q8_0);
    EXPECT_EQ(type_of(F::Q5_K_M, q, "blk.3.ffn_down.weight", 3), T::Q5_K);
    EXPECT_EQ(type_of(F::Q5_K_M, q, "blk.1.ffn_down.weight", 1), T::Q6_K);
    EXPECT_EQ(type_of(F::Q6_K, q, "blk.0.attn_q.weight", 0), T::Q8_0);
    EXPECT_EQ(type_of(F::Q4_0, q, "blk.0.attn_q.weight", 0), T::Q4_0);
}

TEST(DummyModel, TinyFilesLoadAndGenerate) {
    TempDir dir;
    for (const char* type : {"f32", "f16", "bf16", "q8_0"}) {
        SCOPED_TRACE(type);
        const std::string path = dir.file(std::string("tiny-") + type + ".gguf");
        const DummyReport r = write_dummy_model(tiny(type, path));
        EXPECT_EQ(r.file_bytes, std::filesystem::file_size(path));
        EXPECT_EQ(r.n_vocab, 4096);
        auto file = LlamaModelFile::open(path);
        const LlamaHparams& hp = file->hparams();
        EXPECT_EQ(hp.architecture, "llama");
        EXPECT_EQ(hp.n_embd, 256);
        EXPECT_EQ(hp.n_layer, 2);
        EXPECT_EQ(hp.n_head_kv, 2);
        EXPECT_EQ(hp.n_ff, 512);
        EXPECT_EQ(hp.n_vocab, 4096);
        EXPECT_FALSE(file->weights().tied_output);
        EXPECT_EQ(*file->gguf().get_uint("general.file_type"), static_cast<uint64_t>(parse_dummy_file_type(type)));
        EXPECT_EQ(file->gguf().alignment(), 32u);
        // The tokenizer came along: the pycode vocabulary tokenizes as in the source file.
        auto src = LlamaModelFile::open(kPycodeVocab);
        EXPECT_EQ(file->tokenizer().encode("def f(x):\n    return x"), src->tokenizer().encode("def f(x):\n    return x"));

        auto model = Model::load(path);
        Context ctx(model);
        KvCache cache(*model, {.capacity = 64});
        GenerateOptions g;
        g.max_tokens = 8;
        const GenerateResult out = generate_plain(ctx, cache, model->tokenizer().encode("import os"), g);
        EXPECT_EQ(out.tokens.size(), 8u);
    }
}

// Every architecture rewind runs, written from its table in arch.cpp: the file loads as that
// architecture with its own tensors, carries the chat template it was given, and speculative
// decoding on it equals plain decoding.
TEST(DummyModel, EveryArchitectureWithAChatTemplate) {
    TempDir dir;
    const std::string tmpl = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
    for (const char* arch : {"llama", "qwen2", "qwen3", "phi3", "gemma3"}) {
        SCOPED_TRACE(arch);
        const std::string path = dir.file(std::string("tiny-") + arch + ".gguf");
        DummyOptions o = tiny("f32", path);
        o.arch = arch;
        o.chat_template = tmpl;
        write_dummy_model(o);
        auto file = LlamaModelFile::open(path);
        EXPECT_EQ(file->hparams().architecture, arch);
        EXPECT_EQ(file->gguf().get_string("tokenizer.chat_template").value_or(""), tmpl);
        const bool fused = std::string(arch) == "phi3";
        EXPECT_EQ(file->weights().layers.at(0).wqkv.data != nullptr, fused);
        if (std::string(arch) == "qwen2") {
            EXPECT_NE(file->weights().layers.at(0).bq.data, nullptr);
        }
        if (std::string(arch) == "gemma3") {
            EXPECT_GT(file->hparams().n_swa, 0);
        }

        auto model = Model::load(path);
        Context ctx(model);
        GenerateOptions g;
        g.max_tokens = 24;
        g.stop_at_eog = false;
        const std::vector<TokenId> prompt = model->tokenizer().encode("def f(x):\n    return x + 1\n\ndef f(x):");
        KvCache plain_cache(*model, {.capacity = 128}), spec_cache(*model, {.capacity = 128});
        const GenerateResult want = generate_plain(ctx, plain_cache, prompt, g);
        speculate::NgramSource src;
        speculate::SpeculativeOptions so;
        so.generate = g;
        so.k = 4;
        EXPECT_EQ(speculate::generate_speculative(ctx, spec_cache, prompt, src, so).tokens, want.tokens);
    }
    std::string bad;
    try {
        DummyOptions o = tiny("f32", dir.file("bad.gguf"));
        o.arch = "mamba";
        write_dummy_model(o);
    } catch (const Error& e) {
        bad = e.what();
    }
    EXPECT_NE(bad.find("unknown architecture 'mamba'"), std::string::npos) << bad;
}

TEST(DummyModel, WeightStatistics) {
    TempDir dir;
    const std::string path = dir.file("tiny.gguf");
    write_dummy_model(tiny("f32", path));
    GgufFile g = GgufFile::open(path);
    auto stats = [&](const std::string& name) {
        const GgufTensorInfo* t = g.find_tensor(name);
        const auto* x = reinterpret_cast<const float*>(t->data);
        double s = 0, s2 = 0;
        for (uint64_t i = 0; i < t->n_elements; ++i) s += x[i], s2 += double(x[i]) * x[i];
        const double mean = s / double(t->n_elements);
        return std::pair<double, double>(mean, std::sqrt(s2 / double(t->n_elements) - mean * mean));
    };
    auto [m_q, sd_q] = stats("blk.0.attn_q.weight");     // fan-in 256
    EXPECT_NEAR(m_q, 0.0, 0.002);
    EXPECT_NEAR(sd_q, 1.0 / 16.0, 0.001);
    auto [m_d, sd_d] = stats("blk.1.ffn_down.weight");   // fan-in 512
    EXPECT_NEAR(sd_d, 1.0 / std::sqrt(512.0), 0.001);
    auto [m_n, sd_n] = stats("blk.0.attn_norm.weight");  // near 1
    EXPECT_NEAR(m_n, 1.0, 0.02);
    EXPECT_LT(sd_n, 0.1);
}

TEST(DummyModel, SameSeedSameBytesWhateverTheThreads) {
    TempDir dir;
    write_dummy_model(tiny("q8_0", dir.file("a.gguf"), 7, 1));
    write_dummy_model(tiny("q8_0", dir.file("b.gguf"), 7, 3));
    write_dummy_model(tiny("q8_0", dir.file("c.gguf"), 8, 1));
    EXPECT_EQ(read_file(dir.file("a.gguf")), read_file(dir.file("b.gguf")));
    EXPECT_NE(read_file(dir.file("a.gguf")), read_file(dir.file("c.gguf")));
}

// A row pool of N: each tensor's first N rows are the ones generated without a pool, and every
// later row repeats row r mod N (the byte count and everything else stay the same).
TEST(DummyModel, RowPoolRepeatsTheFirstRows) {
    TempDir dir;
    write_dummy_model(tiny("q4_k_m", dir.file("full.gguf"), 7, 1));
    DummyOptions o = tiny("q4_k_m", dir.file("pool.gguf"), 7, 2);
    o.row_pool = 5;
    write_dummy_model(o);
    const GgufFile full = GgufFile::open(dir.file("full.gguf")), pool = GgufFile::open(dir.file("pool.gguf"));
    ASSERT_EQ(full.file_size(), pool.file_size());
    int repeated = 0;
    for (const GgufTensorInfo& t : pool.tensors()) {
        const GgufTensorInfo* f = full.find_tensor(t.name);
        ASSERT_NE(f, nullptr);
        const uint64_t rows = t.dims.size() > 1 ? t.n_elements / t.dims[0] : 1, row = t.n_bytes / rows;
        for (uint64_t r = 0; r < rows; ++r) {
            const uint8_t* want = r < 5 ? f->data + r * row : t.data + (r % 5) * row;
            EXPECT_EQ(std::memcmp(t.data + r * row, want, row), 0) << t.name << " row " << r;
        }
        repeated += rows > 5 ? 1 : 0;
    }
    EXPECT_GT(repeated, 0);
    o.row_pool = -1;
    EXPECT_NE(error_of([&] { write_dummy_model(o); }).find("row pool"), std::string::npos);
}

TEST(DummyModel, ErrorsLeaveNoFile) {
    TempDir dir;
    const std::string out = dir.file("x.gguf");
    EXPECT_NE(error_of([&] { auto o = tiny("f32", out); o.shape = "nope"; write_dummy_model(o); }).find("unknown shape"),
              std::string::npos);
    EXPECT_NE(error_of([&] { auto o = tiny("q3_k", out); write_dummy_model(o); }).find("unknown type"), std::string::npos);
    // A vocabulary file without a tokenizer.
    const std::string bare = dir.file("bare.gguf");
    {
        Builder b;
        b.set("general.architecture", STR, raw_str("llama"));
        write_file(bare, b.serialize());
    }
    EXPECT_NE(error_of([&] { auto o = tiny("f32", out); o.vocab_path = bare; write_dummy_model(o); }).find("no tokenizer"),
              std::string::npos);
    // (The bundled model's vocabulary, so that this needs no fixture.)
    EXPECT_NE(error_of([&] {
                  auto o = tiny("f32", dir.file("missing-dir/x.gguf"));
                  o.vocab_path = std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf";
                  write_dummy_model(o);
              }).find("cannot create"),
              std::string::npos);
    EXPECT_FALSE(std::filesystem::exists(out));
}

// The quantized mixes: the per-tensor types llama-quantize would pick for the tiny shape (rows of
// 256 and 512, so no fallbacks; 2 layers: use_more_bits picks layer 1), and rows that dequantize
// to the intended statistics.
TEST(DummyModel, QuantizedMixes) {
    TempDir dir;
    struct Want { const char* type; TensorType embd, q, v0, v1, down0, down1, head; };
    const Want wants[] = {
        {"q4_0", TensorType::Q4_0, TensorType::Q4_0, TensorType::Q4_0, TensorType::Q4_0, TensorType::Q4_0,
         TensorType::Q4_0, TensorType::Q6_K},
        {"q4_k_m", TensorType::Q4_K, TensorType::Q4_K, TensorType::Q4_K, TensorType::Q6_K, TensorType::Q4_K,
         TensorType::Q6_K, TensorType::Q6_K},
        {"q5_k_m", TensorType::Q5_K, TensorType::Q5_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q5_K,
         TensorType::Q6_K, TensorType::Q6_K},
        {"q6_k", TensorType::Q6_K, TensorType::Q6_K, TensorType::Q6_K, TensorType::Q6_K, TensorType::Q6_K,
         TensorType::Q6_K, TensorType::Q6_K},
    };
    for (const Want& w : wants) {
        SCOPED_TRACE(w.type);
        const std::string path = dir.file(std::string("tiny-") + w.type + ".gguf");
        const DummyReport r = write_dummy_model(tiny(w.type, path));
        GgufFile g = GgufFile::open(path);
        EXPECT_EQ(r.file_bytes, g.file_size());
        EXPECT_EQ(g.find_tensor("token_embd.weight")->type, w.embd);
        EXPECT_EQ(g.find_tensor("blk.0.attn_q.weight")->type, w.q);
        EXPECT_EQ(g.find_tensor("blk.0.attn_v.weight")->type, w.v0);
        EXPECT_EQ(g.find_tensor("blk.1.attn_v.weight")->type, w.v1);
        EXPECT_EQ(g.find_tensor("blk.0.ffn_down.weight")->type, w.down0);
        EXPECT_EQ(g.find_tensor("blk.1.ffn_down.weight")->type, w.down1);
        EXPECT_EQ(g.find_tensor("output.weight")->type, w.head);
        EXPECT_EQ(g.find_tensor("blk.0.attn_norm.weight")->type, TensorType::F32);
        EXPECT_EQ(*g.get_uint("general.file_type"), static_cast<uint64_t>(parse_dummy_file_type(w.type)));
        EXPECT_EQ(*g.get_uint("general.quantization_version"), 2u);
        // Dequantized, attn_q (fan-in 256) keeps std 1/16 within the quantization error.
        const GgufTensorInfo* q = g.find_tensor("blk.0.attn_q.weight");
        const DType dt = *tensor_dtype(q->type);
        const size_t row_bytes = dtype_row_bytes(dt, 256);
        std::vector<float> x(256);
        double s2 = 0;
        for (int row = 0; row < 256; ++row) {
            dequantize_row(dt, q->data + static_cast<size_t>(row) * row_bytes, 256, x.data());
            for (float v : x) s2 += double(v) * v;
        }
        EXPECT_NEAR(std::sqrt(s2 / (256.0 * 256.0)), 1.0 / 16.0, 0.006);
    }
}
