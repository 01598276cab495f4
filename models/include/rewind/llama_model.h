// Model files of the supported architectures (rewind/arch.h: llama, qwen2, qwen3, phi3, gemma3,
// qwen3moe):
// hyperparameters read from `<arch>.*` metadata and the weight tensors the architecture lists,
// each shape checked against them. Weights stay in the GGUF mapping (zero copy) with their type.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rewind/arch.h"
#include "rewind/gguf.h"
#include "rewind/kernels/dtype.h"
#include "rewind/tokenizer.h"

namespace rwd {

// Keys are `<arch>.*` (the architecture's name as prefix), e.g. qwen2.context_length.
struct LlamaHparams {
    std::string architecture;   // general.architecture (one of supported_arch_names())
    const ArchInfo* arch = nullptr; // its description
    std::string name;           // general.name, may be empty
    int64_t n_ctx_train = 0;    // .context_length
    int64_t n_embd = 0;         // .embedding_length
    int64_t n_layer = 0;        // .block_count
    int64_t n_ff = 0;           // .feed_forward_length
    int64_t n_head = 0;         // .attention.head_count
    int64_t n_head_kv = 0;      // .attention.head_count_kv (defaults to n_head)
    int64_t n_embd_head = 0;    // .attention.key_length (== value_length; defaults to n_embd / n_head)
    int64_t n_rot = 0;          // .rope.dimension_count (defaults to the head dimension)
    float rope_freq_base = 10000.0f; // .rope.freq_base
    float rms_eps = 1e-5f;      // .attention.layer_norm_rms_epsilon
    int64_t n_vocab = 0;        // .vocab_size, else the tokenizer's size
    // Rope scaling: .rope.scaling.type "none" or "linear" (.rope.scaling.factor f gives
    // freq_scale 1/f); any other type is refused by name when the file is opened.
    std::string rope_scaling = "none";
    float rope_freq_scale = 1.0f;
    // Sliding window: .attention.sliding_window (0: none). Layers the pattern marks as local use
    // it with .rope.freq_base_swa (default 10000) and no rope scaling.
    int64_t n_swa = 0;
    int64_t n_swa_file = 0;     // the key's value even where the architecture does not apply it (phi3)
    int swa_pattern = 0;
    float rope_freq_base_swa = 10000.0f;
    float attn_scale = 0.0f;    // Q pre-scale for q_prescaled architectures
    float final_logit_softcap = 0.0f; // .final_logit_softcapping (0: none)
    // Experts (ArchInfo::moe): 0 / 0 / 0 for a dense file. n_ff is then .feed_forward_length if
    // present (qwen3moe's dense width, unused), else 0.
    int64_t n_expert = 0;       // .expert_count (at most kMaxExperts)
    int64_t n_expert_used = 0;  // .expert_used_count (1 .. n_expert)
    int64_t n_ff_exp = 0;       // .expert_feed_forward_length, else n_ff / n_expert_used (llama: n_ff)
    bool is_moe() const { return n_expert > 0; }

    int64_t head_dim() const { return n_embd_head > 0 ? n_embd_head : n_embd / n_head; }
    int64_t n_embd_q() const { return head_dim() * n_head; }
    int64_t n_embd_kv() const { return head_dim() * n_head_kv; }
    bool is_swa_layer(int64_t il) const {
        return n_swa > 0 && swa_pattern > 0 && il % swa_pattern < swa_pattern - 1;
    }
};

// The most experts a file may have (llama.cpp's LLAMA_MAX_EXPERTS).
inline constexpr int64_t kMaxExperts = 512;

// A 2-D (or 1-D: rows == 1) weight as stored in the file: row-major, `rows` rows of `cols`
// elements each, `type` blocks along each row. For a matmul weight, rows = outputs, cols = inputs.
// An expert tensor holds `experts` such matrices back to back (expert e at data + e * n_bytes /
// experts); every other tensor has experts == 1.
struct WeightRef {
    std::string name;
    TensorType type = TensorType::F32;
    const void* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    uint64_t n_bytes = 0; // all experts
    int64_t experts = 1;
};

// Which of these a file has is set by its architecture (rewind/arch.h); absent ones have data null.
struct LlamaLayerWeights {
    WeightRef attn_norm; // [n_embd] F32
    WeightRef wq;        // [n_embd_q rows, n_embd cols]
    WeightRef wk;        // [n_embd_kv rows, n_embd cols]
    WeightRef wv;        // [n_embd_kv rows, n_embd cols]
    WeightRef wqkv;      // [n_embd_q + 2 n_embd_kv rows, n_embd cols] (phi3: q, k, v fused)
    WeightRef bq, bk, bv;            // [n_embd_q], [n_embd_kv], [n_embd_kv] F32 (qwen2)
    WeightRef attn_q_norm, attn_k_norm; // [head_dim] F32, per head (qwen3, gemma3)
    WeightRef wo;        // [n_embd rows, n_embd_q cols]
    WeightRef post_attn_norm; // [n_embd] F32 (gemma3)
    WeightRef ffn_norm;  // [n_embd] F32
    WeightRef ffn_gate;  // [n_ff rows, n_embd cols]   (w1)
    WeightRef ffn_down;  // [n_embd rows, n_ff cols]   (w2)
    WeightRef ffn_up;    // [n_ff rows, n_embd cols]   (w3); phi3: [2 n_ff rows] = [gate; up]
    WeightRef post_ffn_norm; // [n_embd] F32 (gemma3)
    // Expert FFN (files with experts; then ffn_gate/up/down are absent).
    WeightRef ffn_gate_inp;  // [n_expert rows, n_embd cols] the router
    WeightRef ffn_gate_exps; // n_expert x [n_ff_exp rows, n_embd cols]
    WeightRef ffn_down_exps; // n_expert x [n_embd rows, n_ff_exp cols]
    WeightRef ffn_up_exps;   // n_expert x [n_ff_exp rows, n_embd cols]
};

struct LlamaWeights {
    WeightRef tok_embd;    // [n_vocab rows, n_embd cols]
    WeightRef output_norm; // [n_embd] F32
    WeightRef output;      // [n_vocab rows, n_embd cols]; aliases tok_embd when tied
    WeightRef rope_freqs;  // [n_rot / 2] F32 rope frequency factors (Llama 3.1), or absent
    bool tied_output = false;
    std::vector<LlamaLayerWeights> layers;
};

// Whether a matrix weight of this type loads (and the kernels compute with it): F32, F16, BF16,
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
bool llama_weight_type_supported(TensorType t);
// The kernels' name for a tensor type they compute with (exactly those llama_weight_type_supported
// accepts); std::nullopt for every other type.
std::optional<DType> tensor_dtype(TensorType t);

// A loaded model file: the mapping, hyperparameters, weights and tokenizer together.
class LlamaModelFile {
public:
    // Opens `path`, reads hyperparameters and checks every tensor's shape and type. Throws
    // rwd::Error naming the file and the key or tensor on any mismatch or missing piece: the
    // codes of GgufFile::open and Tokenizer::from_gguf; format for a missing, mistyped or
    // out-of-range key or tensor, inconsistent head counts, misaligned data, a vocabulary-only
    // file or a vocabulary whose size is not the model's; shape for a tensor whose shape disagrees
    // with the hyperparameters (and rope.scale_linear disagreeing with rope.scaling.factor);
    // unsupported for another architecture, tensor type or tensor, or a
    // feature rewind lacks (a rope scaling kind, soft-capping, experts on an architecture without
    // them, a sliding-window layout).
    static std::unique_ptr<LlamaModelFile> open(const std::string& path);
    // The same from a file held in memory (copied); `name` stands for the path in errors.
    static std::unique_ptr<LlamaModelFile> from_memory(const std::string& name, std::span<const uint8_t> bytes);

    const GgufFile& gguf() const { return gguf_; }
    const LlamaHparams& hparams() const { return hparams_; }
    const LlamaWeights& weights() const { return weights_; }
    const Tokenizer& tokenizer() const { return *tokenizer_; }
    // A 64-bit FNV-1a digest of hyperparameters, every tensor's name, type and shape, and its
    // bytes, computed once at open: all bytes of every tensor but the experts' (3-D `*_exps`),
    // which enter by 64 windows of 64 bytes spread over each, so that opening a MoE file does not
    // read every expert. Two files whose experts differ only outside those windows share it.
    uint64_t fingerprint() const { return fingerprint_; }

private:
    static std::unique_ptr<LlamaModelFile> from_gguf(GgufFile gguf);
    // from_gguf's steps, in order (llama_model.cpp).
    void read_hparams();
    void bind_weights();
    void read_tokenizer();
    void compute_fingerprint();
    LlamaModelFile(GgufFile gguf) : gguf_(std::move(gguf)) {}
    GgufFile gguf_;
    LlamaHparams hparams_;
    LlamaWeights weights_;
    std::unique_ptr<Tokenizer> tokenizer_;
    uint64_t fingerprint_ = 0;
};

} // namespace rwd
