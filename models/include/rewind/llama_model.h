// Llama-family model files: hyperparameters read from `llama.*` metadata and the weight tensors,
// each shape checked against them. Weights stay in the GGUF mapping (zero copy) with their type.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rewind/gguf.h"
#include "rewind/tokenizer.h"

namespace rwd {

struct LlamaHparams {
    std::string architecture;   // general.architecture ("llama")
    std::string name;           // general.name, may be empty
    int64_t n_ctx_train = 0;    // llama.context_length
    int64_t n_embd = 0;         // llama.embedding_length
    int64_t n_layer = 0;        // llama.block_count
    int64_t n_ff = 0;           // llama.feed_forward_length
    int64_t n_head = 0;         // llama.attention.head_count
    int64_t n_head_kv = 0;      // llama.attention.head_count_kv (defaults to n_head)
    int64_t n_rot = 0;          // llama.rope.dimension_count (defaults to n_embd / n_head)
    float rope_freq_base = 10000.0f; // llama.rope.freq_base
    float rms_eps = 1e-5f;      // llama.attention.layer_norm_rms_epsilon
    int64_t n_vocab = 0;        // llama.vocab_size, else the tokenizer's size
    int64_t head_dim() const { return n_embd / n_head; }
    int64_t n_embd_kv() const { return head_dim() * n_head_kv; }
};

// A 2-D (or 1-D: rows == 1) weight as stored in the file: row-major, `rows` rows of `cols`
// elements each, `type` blocks along each row. For a matmul weight, rows = outputs, cols = inputs.
struct WeightRef {
    std::string name;
    TensorType type = TensorType::F32;
    const void* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    uint64_t n_bytes = 0;
};

struct LlamaLayerWeights {
    WeightRef attn_norm; // [n_embd] F32
    WeightRef wq;        // [n_embd rows, n_embd cols]
    WeightRef wk;        // [n_embd_kv rows, n_embd cols]
    WeightRef wv;        // [n_embd_kv rows, n_embd cols]
    WeightRef wo;        // [n_embd rows, n_embd cols]
    WeightRef ffn_norm;  // [n_embd] F32
    WeightRef ffn_gate;  // [n_ff rows, n_embd cols]   (w1)
    WeightRef ffn_down;  // [n_embd rows, n_ff cols]   (w2)
    WeightRef ffn_up;    // [n_ff rows, n_embd cols]   (w3)
};

struct LlamaWeights {
    WeightRef tok_embd;    // [n_vocab rows, n_embd cols]
    WeightRef output_norm; // [n_embd] F32
    WeightRef output;      // [n_vocab rows, n_embd cols]; aliases tok_embd when tied
    bool tied_output = false;
    std::vector<LlamaLayerWeights> layers;
};

// Whether a matrix weight of this type loads (and the kernels compute with it): F32, F16, BF16,
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
bool llama_weight_type_supported(TensorType t);

// A loaded model file: the mapping, hyperparameters, weights and tokenizer together.
class LlamaModelFile {
public:
    // Opens `path`, reads hyperparameters and checks every tensor's shape and type. Throws
    // rwd::Error naming the file and the key or tensor on any mismatch or missing piece.
    static std::unique_ptr<LlamaModelFile> open(const std::string& path);

    const GgufFile& gguf() const { return gguf_; }
    const LlamaHparams& hparams() const { return hparams_; }
    const LlamaWeights& weights() const { return weights_; }
    const Tokenizer& tokenizer() const { return *tokenizer_; }
    // A 64-bit FNV-1a digest of hyperparameters and all tensor bytes, computed once at open.
    uint64_t fingerprint() const { return fingerprint_; }

private:
    LlamaModelFile(GgufFile gguf) : gguf_(std::move(gguf)) {}
    GgufFile gguf_;
    LlamaHparams hparams_;
    LlamaWeights weights_;
    std::unique_ptr<Tokenizer> tokenizer_;
    uint64_t fingerprint_ = 0;
};

} // namespace rwd
