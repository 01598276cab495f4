// GGUF reader on real files (the shared models and vocabularies) and on synthetic files that use
// every metadata type, nested arrays, GGUF v2, other alignments and every tensor type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gguf_test_util.h"
#include "rewind/gguf.h"

using namespace rwd;
using namespace gguf_test;

namespace {

const char* kModels[] = {"aidreams260K.gguf", "pycode-4m.gguf", "pycode-600k.gguf", "pycode-4m-f16.gguf",
                         "pycode-4m-q8_0.gguf"};

float fp16(uint16_t h) {
    uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 31, man = h & 1023;
    float v;
    if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
    else if (exp == 31) v = man ? NAN : INFINITY;
    else v = std::ldexp(static_cast<float>(man | 1024), static_cast<int>(exp) - 25);
    return sign ? -v : v;
}

std::vector<float> f32_values(const GgufTensorInfo& t) {
    std::vector<float> v(t.n_elements);
    std::memcpy(v.data(), t.data, t.n_bytes);
    return v;
}

} // namespace

TEST(Gguf, OpensEveryModelAndVocabulary) {
    struct Expect { const char* file; bool model; size_t n_kv, n_tensors; };
    const Expect expect[] = {
        {"aidreams260K.gguf", true, 19, 39}, {"pycode-4m.gguf", true, 24, 57},
        {"pycode-600k.gguf", true, 24, 20},  {"pycode-4m-f16.gguf", true, 25, 57},
        {"pycode-4m-q8_0.gguf", true, 25, 57}, {"ggml-vocab-gpt-2.gguf", false, 16, 0},
        {"ggml-vocab-llama-spm.gguf", false, 22, 0}, {"ggml-vocab-phi-3.gguf", false, 26, 0},
        {"ggml-vocab-starcoder.gguf", false, 19, 0},
    };
    for (const Expect& e : expect) {
        std::string path = e.model ? model_path(e.file) : vocab_path(e.file);
        SCOPED_TRACE(path);
        GgufFile g = GgufFile::open(path);
        EXPECT_EQ(g.path(), path);
        EXPECT_EQ(g.version(), 3u);
        EXPECT_EQ(g.alignment(), 32u);
        EXPECT_EQ(g.file_size(), std::filesystem::file_size(path));
        EXPECT_EQ(g.metadata().size(), e.n_kv);
        EXPECT_EQ(g.tensors().size(), e.n_tensors);
        ASSERT_TRUE(g.get_string("general.architecture"));
        ASSERT_TRUE(g.find("tokenizer.ggml.tokens"));
        EXPECT_EQ(g.find("tokenizer.ggml.tokens")->type, GgufValueType::Array);
        for (const GgufKeyValue& kv : g.metadata()) EXPECT_EQ(g.find(kv.key), &kv);
    }
    // The bundled model is a copy of the shared Q8_0 file.
    GgufFile a = GgufFile::open(std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf");
    EXPECT_EQ(a.tensors().size(), 57u);
}

TEST(Gguf, TypedGetters) {
    GgufFile g = GgufFile::open(model_path("pycode-4m.gguf"));
    EXPECT_EQ(g.get_string("general.architecture"), "llama");
    EXPECT_EQ(g.get_string("general.name"), "pycode-4m");
    EXPECT_EQ(g.get_uint("llama.block_count"), 6u);
    EXPECT_EQ(g.get_int("llama.attention.head_count_kv"), 2);
    EXPECT_EQ(g.get_float("llama.embedding_length"), 192.0); // integers convert to float
    EXPECT_NEAR(*g.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-10);
    EXPECT_EQ(g.get_float("llama.rope.freq_base"), 10000.0);
    EXPECT_EQ(g.get_bool("tokenizer.ggml.add_bos_token"), true);
    EXPECT_EQ(g.get_bool("tokenizer.ggml.add_space_prefix"), false);

    // Absent keys are nullopt, for every getter.
    EXPECT_FALSE(g.get_string("no.such.key"));
    EXPECT_FALSE(g.get_uint("no.such.key"));
    EXPECT_FALSE(g.get_int("no.such.key"));
    EXPECT_FALSE(g.get_float("no.such.key"));
    EXPECT_FALSE(g.get_bool("no.such.key"));
    EXPECT_FALSE(g.get_string_array("no.such.key"));
    EXPECT_FALSE(g.find("no.such.key"));

    auto tokens = g.get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens);
    ASSERT_EQ(tokens->size(), 4096u);
    EXPECT_EQ((*tokens)[0], "<unk>");
    EXPECT_EQ((*tokens)[1], "<s>");
    EXPECT_EQ((*tokens)[3], "<0x00>");
    auto scores = g.get_float_array("tokenizer.ggml.scores");
    ASSERT_TRUE(scores);
    EXPECT_EQ(scores->size(), 4096u);
    auto types = g.get_int_array("tokenizer.ggml.token_type");
    ASSERT_TRUE(types);
    ASSERT_EQ(types->size(), 4096u);
    EXPECT_EQ((*types)[0], 2); // unknown
    EXPECT_EQ((*types)[1], 3); // control
    EXPECT_EQ((*types)[3], 6); // byte

    // Wrong types throw, naming file and key.
    std::string m = error_of([&] { (void)g.get_uint("general.name"); });
    EXPECT_NE(m.find(model_path("pycode-4m.gguf")), std::string::npos) << m;
    EXPECT_NE(m.find("general.name"), std::string::npos) << m;
    EXPECT_NE(m.find("string"), std::string::npos) << m;
    EXPECT_THROW((void)g.get_string("llama.block_count"), Error);
    EXPECT_THROW((void)g.get_bool("llama.block_count"), Error);
    EXPECT_THROW((void)g.get_float("general.name"), Error);
    EXPECT_THROW((void)g.get_int("tokenizer.ggml.tokens"), Error);
    EXPECT_THROW((void)g.get_string_array("tokenizer.ggml.scores"), Error);
    EXPECT_THROW((void)g.get_float_array("tokenizer.ggml.tokens"), Error);
    EXPECT_THROW((void)g.get_int_array("tokenizer.ggml.scores"), Error);
    EXPECT_THROW((void)g.get_string_array("general.name"), Error);

    // aidreams stores "no separator" as uint32 0xFFFFFFFF: it fits int64 and uint64 alike.
    GgufFile a = GgufFile::open(model_path("aidreams260K.gguf"));
    EXPECT_EQ(a.get_uint("tokenizer.ggml.seperator_token_id"), 0xFFFFFFFFu);
    EXPECT_EQ(a.get_int("tokenizer.ggml.seperator_token_id"), 0xFFFFFFFFll);
    EXPECT_FALSE(a.find("general.alignment"));
    EXPECT_EQ(a.alignment(), 32u); // the default
}

TEST(Gguf, VocabularyFiles) {
    GgufFile g = GgufFile::open(vocab_path("ggml-vocab-gpt-2.gguf"));
    EXPECT_TRUE(g.tensors().empty());
    EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "gpt2");
    auto merges = g.get_string_array("tokenizer.ggml.merges");
    ASSERT_TRUE(merges);
    EXPECT_EQ(merges->size(), 50000u);
    EXPECT_EQ(g.get_string_array("tokenizer.ggml.tokens")->size(), 50257u);
    EXPECT_EQ(g.get_uint("tokenizer.ggml.bos_token_id"), 50256u);
    EXPECT_FALSE(g.find_tensor("token_embd.weight"));

    GgufFile p = GgufFile::open(vocab_path("ggml-vocab-phi-3.gguf"));
    auto scores = p.get_float_array("tokenizer.ggml.scores");
    ASSERT_TRUE(scores);
    EXPECT_EQ(scores->size(), 32064u);
    EXPECT_EQ((*scores)[0], -1000.0f);
    auto tmpl = p.get_string("tokenizer.chat_template");
    ASSERT_TRUE(tmpl);
    EXPECT_EQ(tmpl->rfind("{{ bos_token }}", 0), 0u);
}

TEST(Gguf, TensorViews) {
    for (const char* name : kModels) {
        SCOPED_TRACE(name);
        GgufFile g = GgufFile::open(model_path(name));
        uint64_t data_total = 0;
        for (const GgufTensorInfo& t : g.tensors()) {
            SCOPED_TRACE(t.name);
            ASSERT_NE(t.data, nullptr);
            EXPECT_EQ(g.find_tensor(t.name), &t);
            // The mapping is page aligned, so the pointer shows the file alignment.
            EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % g.alignment(), 0u);
            EXPECT_EQ(t.offset % g.alignment(), 0u);
            uint64_t n = 1;
            for (uint64_t d : t.dims) n *= d;
            EXPECT_EQ(t.n_elements, n);
            uint64_t be = 0, bb = 0;
            ASSERT_TRUE(tensor_type_block(t.type, be, bb));
            EXPECT_EQ(t.n_bytes, n / be * bb);
            data_total += t.n_bytes;
            if (t.name.find("norm") != std::string::npos) {
                // Norm weights: 1-D F32, finite, and RMSNorm gains are far from zero on average.
                EXPECT_EQ(t.type, TensorType::F32);
                EXPECT_EQ(t.dims.size(), 1u);
                double sum = 0;
                for (float v : f32_values(t)) {
                    ASSERT_TRUE(std::isfinite(v));
                    sum += v;
                }
                EXPECT_GT(sum / static_cast<double>(t.n_elements), 0.05);
            }
        }
        // Every byte after the aligned header belongs to some tensor in these files.
        EXPECT_LE(data_total, g.file_size());
        EXPECT_GT(data_total, g.file_size() - 100000);
    }
}

TEST(Gguf, TensorValuesAgreeAcrossConversions) {
    GgufFile f32 = GgufFile::open(model_path("pycode-4m.gguf"));
    GgufFile f16 = GgufFile::open(model_path("pycode-4m-f16.gguf"));
    GgufFile q8 = GgufFile::open(model_path("pycode-4m-q8_0.gguf"));
    for (const char* name : {"token_embd.weight", "blk.3.ffn_down.weight", "output.weight"}) {
        SCOPED_TRACE(name);
        const GgufTensorInfo* a = f32.find_tensor(name);
        const GgufTensorInfo* b = f16.find_tensor(name);
        const GgufTensorInfo* c = q8.find_tensor(name);
        ASSERT_TRUE(a && b && c);
        EXPECT_EQ(a->type, TensorType::F32);
        EXPECT_EQ(b->type, TensorType::F16);
        EXPECT_EQ(c->type, TensorType::Q8_0);
        EXPECT_EQ(a->dims, b->dims);
        EXPECT_EQ(a->dims, c->dims);
        std::vector<float> ref = f32_values(*a);
        const auto* h = reinterpret_cast<const uint8_t*>(b->data);
        const auto* q = reinterpret_cast<const uint8_t*>(c->data);
        double max_f16 = 0, max_q8 = 0;
        for (uint64_t i = 0; i < a->n_elements; ++i) {
            uint16_t hv;
            std::memcpy(&hv, h + 2 * i, 2);
            max_f16 = std::max(max_f16, std::fabs(static_cast<double>(fp16(hv)) - ref[i]));
            const uint8_t* blk = q + (i / 32) * 34;
            uint16_t d;
            std::memcpy(&d, blk, 2);
            float qv = fp16(d) * static_cast<float>(static_cast<int8_t>(blk[2 + i % 32]));
            max_q8 = std::max(max_q8, std::fabs(static_cast<double>(qv) - ref[i]));
        }
        EXPECT_LT(max_f16, 2e-3);
        EXPECT_LT(max_q8, 5e-2);
    }
}

TEST(Gguf, AidreamsFirstValues) {
    GgufFile g = GgufFile::open(model_path("aidreams260K.gguf"));
    const GgufTensorInfo* t = g.find_tensor("token_embd.weight");
    ASSERT_TRUE(t);
    EXPECT_EQ(t->dims, (std::vector<uint64_t>{64, 512}));
    std::vector<float> v = f32_values(*t);
    EXPECT_FLOAT_EQ(v[0], 0.10804883f);
    EXPECT_FLOAT_EQ(v[1], 0.15735304f);
    EXPECT_FLOAT_EQ(v[2], -0.09472689f);
    // Without general.alignment the data section starts at the next multiple of 32.
    const GgufTensorInfo* last = &g.tensors().back();
    EXPECT_EQ(reinterpret_cast<const uint8_t*>(last->data) + last->n_bytes,
              reinterpret_cast<const uint8_t*>(t->data) - t->offset + (g.file_size() - 13664));
}

TEST(Gguf, TypeTable) {
    struct Row { TensorType t; const char* name; uint64_t be, bb; };
    const Row rows[] = {
        {TensorType::F32, "F32", 1, 4},      {TensorType::F16, "F16", 1, 2},
        {TensorType::BF16, "BF16", 1, 2},    {TensorType::Q4_0, "Q4_0", 32, 18},
        {TensorType::Q4_1, "Q4_1", 32, 20},  {TensorType::Q5_0, "Q5_0", 32, 22},
        {TensorType::Q5_1, "Q5_1", 32, 24},  {TensorType::Q8_0, "Q8_0", 32, 34},
        {TensorType::Q8_1, "Q8_1", 32, 36},  {TensorType::Q2_K, "Q2_K", 256, 84},
        {TensorType::Q3_K, "Q3_K", 256, 110}, {TensorType::Q4_K, "Q4_K", 256, 144},
        {TensorType::Q5_K, "Q5_K", 256, 176}, {TensorType::Q6_K, "Q6_K", 256, 210},
        {TensorType::Q8_K, "Q8_K", 256, 292}, {TensorType::I8, "I8", 1, 1},
        {TensorType::I16, "I16", 1, 2},      {TensorType::I32, "I32", 1, 4},
        {TensorType::I64, "I64", 1, 8},      {TensorType::F64, "F64", 1, 8},
    };
    for (const Row& r : rows) {
        uint64_t be = 0, bb = 0;
        EXPECT_TRUE(tensor_type_block(r.t, be, bb)) << r.name;
        EXPECT_EQ(be, r.be) << r.name;
        EXPECT_EQ(bb, r.bb) << r.name;
        EXPECT_EQ(tensor_type_name(r.t), r.name);
    }
    uint64_t be = 7, bb = 7;
    for (uint32_t id : {4u, 5u, 16u, 29u, 31u, 99u, 0xFFFFFFFFu}) {
        EXPECT_FALSE(tensor_type_block(static_cast<TensorType>(id), be, bb)) << id;
        EXPECT_EQ(tensor_type_name(static_cast<TensorType>(id)), "type#" + std::to_string(id));
    }
}

// A synthetic file holding every value type, nested arrays and a tensor of every type.
TEST(Gguf, SyntheticEveryTypeV2AndV3) {
    TempDir dir;
    for (uint32_t version : {2u, 3u}) {
        for (uint64_t alignment : {1ull, 8ull, 32ull, 64ull, 4096ull}) {
            SCOPED_TRACE("v" + std::to_string(version) + " alignment " + std::to_string(alignment));
            Builder b;
            b.version = version;
            b.alignment = alignment;
            if (alignment != 32) b.set("general.alignment", U32, raw<uint32_t>(static_cast<uint32_t>(alignment)));
            b.set("u8", U8, raw<uint8_t>(200)).set("i8", I8, raw<int8_t>(-100));
            b.set("u16", U16, raw<uint16_t>(60000)).set("i16", I16, raw<int16_t>(-30000));
            b.set("u32", U32, raw<uint32_t>(4000000000u)).set("i32", I32, raw<int32_t>(-2000000000));
            b.set("f32", F32, raw<float>(1.5f)).set("bool", BOOL, raw<uint8_t>(1));
            b.set("str", STR, raw_str("h\xc3\xa9llo\n\"x\""));
            b.set("u64", U64, raw<uint64_t>(18000000000000000000ull));
            b.set("i64", I64, raw<int64_t>(-9000000000000000000ll));
            b.set("f64", F64, raw<double>(-2.25));
            b.set("empty_str", STR, raw_str(""));
            {
                Enc e;
                e.u32(I32).u64(3).put<int32_t>(-1).put<int32_t>(0).put<int32_t>(7);
                b.set("arr_i32", ARR, e.b);
            }
            {
                Enc e;
                e.u32(STR).u64(2).str("a").str("bc");
                b.set("arr_str", ARR, e.b);
            }
            {
                Enc e; // [[1, 2], [], [3]] as uint16 arrays inside an array of arrays
                e.u32(ARR).u64(3);
                e.u32(U16).u64(2).put<uint16_t>(1).put<uint16_t>(2);
                e.u32(U16).u64(0);
                e.u32(U16).u64(1).put<uint16_t>(3);
                b.set("nested", ARR, e.b);
            }
            {
                Enc e;
                e.u32(F64).u64(2).put<double>(0.5).put<double>(-1.0);
                b.set("arr_f64", ARR, e.b);
            }
            {
                Enc e;
                e.u32(U64).u64(1).u64(~0ull);
                b.set("arr_u64_big", ARR, e.b);
            }
            {
                Enc e;
                e.u32(BOOL).u64(0);
                b.set("arr_empty", ARR, e.b);
            }
            // One tensor per type, rows sized to one block plus some rows.
            const TensorType all[] = {TensorType::F32, TensorType::F16, TensorType::Q4_0, TensorType::Q4_1,
                                      TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0, TensorType::Q8_1,
                                      TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                                      TensorType::Q6_K, TensorType::Q8_K, TensorType::I8, TensorType::I16,
                                      TensorType::I32, TensorType::I64, TensorType::F64, TensorType::BF16};
            for (TensorType t : all) {
                uint64_t be = 0, bb = 0;
                ASSERT_TRUE(tensor_type_block(t, be, bb));
                RawTensor rt;
                rt.name = "t_" + tensor_type_name(t);
                rt.type = static_cast<uint32_t>(t);
                rt.dims = {be * 2, 3};
                rt.data.assign(bb * 6, '\0');
                for (size_t i = 0; i < rt.data.size(); ++i) rt.data[i] = static_cast<char>(i * 7 + 1);
                b.tensors.push_back(rt);
            }
            b.tensors.push_back({"t_4d", {2, 3, 4, 5}, 0, std::string(2 * 3 * 4 * 5 * 4, '\x01')});
            std::string path = dir.file("synthetic.gguf");
            b.write(path);

            GgufFile g = GgufFile::open(path);
            EXPECT_EQ(g.version(), version);
            EXPECT_EQ(g.alignment(), alignment);
            EXPECT_EQ(g.get_uint("u8"), 200u);
            EXPECT_EQ(g.get_int("i8"), -100);
            EXPECT_EQ(g.get_uint("u16"), 60000u);
            EXPECT_EQ(g.get_int("i16"), -30000);
            EXPECT_EQ(g.get_uint("u32"), 4000000000u);
            EXPECT_EQ(g.get_int("i32"), -2000000000);
            EXPECT_EQ(g.get_float("f32"), 1.5);
            EXPECT_EQ(g.get_bool("bool"), true);
            EXPECT_EQ(g.get_string("str"), "h\xc3\xa9llo\n\"x\"");
            EXPECT_EQ(g.get_uint("u64"), 18000000000000000000ull);
            EXPECT_THROW((void)g.get_int("u64"), Error); // does not fit int64
            EXPECT_EQ(g.get_int("i64"), -9000000000000000000ll);
            EXPECT_THROW((void)g.get_uint("i64"), Error); // negative
            EXPECT_THROW((void)g.get_uint("i8"), Error);
            EXPECT_EQ(g.get_float("f64"), -2.25);
            EXPECT_EQ(g.get_float("i32"), -2000000000.0);
            EXPECT_EQ(g.get_string("empty_str"), "");
            EXPECT_EQ(g.get_int_array("arr_i32"), (std::vector<int64_t>{-1, 0, 7}));
            EXPECT_EQ(g.get_string_array("arr_str"), (std::vector<std::string>{"a", "bc"}));
            EXPECT_EQ(g.get_float_array("arr_f64"), (std::vector<float>{0.5f, -1.0f}));
            EXPECT_THROW((void)g.get_int_array("arr_u64_big"), Error);
            EXPECT_THROW((void)g.get_int_array("nested"), Error);
            const GgufKeyValue* kv = g.find("arr_empty");
            ASSERT_TRUE(kv);
            EXPECT_EQ(std::get<std::shared_ptr<GgufArray>>(kv->value)->type, GgufValueType::Bool);
            EXPECT_TRUE(std::get<std::shared_ptr<GgufArray>>(kv->value)->values.empty());

            // Every value type maps to its variant alternative.
            const std::pair<const char*, GgufValueType> kinds[] = {
                {"u8", GgufValueType::UInt8},     {"i8", GgufValueType::Int8},     {"u16", GgufValueType::UInt16},
                {"i16", GgufValueType::Int16},    {"u32", GgufValueType::UInt32},  {"i32", GgufValueType::Int32},
                {"f32", GgufValueType::Float32},  {"bool", GgufValueType::Bool},   {"str", GgufValueType::String},
                {"nested", GgufValueType::Array}, {"u64", GgufValueType::UInt64},  {"i64", GgufValueType::Int64},
                {"f64", GgufValueType::Float64}};
            for (auto [key, type] : kinds) {
                const GgufKeyValue* k = g.find(key);
                ASSERT_TRUE(k) << key;
                EXPECT_EQ(k->type, type) << key;
                EXPECT_EQ(k->value.index(), static_cast<size_t>(type)) << key;
            }

            const GgufKeyValue* nested = g.find("nested");
            const auto& outer = std::get<std::shared_ptr<GgufArray>>(nested->value);
            ASSERT_EQ(outer->type, GgufValueType::Array);
            ASSERT_EQ(outer->values.size(), 3u);
            const auto& first = std::get<std::shared_ptr<GgufArray>>(outer->values[0]);
            EXPECT_EQ(first->type, GgufValueType::UInt16);
            ASSERT_EQ(first->values.size(), 2u);
            EXPECT_EQ(std::get<uint16_t>(first->values[1]), 2);
            EXPECT_EQ(gguf_value_to_string(nested->value), "[[1, 2], [], [3]]");

            ASSERT_EQ(g.tensors().size(), 21u);
            for (const GgufTensorInfo& t : g.tensors()) {
                SCOPED_TRACE(t.name);
                const RawTensor* rt = b.tensor(t.name);
                ASSERT_TRUE(rt);
                EXPECT_EQ(t.dims, rt->dims);
                EXPECT_EQ(t.n_bytes, rt->data.size());
                EXPECT_EQ(t.offset % alignment, 0u);
                EXPECT_EQ(std::memcmp(t.data, rt->data.data(), t.n_bytes), 0);
            }
            EXPECT_EQ(g.find_tensor("t_4d")->n_elements, 120u);
        }
    }
}

TEST(Gguf, ValueToString) {
    EXPECT_EQ(gguf_value_to_string(GgufValue(uint8_t{65})), "65");
    EXPECT_EQ(gguf_value_to_string(GgufValue(int8_t{-3})), "-3");
    EXPECT_EQ(gguf_value_to_string(GgufValue(true)), "true");
    EXPECT_EQ(gguf_value_to_string(GgufValue(1e-5f)), "1e-05");
    EXPECT_EQ(gguf_value_to_string(GgufValue(0.25)), "0.25");
    EXPECT_EQ(gguf_value_to_string(GgufValue(std::string("a\"b\n\x01"))), "\"a\\\"b\\n\\x01\"");
    auto arr = std::make_shared<GgufArray>();
    arr->type = GgufValueType::Int32;
    for (int i = 0; i < 20; ++i) arr->values.push_back(int32_t{i});
    EXPECT_EQ(gguf_value_to_string(GgufValue(arr), 3), "[0, 1, 2, ... (20 total)]");
    EXPECT_EQ(gguf_value_to_string(GgufValue(arr), 0), "[... (20 total)]");
    EXPECT_STREQ(gguf_value_type_name(GgufValueType::Float64), "float64");
    EXPECT_STREQ(gguf_value_type_name(GgufValueType::String), "string");
}

TEST(Gguf, MoveKeepsViewsValid) {
    GgufFile a = GgufFile::open(model_path("pycode-600k.gguf"));
    const void* data = a.find_tensor("output_norm.weight")->data;
    GgufFile b = std::move(a);
    EXPECT_EQ(b.find_tensor("output_norm.weight")->data, data);
    GgufFile c = GgufFile::open(model_path("aidreams260K.gguf"));
    c = std::move(b);
    EXPECT_EQ(c.find_tensor("output_norm.weight")->data, data);
    EXPECT_TRUE(std::isfinite(*static_cast<const float*>(data)));
}
