// Test-only helpers shared by the tests that run the shared models: loading a model once per test
// binary, random token ids, and bit-for-bit comparison of logits (memcmp, never a tolerance).
#pragma once
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "rewind/dummy_model.h"
#include "rewind/model.h"

namespace rwd::model_test {

// The file of a test name "dummy-SHAPE-TYPE" (e.g. dummy-qwen3-moe-tiny-q4_k_m): `rewind
// make-dummy`'s file of that shape and type, seed 1, with the bundled model's vocabulary (so
// pycode-600k drafts for it), written once into the build tree (atomically: test binaries that
// run at once may both write it).
inline std::string dummy_path(const std::string& name) {
    const size_t cut = name.rfind('-');
    const std::string dir = std::string(REWIND_BINARY_DIR) + "/test-models";
    const std::string path = dir + "/" + name + ".gguf";
    if (!std::filesystem::exists(path)) {
        std::filesystem::create_directories(dir);
        DummyOptions o;
        o.shape = name.substr(6, cut - 6);
        o.file_type = name.substr(cut + 1);
        o.vocab_path = std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf";
        o.seed = 1;
        o.threads = 2;
        o.out_path = path;
        write_dummy_model(o);
    }
    return path;
}

// "bundled" is the model in assets/; "dummy-..." a make-dummy file (dummy_path); any other name
// is ../shared/models/NAME.gguf.
inline std::shared_ptr<const Model> load(const std::string& name) {
    static std::map<std::string, std::shared_ptr<const Model>> cache; // test-binary-local reuse
    auto& m = cache[name];
    if (!m) m = Model::load(name == "bundled"             ? std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf"
                            : name.rfind("dummy-", 0) == 0 ? dummy_path(name)
                                                           : std::string(REWIND_SHARED_DIR) + "/models/" + name + ".gguf");
    return m;
}

inline std::vector<TokenId> random_tokens(std::mt19937& rng, int64_t n, int64_t n_vocab) {
    std::uniform_int_distribution<TokenId> d(0, static_cast<TokenId>(n_vocab - 1));
    std::vector<TokenId> t(static_cast<size_t>(n));
    for (auto& x : t) x = d(rng);
    return t;
}

// The files the bit-exactness suites run: F32 (pycode-4m) and Q8_0 (the bundled file) take
// different matmul paths; llama.cpp's quantizations of pycode-4m mix Q4_0, Q5_0, Q5_1, Q8_0 with
// Q4_K/Q5_K/Q6_K (its 192-wide rows force the fallbacks); the kq-256 files are almost all
// K-quants; the arch-* files run each architecture's own steps; the dummy-* files are the
// mixture-of-experts architectures (qwen3moe; Mixtral-style llama) in the types their products take.
inline constexpr const char* kExactnessModels[] = {
    "pycode-4m",      "bundled",       "pycode-4m-q4_0", "pycode-4m-q4_k_m", "pycode-4m-q5_k_m",
    "pycode-4m-q6_k", "kq-256-q4_k_m", "kq-256-q5_k_m",  "kq-256-q6_k",      "arch-llama3",
    "arch-qwen2",     "arch-qwen3",    "arch-phi3",      "arch-gemma3",
    "dummy-qwen3-moe-tiny-q4_k_m", "dummy-qwen3-moe-tiny-q8_0", "dummy-mixtral-tiny-f32", "dummy-mixtral-tiny-q6_k"};

// The mixture-of-experts files the suites run (make-dummy's, see dummy_path), one per weight type
// family: K-quants, Q8_0, Q4_0, F32, F16 and BF16.
inline constexpr const char* kMoeModels[] = {
    "dummy-qwen3-moe-tiny-q4_k_m", "dummy-qwen3-moe-tiny-q8_0", "dummy-qwen3-moe-tiny-q4_0", "dummy-qwen3-moe-tiny-f16",
    "dummy-mixtral-tiny-f32",      "dummy-mixtral-tiny-q5_k_m", "dummy-mixtral-tiny-q6_k",   "dummy-mixtral-tiny-bf16"};

// Parameter names for suites over model names: "f32" for pycode-4m, "q8_0" for the bundled file,
// else the name with '-' as '_' (gtest's names allow no '-').
template <class ParamInfo>
std::string model_param_name(const ParamInfo& info) {
    std::string n = info.param;
    if (n == "pycode-4m") return "f32";
    if (n == "bundled") return "q8_0";
    for (char& c : n)
        if (c == '-') c = '_';
    return n;
}

inline bool same_bits(std::span<const float> a, std::span<const float> b) {
    // memcmp of empty spans would pass it null pointers (undefined behaviour; UBSan reports it)
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

} // namespace rwd::model_test
