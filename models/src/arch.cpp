// The architecture table: what llama.cpp loads for each supported `general.architecture`, as
// data. Facts checked against llama.cpp's model loader and graph builders (not its code):
// qwen2 adds Q/K/V biases; qwen3 RMS-normalises each Q/K head; phi3 fuses QKV and gate+up and
// pre-scales Q; gemma3 pre-scales Q, norms Q/K heads and both sub-block outputs, uses GELU, scales
// its input embeddings by sqrt(n_embd) and runs 5 of every 6 layers with a sliding window;
// llama files with experts (Mixtral) and qwen3moe replace the FFN by a router (ffn_gate_inp,
// [n_expert, n_embd], kept F32 by the converter and llama-quantize) and 3-D expert tensors.
#include "rewind/arch.h"

#include "rewind/kernels/ops.h"
#include "rewind/llama_model.h"

namespace rwd {

namespace {

using L = LlamaLayerWeights;
using G = LlamaWeights;
using D = ArchDim;

constexpr ArchTensor layer_t(const char* n, WeightRef L::*slot, D rows, D cols, bool req = true) {
    return {n, slot, nullptr, rows, cols, req};
}
// A dense FFN tensor: bound only in files without experts.
constexpr ArchTensor dense_t(const char* n, WeightRef L::*slot, D rows, D cols) {
    return {n, slot, nullptr, rows, cols, true, FfnPart::Dense};
}
// A tensor of the expert FFN, bound only in files with experts; `e`: Expert for the 3-D ones.
constexpr ArchTensor moe_t(const char* n, WeightRef L::*slot, D rows, D cols, D e) {
    return {n, slot, nullptr, rows, cols, true, FfnPart::Moe, e};
}
constexpr ArchTensor global_t(const char* n, WeightRef G::*slot, D rows, D cols, bool req = true) {
    return {n, nullptr, slot, rows, cols, req};
}

// Globals: embeddings, final norm, head (absent: tied to the embeddings).
const ArchTensor kGlobals[] = {
    global_t("token_embd.weight", &G::tok_embd, D::Vocab, D::Embd),
    global_t("output_norm.weight", &G::output_norm, D::One, D::Embd),
    global_t("output.weight", &G::output, D::Vocab, D::Embd, false),
};
// Llama 3.1+: rope frequency factors (the llama3 rope scaling baked in by the converter).
const ArchTensor kLlamaGlobals[] = {
    kGlobals[0], kGlobals[1], kGlobals[2],
    global_t("rope_freqs.weight", &G::rope_freqs, D::One, D::RotHalf, false),
};

const ArchTensor kLlamaLayer[] = {
    layer_t("attn_norm.weight", &L::attn_norm, D::One, D::Embd),
    layer_t("attn_q.weight", &L::wq, D::Q, D::Embd),
    layer_t("attn_k.weight", &L::wk, D::KV, D::Embd),
    layer_t("attn_v.weight", &L::wv, D::KV, D::Embd),
    layer_t("attn_output.weight", &L::wo, D::Embd, D::Q),
    layer_t("ffn_norm.weight", &L::ffn_norm, D::One, D::Embd),
    dense_t("ffn_gate.weight", &L::ffn_gate, D::Ff, D::Embd),
    dense_t("ffn_down.weight", &L::ffn_down, D::Embd, D::Ff),
    dense_t("ffn_up.weight", &L::ffn_up, D::Ff, D::Embd),
    // Mixtral-style experts on the llama architecture (llama.cpp's one-tensor-per-layer layout).
    moe_t("ffn_gate_inp.weight", &L::ffn_gate_inp, D::Expert, D::Embd, D::One),
    moe_t("ffn_gate_exps.weight", &L::ffn_gate_exps, D::FfExp, D::Embd, D::Expert),
    moe_t("ffn_down_exps.weight", &L::ffn_down_exps, D::Embd, D::FfExp, D::Expert),
    moe_t("ffn_up_exps.weight", &L::ffn_up_exps, D::FfExp, D::Embd, D::Expert),
};
// llama.cpp's older per-expert layout (blk.N.ffn_gate.E.weight) is not read: convert such a file again.

const ArchTensor kQwen2Layer[] = {
    kLlamaLayer[0], kLlamaLayer[1], kLlamaLayer[2], kLlamaLayer[3], kLlamaLayer[4],
    kLlamaLayer[5], kLlamaLayer[6], kLlamaLayer[7], kLlamaLayer[8],
    layer_t("attn_q.bias", &L::bq, D::One, D::Q),
    layer_t("attn_k.bias", &L::bk, D::One, D::KV),
    layer_t("attn_v.bias", &L::bv, D::One, D::KV),
};

const ArchTensor kQwen3Layer[] = {
    kLlamaLayer[0], kLlamaLayer[1], kLlamaLayer[2], kLlamaLayer[3], kLlamaLayer[4],
    kLlamaLayer[5], kLlamaLayer[6], kLlamaLayer[7], kLlamaLayer[8],
    layer_t("attn_q_norm.weight", &L::attn_q_norm, D::One, D::HeadDim),
    layer_t("attn_k_norm.weight", &L::attn_k_norm, D::One, D::HeadDim),
};

// Qwen3's attention (per-head Q/K norms) with only the expert FFN.
const ArchTensor kQwen3MoeLayer[] = {
    kLlamaLayer[0], kLlamaLayer[1], kLlamaLayer[2], kLlamaLayer[3], kLlamaLayer[4], kLlamaLayer[5],
    layer_t("attn_q_norm.weight", &L::attn_q_norm, D::One, D::HeadDim),
    layer_t("attn_k_norm.weight", &L::attn_k_norm, D::One, D::HeadDim),
    kLlamaLayer[9], kLlamaLayer[10], kLlamaLayer[11], kLlamaLayer[12],
};

const ArchTensor kPhi3Layer[] = {
    layer_t("attn_norm.weight", &L::attn_norm, D::One, D::Embd),
    layer_t("attn_qkv.weight", &L::wqkv, D::QKV, D::Embd),
    layer_t("attn_output.weight", &L::wo, D::Embd, D::Q),
    layer_t("ffn_norm.weight", &L::ffn_norm, D::One, D::Embd),
    layer_t("ffn_up.weight", &L::ffn_up, D::Ff2, D::Embd), // [gate; up]
    layer_t("ffn_down.weight", &L::ffn_down, D::Embd, D::Ff),
};
const RefusedTensor kPhi3Refused[] = {
    {"rope_factors_long.weight", "LongRoPE scaling (the 128k Phi-3 variants) is not supported"},
    {"rope_factors_short.weight", "LongRoPE scaling (the 128k Phi-3 variants) is not supported"},
};

const ArchTensor kGemma3Layer[] = {
    kLlamaLayer[0], kLlamaLayer[1], kLlamaLayer[2], kLlamaLayer[3], kLlamaLayer[4],
    kLlamaLayer[5], kLlamaLayer[6], kLlamaLayer[7], kLlamaLayer[8],
    layer_t("attn_q_norm.weight", &L::attn_q_norm, D::One, D::HeadDim),
    layer_t("attn_k_norm.weight", &L::attn_k_norm, D::One, D::HeadDim),
    layer_t("post_attention_norm.weight", &L::post_attn_norm, D::One, D::Embd),
    layer_t("post_ffw_norm.weight", &L::post_ffn_norm, D::One, D::Embd),
};

const ArchInfo kArchs[] = {
    {.name = "llama", .rope = RopeMode::Norm, .act = FfnAct::Silu, .q_prescaled = false, .embd_scaled = false,
     .swa_pattern = 0, .swa_disabled = false, .final_softcap = false, .moe = MoeUse::Optional,
     .globals = kLlamaGlobals, .layer = kLlamaLayer, .refused = {}},
    {.name = "qwen2", .rope = RopeMode::Neox, .act = FfnAct::Silu, .q_prescaled = false, .embd_scaled = false,
     .swa_pattern = 0, .swa_disabled = false, .final_softcap = false, .globals = kGlobals, .layer = kQwen2Layer,
     .refused = {}},
    {.name = "qwen3", .rope = RopeMode::Neox, .act = FfnAct::Silu, .q_prescaled = false, .embd_scaled = false,
     .swa_pattern = 0, .swa_disabled = false, .final_softcap = false, .globals = kGlobals, .layer = kQwen3Layer,
     .refused = {}},
    // llama.cpp reads phi3's sliding_window but runs without it ("Phi SWA is currently
    // disabled", llama.cpp PR 13676); so does rewind, to give the same outputs.
    {.name = "phi3", .rope = RopeMode::Neox, .act = FfnAct::Silu, .q_prescaled = true, .embd_scaled = false,
     .swa_pattern = 0, .swa_disabled = true, .final_softcap = false, .globals = kGlobals, .layer = kPhi3Layer,
     .refused = kPhi3Refused},
    {.name = "gemma3", .rope = RopeMode::Neox, .act = FfnAct::GeluTanh, .q_prescaled = true, .embd_scaled = true,
     .swa_pattern = 6, .swa_disabled = false, .final_softcap = true, .globals = kGlobals, .layer = kGemma3Layer,
     .refused = {}},
    {.name = "qwen3moe", .rope = RopeMode::Neox, .act = FfnAct::Silu, .q_prescaled = false, .embd_scaled = false,
     .swa_pattern = 0, .swa_disabled = false, .final_softcap = false, .moe = MoeUse::Required, .globals = kGlobals,
     .layer = kQwen3MoeLayer, .refused = {}},
};

} // namespace

const ArchInfo* find_arch(std::string_view name) {
    for (const ArchInfo& a : kArchs)
        if (name == a.name) return &a;
    return nullptr;
}

std::string supported_arch_names() {
    std::string s;
    for (const ArchInfo& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.name);
    return s;
}

} // namespace rwd
