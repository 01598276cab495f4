// Test-only helpers shared by the tests that run the shared models: loading a model once per test
// binary, random token ids, and bit-for-bit comparison of logits (memcmp, never a tolerance).
#pragma once
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "rewind/model.h"

namespace rwd::model_test {

// "bundled" is the model in assets/; any other name is ../shared/models/NAME.gguf.
inline std::shared_ptr<const Model> load(const std::string& name) {
    static std::map<std::string, std::shared_ptr<const Model>> cache; // test-binary-local reuse
    auto& m = cache[name];
    if (!m) m = Model::load(name == "bundled" ? std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf"
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
// K-quants; the arch-* files run each architecture's own steps.
inline constexpr const char* kExactnessModels[] = {
    "pycode-4m",      "bundled",       "pycode-4m-q4_0", "pycode-4m-q4_k_m", "pycode-4m-q5_k_m",
    "pycode-4m-q6_k", "kq-256-q4_k_m", "kq-256-q5_k_m",  "kq-256-q6_k",      "arch-llama3",
    "arch-qwen2",     "arch-qwen3",    "arch-phi3",      "arch-gemma3"};

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
