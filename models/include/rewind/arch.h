// The supported architectures, each described once: its tensors (names, shapes in terms of the
// hyperparameters, required or optional), the `<arch>.*` hyperparameters it reads and the choices
// the one forward graph (runtime/src/forward_graph.h) makes for it. Adding an architecture is adding
// one ArchInfo here (and a kernel, if it needs one the others do not).
#pragma once
#include <span>
#include <string>
#include <string_view>

namespace rwd {

// How rope rotates (kernels/ops.h defines it; declared here so the architecture table does not
// pull the kernels' front end into the public headers).
enum class RopeMode;

struct WeightRef;
struct LlamaLayerWeights;
struct LlamaWeights;

// A tensor dimension in terms of the hyperparameters.
enum class ArchDim {
    One,     // 1 (the rows of a vector)
    Embd,    // n_embd
    Q,       // n_head * head_dim
    KV,      // n_head_kv * head_dim
    QKV,     // Q + 2 KV (fused attn_qkv)
    Ff,      // n_ff
    Ff2,     // 2 n_ff (gate and up fused in ffn_up)
    HeadDim, // head_dim (per-head norms)
    RotHalf, // n_rot / 2 (rope frequency factors)
    Vocab,   // n_vocab
    Expert,  // n_expert (router outputs; the experts of a 3-D tensor)
    FfExp,   // n_ff_exp (one expert's feed-forward width)
};

// Which feed-forward a tensor belongs to: every file (Any), files without experts (Dense) or
// files with them (Moe, `<arch>.expert_count` > 0). A file's FFN is one or the other.
enum class FfnPart { Any, Dense, Moe };

// Whether an architecture's files have experts: never, as their `expert_count` says (llama:
// Mixtral-style files), or always (qwen3moe).
enum class MoeUse { None, Optional, Required };

// One tensor of the layout. Matrices are [rows (outputs), cols (inputs)], ggml dims {cols, rows};
// a vector (rows == One) has ggml dims {cols} and must be F32. An expert tensor (experts ==
// Expert) is one such matrix per expert, ggml dims {cols, rows, n_expert}, as llama.cpp writes
// `ffn_{gate,up,down}_exps`.
struct ArchTensor {
    const char* name;                       // "attn_q.weight" (after "blk.N.") or a global name
    WeightRef LlamaLayerWeights::*layer;    // where a per-layer tensor goes (null for globals)
    WeightRef LlamaWeights::*global;        // where a global tensor goes (null for per-layer)
    ArchDim rows, cols;
    bool required;
    FfnPart part = FfnPart::Any;
    ArchDim experts = ArchDim::One;         // One: a 2-D matrix (or a vector)
};

// A tensor name this build knows and refuses, with the reason given to the user.
struct RefusedTensor {
    const char* name;
    const char* reason;
};

enum class FfnAct { Silu, GeluTanh }; // the gate's activation: act(gate) * up

struct ArchInfo {
    const char* name;          // general.architecture; also the hyperparameter key prefix
    RopeMode rope;             // Norm (adjacent pairs) or Neox (halves)
    FfnAct act;
    bool q_prescaled;          // Q multiplied by 1/sqrt(head_dim) before attention (ggml_scale), scores unscaled
    bool embd_scaled;          // input embeddings multiplied by sqrtf(n_embd) (not the tied head)
    int swa_pattern;           // > 0: layer il uses the sliding window when il % pattern < pattern - 1
    bool swa_disabled;         // `<arch>.attention.sliding_window` is read but not applied, as llama.cpp does
    bool final_softcap;        // reads `<arch>.final_logit_softcapping`: logits = c * tanh(logits / c)
    // Experts: `<arch>.expert_count`, `.expert_used_count`, `.expert_feed_forward_length` (else
    // feed_forward_length / expert_used_count, llama.cpp's fallback; llama's experts are
    // feed_forward_length wide). Routing: softmax over the router's logits, the top
    // expert_used_count (ties: the lower expert index), their weights renormalised to sum 1.
    MoeUse moe = MoeUse::None;
    std::span<const ArchTensor> globals;
    std::span<const ArchTensor> layer;
    std::span<const RefusedTensor> refused;
};

// The description of `name`, or null when this build does not support it.
const ArchInfo* find_arch(std::string_view name);
// "llama, qwen2, qwen3, phi3, gemma3, qwen3moe" (for error messages and the README).
std::string supported_arch_names();

} // namespace rwd
