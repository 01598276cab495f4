// `rewind make-dummy`'s engine: GGUF files of real model shapes (Llama 3.2 1B/3B, Llama 3.1 8B,
// Qwen2.5 0.5B/7B, Qwen3-30B-A3B, small mixture-of-experts shapes) with seeded random weights,
// quantized per tensor as llama-quantize chooses, the tokenizer copied from another GGUF file.
// Written as a stream, row block by row block.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/gguf.h"

namespace rwd {

// A model's shape. Dense shapes are written as the `llama` architecture unless told otherwise:
// the qwen shapes have Qwen2.5's sizes, rope base and norm epsilon but no Q/K/V biases. Shapes
// with experts name their own architecture (qwen3moe; llama for Mixtral-style files).
struct DummyShape {
    std::string name;
    int64_t n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, n_ff = 0;
    int64_t n_ctx = 0;         // llama.context_length
    float rope_base = 10000.0f;
    float rms_eps = 1e-5f;
    bool tied_output = false;  // no output.weight: the head is the token embedding
    std::string model_name;    // what the shape copies, for general.name
    std::string arch;          // the architecture written by default ("": llama)
    int64_t head_dim = 0;      // 0: n_embd / n_head
    int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0; // experts (0: a dense FFN)

    int64_t head_size() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
};

// llama-1b, llama-3b, llama-8b, qwen-0.5b, qwen-7b, `tiny` (dim 256, 2 layers) for tests; with
// experts: qwen3-30b-a3b (Qwen3-30B-A3B: 48 layers, 128 experts of 768, 8 used), and for tests
// qwen3-moe-tiny (qwen3moe, 16 experts of 256, 4 used) and mixtral-tiny (llama, 8 experts, 2 used).
const std::vector<DummyShape>& dummy_shapes();
// Throws rwd::Error listing the known names.
const DummyShape& find_dummy_shape(std::string_view name);

// File types as llama-quantize names them; `value` is llama.cpp's general.file_type.
enum class DummyFileType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 7, Q4_K_M = 15, Q5_K_M = 17, Q6_K = 18, BF16 = 32 };
// "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k" (case-insensitive); throws listing them.
DummyFileType parse_dummy_file_type(std::string_view name);
const char* dummy_file_type_name(DummyFileType t);

// The type llama.cpp gives tensor `name` (a matrix of rows x cols, `layer` its block index or -1)
// in a file of type `ft`: the convert script's choice for f32/f16/bf16 (1-D tensors stay F32), and
// llama-quantize's for the others (the output head, or the token embedding when the head is tied,
// to Q6_K; attn_v and ffn_down of some layers to Q6_K in Q4_K_M and Q5_K_M; K-quants on rows that are not a
// multiple of 256 fall back to Q5_0 / Q5_1 / Q8_0). With experts: the router (ffn_gate_inp) stays
// F32, ffn_down_exps follows ffn_down, and 8-expert models get Q8_0 attn_k and attn_v.
TensorType dummy_tensor_type(DummyFileType ft, const std::string& name, int64_t cols, int64_t layer,
                             int64_t n_layer, bool tied_output, int64_t n_expert = 0);

// Whether make-dummy can write `t`: the types rwd::quantize_row writes (F32, F16, BF16, Q8_0,
// Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K).
bool dummy_can_write(TensorType t);

struct DummyOptions {
    std::string shape;          // a dummy_shapes() name
    std::string arch;           // the architecture written: any of arch.h's (its tensors and keys); "": the shape's
    std::string file_type;      // a parse_dummy_file_type() name
    std::string vocab_path;     // a GGUF file with a tokenizer (tokenizer.* keys are copied)
    uint64_t seed = 0;
    int threads = 0;            // 0: the hardware's
    // 0: every row generated. N > 0: each tensor's row r is its row r mod N, so only N rows per
    // tensor are generated and quantized (a 30B file in minutes, not hours); the rows keep their
    // distribution, they repeat. For benchmark files, whose speed does not depend on the values.
    int64_t row_pool = 0;
    std::string out_path;
    // Non-empty: written as tokenizer.chat_template (replacing the vocabulary file's), so a small
    // model can carry a real chat template in tests.
    std::string chat_template;
};

struct DummyReport {
    uint64_t file_bytes = 0;
    int64_t n_params = 0;
    int64_t n_vocab = 0;
    std::map<TensorType, int> tensor_types; // how many tensors of each type
};

// Writes the file (a temporary one renamed into place when complete). Weights: tensor i, row r
// drawn from its own generator seeded by (seed, i, r), uniform with std 1/sqrt(cols) (norm
// weights 1 +- 0.1), so the file is the same for a seed whatever the thread count. Throws
// rwd::Error on a bad option, a vocabulary file without a tokenizer, a type this build cannot
// write, or a write failure (nothing is left under out_path then). `progress(done, total)` is
// called after each block of rows with bytes written so far.
DummyReport write_dummy_model(const DummyOptions& opts,
                              const std::function<void(uint64_t, uint64_t)>& progress = {});

} // namespace rwd
