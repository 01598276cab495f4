// Builds the fuzz seed corpora from ../shared at build time (none are committed): small valid
// GGUF models re-using aidreams260K's vocabulary, the first bytes of every shared GGUF file,
// saved KV caches of pycode-600k, workload lines, reference documents, tokenizer test strings, and
// JSON Schemas and regexes for the grammar front ends.
// Usage: fuzz_seeds SHARED_DIR OUT_DIR (writes OUT_DIR/<target>/...).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rewind/context.h"
#include "rewind/gguf.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"

namespace fs = std::filesystem;
using namespace rwd;

namespace {

std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}
void put(const fs::path& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) throw std::runtime_error("cannot write " + p.string());
}

// Minimal little-endian GGUF v3 encoder.
struct Enc {
    std::string b;
    template <class T> Enc& raw(T v) {
        b.append(reinterpret_cast<const char*>(&v), sizeof v);
        return *this;
    }
    Enc& str(const std::string& s) {
        raw<uint64_t>(s.size());
        b += s;
        return *this;
    }
    void value(GgufValueType t, const GgufValue& v) {
        switch (t) {
        case GgufValueType::Array: {
            const auto& a = *std::get<std::shared_ptr<GgufArray>>(v);
            raw(static_cast<uint32_t>(a.type));
            raw<uint64_t>(a.values.size());
            for (const auto& e : a.values) value(a.type, e);
            break;
        }
        case GgufValueType::String: str(std::get<std::string>(v)); break;
        case GgufValueType::Bool: raw<uint8_t>(std::get<bool>(v) ? 1 : 0); break;
        default: std::visit([&](const auto& x) {
                     if constexpr (std::is_arithmetic_v<std::decay_t<decltype(x)>>) raw(x);
                 }, v);
        }
    }
};

struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    TensorType type;
    std::string data;
};

// Deterministic small weights in `type` (F32, F16 or Q8_0) for a tensor of n elements.
std::string weights(TensorType type, uint64_t n, uint32_t seed) {
    std::vector<float> f(n);
    for (uint64_t i = 0; i < n; ++i) {
        seed = seed * 1664525u + 1013904223u;
        f[i] = (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f) * 0.2f;
    }
    std::string out;
    if (type == TensorType::F32) {
        out.assign(reinterpret_cast<const char*>(f.data()), n * 4);
    } else if (type == TensorType::F16) {
        for (float x : f) {
            const uint16_t h = fp32_to_fp16(x);
            out.append(reinterpret_cast<const char*>(&h), 2);
        }
    } else { // Q8_0: blocks of 32 values, an fp16 scale then 32 int8
        for (uint64_t b = 0; b < n; b += 32) {
            const uint16_t d = fp32_to_fp16(0.1f / 127.0f);
            out.append(reinterpret_cast<const char*>(&d), 2);
            for (int i = 0; i < 32; ++i) out += static_cast<char>(static_cast<int8_t>(f[b + i] * 1270.0f));
        }
    }
    return out;
}

// A one-layer llama model (dim 32, 2 heads, 1 KV head, FFN 32, context 16) with the vocabulary
// of `vocab_file`, matrices stored as `type`.
std::string tiny_model(const GgufFile& vocab, TensorType type, bool tied) {
    const uint64_t E = 32, Ekv = 16, F = 32, V = static_cast<uint64_t>(vocab.get_string_array("tokenizer.ggml.tokens")->size());
    Enc e;
    e.b = "GGUF";
    std::vector<Tensor> ts;
    uint32_t seed = 1;
    auto mat = [&](const std::string& name, uint64_t cols, uint64_t rows) {
        ts.push_back({name, {cols, rows}, type, weights(type, cols * rows, seed++)});
    };
    auto norm = [&](const std::string& name) {
        std::vector<float> one(E, 1.0f);
        ts.push_back({name, {E}, TensorType::F32, std::string(reinterpret_cast<const char*>(one.data()), E * 4)});
    };
    mat("token_embd.weight", E, V);
    norm("output_norm.weight");
    if (!tied) mat("output.weight", E, V);
    norm("blk.0.attn_norm.weight");
    mat("blk.0.attn_q.weight", E, E);
    mat("blk.0.attn_k.weight", E, Ekv);
    mat("blk.0.attn_v.weight", E, Ekv);
    mat("blk.0.attn_output.weight", E, E);
    norm("blk.0.ffn_norm.weight");
    mat("blk.0.ffn_gate.weight", E, F);
    mat("blk.0.ffn_down.weight", F, E);
    mat("blk.0.ffn_up.weight", E, F);

    std::vector<const GgufKeyValue*> kept;
    for (const auto& kv : vocab.metadata())
        if (kv.key.rfind("tokenizer.", 0) == 0 || kv.key == "general.name") kept.push_back(&kv);
    const std::pair<const char*, uint32_t> hp[] = {
        {"llama.context_length", 16}, {"llama.embedding_length", E}, {"llama.block_count", 1},
        {"llama.feed_forward_length", F}, {"llama.attention.head_count", 2}, {"llama.attention.head_count_kv", 1},
        {"llama.rope.dimension_count", 16}};
    e.raw<uint32_t>(3).raw<uint64_t>(ts.size()).raw<uint64_t>(kept.size() + std::size(hp) + 2);
    e.str("general.architecture").raw(static_cast<uint32_t>(GgufValueType::String)).str("llama");
    for (const auto* kv : kept) {
        e.str(kv->key).raw(static_cast<uint32_t>(kv->type));
        e.value(kv->type, kv->value);
    }
    for (const auto& [k, v] : hp) e.str(k).raw(static_cast<uint32_t>(GgufValueType::UInt32)).raw(v);
    e.str("llama.attention.layer_norm_rms_epsilon").raw(static_cast<uint32_t>(GgufValueType::Float32)).raw(1e-5f);
    std::string data;
    for (const Tensor& t : ts) {
        while (data.size() % 32) data += '\0';
        e.str(t.name).raw<uint32_t>(static_cast<uint32_t>(t.dims.size()));
        for (uint64_t d : t.dims) e.raw(d);
        e.raw(static_cast<uint32_t>(t.type)).raw<uint64_t>(data.size());
        data += t.data;
    }
    while (e.b.size() % 32) e.b += '\0';
    return e.b + data;
}

void gguf_seeds(const fs::path& shared, const fs::path& out) {
    const GgufFile vocab = GgufFile::open((shared / "models/aidreams260K.gguf").string());
    put(out / "tiny-f32.gguf", tiny_model(vocab, TensorType::F32, false));
    put(out / "tiny-f16-tied.gguf", tiny_model(vocab, TensorType::F16, true));
    put(out / "tiny-q8_0.gguf", tiny_model(vocab, TensorType::Q8_0, false));
    // Headers and the start of the metadata of every shared file (each tokenizer kind's keys).
    for (const char* dir : {"models", "vocab"})
        for (const auto& f : fs::directory_iterator(shared / dir))
            if (f.path().extension() == ".gguf") {
                std::string b = slurp(f.path());
                b.resize(std::min<size_t>(b.size(), 16384));
                put(out / ("head-" + f.path().filename().string()), b);
            }
}

void kv_seeds(const fs::path& shared, const fs::path& out) {
    auto model = Model::load((shared / "models/pycode-600k.gguf").string());
    Context ctx(model);
    const std::vector<TokenId> toks = model->tokenizer().encode("def f(x):\n    return x", AddBos::Yes);
    for (KvType type : {KvType::F32, KvType::F16})
        for (size_t n : {size_t{0}, size_t{1}, size_t{4}}) {
            KvCache c(*model, {.capacity = 16, .type = type});
            if (n > 0) ctx.forward(c, std::span<const TokenId>(toks.data(), n), Logits::None);
            c.save((out / ("pycode-600k-" + std::string(type == KvType::F32 ? "f32-" : "f16-") + std::to_string(n) +
                           ".kv")).string());
        }
}

void text_seeds(const fs::path& shared, const fs::path& wl_out, const fs::path& ref_out, const fs::path& tok_out) {
    for (const char* w : {"edit", "free", "ref"}) {
        std::ifstream in(shared / "workloads" / (std::string(w) + ".jsonl"));
        std::string line, two;
        for (int i = 0; i < 4 && std::getline(in, line); ++i) {
            put(wl_out / (std::string(w) + "-" + std::to_string(i) + ".jsonl"), line + "\n");
            if (i < 2) two += line + "\n";
            const auto j = nlohmann::json::parse(line);
            if (j.contains("references")) {
                std::string doc;
                for (const auto& r : j["references"]) doc += r.get<std::string>().substr(0, 2048) + '\x01';
                put(ref_out / (std::string(w) + "-" + std::to_string(i)), doc + j["prompt"].get<std::string>());
            } else {
                const std::string p = j["prompt"].get<std::string>().substr(0, 2048);
                put(ref_out / (std::string(w) + "-" + std::to_string(i)), p + '\x01' + p.substr(0, p.size() / 2));
            }
        }
        put(wl_out / (std::string(w) + "-first2.jsonl"), two);
    }
    // Tokenizer test strings for each of the 8 fixture tokenizers (entries.cpp: byte 0 picks one).
    int n = 0;
    for (const auto& f : fs::directory_iterator(shared / "vocab")) {
        if (f.path().extension() != ".inp") continue;
        const std::string all = slurp(f.path());
        const std::string sep = "\n__ggml_vocab_test__\n";
        for (size_t pos = 0, i = 0; pos < all.size(); ++i) {
            size_t next = all.find(sep, pos);
            if (next == std::string::npos) next = all.size();
            const std::string s = all.substr(pos, next - pos);
            pos = next + sep.size();
            if (i % 3 != 0) continue; // a third of them is plenty as seeds
            const std::string pick(1, static_cast<char>(n % 8));
            put(tok_out / ("s" + std::to_string(n++)), pick + std::string(1, static_cast<char>(i % 2)) + s);
        }
    }
}

// JSON Schema seeds (byte 0: whitespace mode) from the JSON workload's schemas and a few
// keywords it lacks; regex seeds from their patterns and the formats' shapes.
void grammar_seeds(const fs::path& shared, const fs::path& schema_out, const fs::path& regex_out) {
    std::ifstream in(shared / "workloads" / "json.jsonl");
    std::string line;
    int n = 0;
    while (std::getline(in, line) && n < 6) {
        const auto j = nlohmann::ordered_json::parse(line);
        if (!j.contains("json_schema")) continue;
        put(schema_out / ("workload-" + std::to_string(n)), std::string(1, static_cast<char>(n % 2)) + j["json_schema"].dump());
        ++n;
    }
    const char* schemas[] = {
        R"({"$defs":{"t":{"type":"object","properties":{"k":{"type":"array","items":{"$ref":"#/$defs/t"}}}}},"$ref":"#/$defs/t"})",
        R"({"anyOf":[{"type":"integer","minimum":-5,"exclusiveMaximum":1e3},{"type":"number","maximum":2.5},{"const":null}]})",
        R"({"type":"string","pattern":"^[a-z]+(-[a-z]+)*$","minLength":3,"maxLength":12,"format":"email"})",
        R"({"type":"array","prefixItems":[{"enum":["a",1]},{"type":"boolean"}],"items":false,"minItems":1})",
        R"({"type":"object","additionalProperties":{"type":"string","format":"date-time"},"properties":{"id":{"format":"uuid"}}})",
    };
    for (size_t i = 0; i < std::size(schemas); ++i) put(schema_out / ("s" + std::to_string(i)), std::string(1, '\0') + schemas[i]);
    const char* patterns[] = {"^[A-Za-z_][A-Za-z0-9_.]*$", "(?:ab|c){2,5}x?", "[^\\d\\s]+@\\w+\\.com",
                              "\\u00e9.{0,3}$", "(a|b)*c+[-+]?\\d{1,3}(\\.\\d+)?"};
    for (size_t i = 0; i < std::size(patterns); ++i) put(regex_out / ("p" + std::to_string(i)), patterns[i]);
}

// Request bodies (byte 0: odd for completions) with the tool, structured-output, logprobs,
// penalty and choice fields, so the fuzzer starts inside them (fuzz/serve_request.dict names them).
void serve_seeds(const fs::path& out) {
    const char* chat[] = {
        R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"a":{"type":"integer","minimum":1}},"required":["a"]}}}],"tool_choice":"auto","parallel_tool_calls":false})",
        R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g","parameters":{"enum":[1]}}}],"tool_choice":"required","n":2,"seed":3})",
        R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}},"top_k":5,"min_p":0.1,"repeat_penalty":1.1,"repeat_last_n":16})",
        R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]},{"role":"tool","tool_call_id":"c","content":"2"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"})",
        R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}}}}}})",
        R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"},"logprobs":true,"top_logprobs":3})",
        R"({"messages":[{"role":"user","content":"x"}],"frequency_penalty":0.5,"presence_penalty":-1,"logit_bias":{"12":-100,"7":2.5}})",
    };
    const char* completions[] = {
        R"({"prompt":"x","grammar":"root ::= [a-z]+","logprobs":2})",
        R"({"prompt":[1,2],"json_schema":{"enum":["a","b"]},"frequency_penalty":2})",
        R"({"prompt":"x","n":3,"logprobs":5,"presence_penalty":-2,"logit_bias":{"3":100},"stream":true,"stream_options":{"include_usage":true}})",
    };
    int n = 0;
    for (const char* b : chat) put(out / ("s" + std::to_string(n++)), std::string(1, '\0') + b);
    for (const char* b : completions) put(out / ("s" + std::to_string(n++)), std::string(1, '\1') + b);
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::cerr << "usage: fuzz_seeds SHARED_DIR OUT_DIR\n";
        return 2;
    }
    const fs::path shared = argv[1], out = argv[2];
    try {
        for (const char* t : {"gguf", "kv_state", "workload", "reference", "tokenizer", "serve_request", "gbnf", "json_schema",
                              "regex"}) {
            fs::remove_all(out / t);
            fs::create_directories(out / t);
        }
        gguf_seeds(shared, out / "gguf");
        kv_seeds(shared, out / "kv_state");
        text_seeds(shared, out / "workload", out / "reference", out / "tokenizer");
        for (const auto& f : fs::directory_iterator(shared / "grammars")) // GBNF: llama.cpp's examples
            if (f.path().extension() == ".gbnf") put(out / "gbnf" / f.path().filename(), slurp(f.path()));
        grammar_seeds(shared, out / "json_schema", out / "regex");
        serve_seeds(out / "serve_request");
    } catch (const std::exception& e) {
        std::cerr << "fuzz_seeds: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
