// Llama model files: reads `llama.*` hyperparameters, checks them for consistency, binds every
// weight tensor (shape and type checked), builds the tokenizer and fingerprints the model.
#include "rewind/llama_model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "rewind/hash.h"

namespace rwd {

namespace {

constexpr int64_t kMaxHparam = std::numeric_limits<int32_t>::max();

std::string shape_to_string(const std::vector<uint64_t>& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

// Natural alignment of the types we compute with: kernels read them as arrays of these.
uint64_t element_alignment(TensorType t) {
    switch (t) {
    case TensorType::F32: return 4;
    // Every block format here starts with (or holds at an even offset) fp16 fields, and its block
    // size is even.
    case TensorType::F16: case TensorType::BF16: case TensorType::Q8_0: case TensorType::Q4_0:
    case TensorType::Q4_1: case TensorType::Q5_0: case TensorType::Q5_1: case TensorType::Q4_K:
    case TensorType::Q5_K: case TensorType::Q6_K: return 2;
    default: return 1;
    }
}

bool is_matmul_type(TensorType t) { return llama_weight_type_supported(t); }

class Loader {
public:
    explicit Loader(const GgufFile& g) : g_(g) {}

    [[noreturn]] void fail(const std::string& what, const std::string& problem,
                           ErrorCode code = ErrorCode::format) const {
        throw Error(code, g_.path() + ": " + what + ": " + problem);
    }

    // A required (or defaulted) positive integer hyperparameter, bounded so that products of two
    // of them cannot overflow int64 downstream.
    int64_t positive(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const {
        std::optional<int64_t> v = g_.get_int(key);
        if (!v) {
            if (!fallback) fail("metadata '" + key + "'", "required key is missing");
            return *fallback;
        }
        if (*v <= 0 || *v > kMaxHparam)
            fail("metadata '" + key + "'", "value " + std::to_string(*v) + " out of range 1.." +
                                               std::to_string(kMaxHparam));
        return *v;
    }

    float positive_float(const std::string& key, float fallback) const {
        std::optional<double> v = g_.get_float(key);
        if (!v) return fallback;
        float f = static_cast<float>(*v);
        if (!std::isfinite(f) || !(f > 0.0f))
            fail("metadata '" + key + "'", "value " + std::to_string(*v) + " must be a positive finite number");
        return f;
    }

    // Binds tensor `name`, requiring ggml dims == {cols, rows} (or {cols} for a vector; {cols, rows,
    // experts} for an expert tensor, experts > 1).
    WeightRef bind(const std::string& name, int64_t rows, int64_t cols, bool vector, bool required = true,
                   int64_t experts = 1) {
        const GgufTensorInfo* ti = g_.find_tensor(name);
        if (!ti) {
            if (!required) return {};
            fail("tensor '" + name + "'", "missing from the file");
        }
        used_.insert(name);
        std::string where = "tensor '" + name + "'";
        // Trailing dims of 1 carry no information; some writers keep them.
        std::vector<uint64_t> dims = ti->dims;
        while (dims.size() > 1 && dims.back() == 1) dims.pop_back();
        std::vector<uint64_t> want = vector ? std::vector<uint64_t>{static_cast<uint64_t>(cols)}
                                            : std::vector<uint64_t>{static_cast<uint64_t>(cols),
                                                                    static_cast<uint64_t>(rows)};
        if (experts > 1) want.push_back(static_cast<uint64_t>(experts));
        if (dims != want)
            fail(where, "shape " + shape_to_string(ti->dims) + " does not match the hyperparameters (expected " +
                            shape_to_string(want) + ")", ErrorCode::shape);
        if (vector && ti->type != TensorType::F32)
            fail(where, "type " + tensor_type_name(ti->type) + " not supported for a norm weight (expected F32)",
                 ErrorCode::unsupported);
        if (!vector && !is_matmul_type(ti->type))
            fail(where, "type " + tensor_type_name(ti->type) +
                            " not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)", ErrorCode::unsupported);
        if (reinterpret_cast<uintptr_t>(ti->data) % element_alignment(ti->type) != 0)
            fail(where, "data is not aligned for " + tensor_type_name(ti->type));
        WeightRef w;
        w.name = name;
        w.type = ti->type;
        w.data = ti->data;
        w.rows = vector ? 1 : rows;
        w.cols = cols;
        w.n_bytes = ti->n_bytes;
        w.experts = experts;
        return w;
    }

    void check_all_used(const std::string& arch) const {
        for (const GgufTensorInfo& ti : g_.tensors())
            if (!used_.count(ti.name))
                fail("tensor '" + ti.name + "'", "unexpected tensor (not part of the " + arch +
                                                    " layout this build supports)", ErrorCode::unsupported);
    }

private:
    const GgufFile& g_;
    std::set<std::string> used_;
};

} // namespace

std::optional<DType> tensor_dtype(TensorType t) {
    switch (t) {
    case TensorType::F32: return DType::F32;
    case TensorType::F16: return DType::F16;
    case TensorType::BF16: return DType::BF16;
    case TensorType::Q8_0: return DType::Q8_0;
    case TensorType::Q4_0: return DType::Q4_0;
    case TensorType::Q4_1: return DType::Q4_1;
    case TensorType::Q5_0: return DType::Q5_0;
    case TensorType::Q5_1: return DType::Q5_1;
    case TensorType::Q4_K: return DType::Q4_K;
    case TensorType::Q5_K: return DType::Q5_K;
    case TensorType::Q6_K: return DType::Q6_K;
    default: return std::nullopt;
    }
}

bool llama_weight_type_supported(TensorType t) { return tensor_dtype(t).has_value(); }

std::unique_ptr<LlamaModelFile> LlamaModelFile::open(const std::string& path) {
    return from_gguf(GgufFile::open(path));
}

std::unique_ptr<LlamaModelFile> LlamaModelFile::from_memory(const std::string& name, std::span<const uint8_t> bytes) {
    return from_gguf(GgufFile::from_memory(name, bytes));
}

namespace {

// `<arch>.*` keys every architecture has: sizes, heads, rope dimensions, base and norm epsilon.
void read_core(const Loader& ld, const GgufFile& g, LlamaHparams& hp, const std::string& k) {
    hp.name = g.get_string("general.name").value_or("");
    hp.n_ctx_train = ld.positive(k + "context_length");
    hp.n_embd = ld.positive(k + "embedding_length");
    hp.n_layer = ld.positive(k + "block_count");
    // Every layer needs at least one tensor of its own: a larger count is a malformed file, refused
    // before anything is sized by it (a fuzzed count of billions must not reach an allocation).
    if (static_cast<uint64_t>(hp.n_layer) > g.tensors().size())
        ld.fail("metadata '" + k + "block_count'", std::to_string(hp.n_layer) + " layers, but the file holds only " +
                                                       std::to_string(g.tensors().size()) + " tensors");
    // qwen3moe files carry the dense width of their family, which nothing uses; it may be absent.
    const bool ff_optional = hp.arch->moe == MoeUse::Required && !g.find(k + "feed_forward_length");
    hp.n_ff = ff_optional ? 0 : ld.positive(k + "feed_forward_length");
    hp.n_head = ld.positive(k + "attention.head_count");
    hp.n_head_kv = ld.positive(k + "attention.head_count_kv", hp.n_head);
    if (g.find(k + "attention.key_length")) {
        hp.n_embd_head = ld.positive(k + "attention.key_length");
        const int64_t vl = ld.positive(k + "attention.value_length", hp.n_embd_head);
        if (vl != hp.n_embd_head)
            ld.fail("metadata '" + k + "attention.value_length'",
                    "value " + std::to_string(vl) + " differs from the key length " + std::to_string(hp.n_embd_head) +
                        " (not supported)");
    } else {
        if (hp.n_embd % hp.n_head != 0)
            ld.fail("metadata '" + k + "attention.head_count'",
                    "embedding length " + std::to_string(hp.n_embd) + " is not divisible by " +
                        std::to_string(hp.n_head) + " heads");
        hp.n_embd_head = hp.n_embd / hp.n_head;
    }
    if (hp.n_head % hp.n_head_kv != 0)
        ld.fail("metadata '" + k + "attention.head_count_kv'",
                std::to_string(hp.n_head) + " heads are not divisible by " + std::to_string(hp.n_head_kv) +
                    " KV heads");
    hp.n_rot = ld.positive(k + "rope.dimension_count", hp.head_dim());
    if (hp.n_rot > hp.head_dim() || hp.n_rot % 2 != 0)
        ld.fail("metadata '" + k + "rope.dimension_count'",
                "value " + std::to_string(hp.n_rot) + " must be even and at most the head dimension " +
                    std::to_string(hp.head_dim()));
    hp.rope_freq_base = ld.positive_float(k + "rope.freq_base", 10000.0f);
    hp.rms_eps = ld.positive_float(k + "attention.layer_norm_rms_epsilon", 1e-5f);
}

// Rope scaling: applied (linear) or refused by name, never ignored.
void read_rope_scaling(const Loader& ld, const GgufFile& g, LlamaHparams& hp, const std::string& k) {
    const std::string tkey = k + "rope.scaling.type";
    const std::optional<std::string> type = g.get_string(tkey);
    const bool has_factor = g.find(k + "rope.scaling.factor") != nullptr;
    const float factor = ld.positive_float(k + "rope.scaling.factor", 1.0f);
    if (g.find(tkey) && !type) ld.fail("metadata '" + tkey + "'", "expected a string");
    if (type && *type != "none" && *type != "linear")
        ld.fail("metadata '" + tkey + "'", "rope scaling '" + *type + "' is not supported (supported: none, linear)",
                ErrorCode::unsupported);
    if (type && *type == "linear") {
        hp.rope_scaling = "linear";
        hp.rope_freq_scale = 1.0f / factor;
    } else if (has_factor && factor != 1.0f) {
        ld.fail("metadata '" + k + "rope.scaling.factor'",
                "a factor of " + std::to_string(factor) + " without a supported 'rope.scaling.type' (linear)");
    }
    if (g.find(k + "rope.scale_linear")) {
        const float f = ld.positive_float(k + "rope.scale_linear", 1.0f);
        if (hp.rope_scaling == "linear" && f != factor)
            ld.fail("metadata '" + k + "rope.scale_linear'", "disagrees with rope.scaling.factor", ErrorCode::shape);
        if (f != 1.0f) {
            hp.rope_scaling = "linear";
            hp.rope_freq_scale = 1.0f / f;
        }
    }
    for (const char* key : {"rope.scaling.attn_factor", "rope.scaling.yarn_log_multiplier", "rope.scaling.finetuned",
                            "rope.scaling.yarn_ext_factor"}) {
        if (g.find(k + key))
            ld.fail("metadata '" + k + key + "'", "YaRN / LongRoPE rope scaling is not supported", ErrorCode::unsupported);
    }
}

// Sliding window, Q pre-scale and soft-capping: the architecture's own keys.
void read_window_and_caps(const Loader& ld, const GgufFile& g, LlamaHparams& hp, const std::string& k) {
    const ArchInfo& arch = *hp.arch;
    if (g.find(k + "attention.sliding_window")) {
        hp.n_swa_file = g.get_int(k + "attention.sliding_window").value_or(0);
        if (hp.n_swa_file < 0 || hp.n_swa_file > kMaxHparam)
            ld.fail("metadata '" + k + "attention.sliding_window'", "value out of range");
    }
    if (arch.swa_pattern > 0) {
        if (hp.n_swa_file <= 0)
            ld.fail("metadata '" + k + "attention.sliding_window'",
                    "required for '" + hp.architecture + "' (a positive window)");
        hp.n_swa = hp.n_swa_file;
        hp.swa_pattern = arch.swa_pattern;
        hp.rope_freq_base_swa = ld.positive_float(k + "rope.freq_base_swa", 10000.0f);
    } else if (hp.n_swa_file > 0 && !arch.swa_disabled) {
        ld.fail("metadata '" + k + "attention.sliding_window'",
                "a sliding window is not supported for architecture '" + hp.architecture + "'", ErrorCode::unsupported);
    }
    if (arch.q_prescaled) {
        // llama.cpp's f_attention_scale: gemma3 27B (62 layers) scales by n_embd / n_head.
        const bool gemma27b = hp.architecture == "gemma3" && hp.n_layer == 62;
        hp.attn_scale = 1.0f / std::sqrt(float(gemma27b ? hp.n_embd / hp.n_head : hp.head_dim()));
    }
    if (arch.final_softcap)
        hp.final_logit_softcap =
            g.find(k + "final_logit_softcapping") ? ld.positive_float(k + "final_logit_softcapping", 1.0f) : 0.0f;
    else if (g.find(k + "final_logit_softcapping"))
        ld.fail("metadata '" + k + "final_logit_softcapping'", "not supported for '" + hp.architecture + "'",
                ErrorCode::unsupported);
    if (g.find(k + "attn_logit_softcapping"))
        ld.fail("metadata '" + k + "attn_logit_softcapping'", "attention logit soft-capping is not supported",
                ErrorCode::unsupported);
}

// Experts: counts and width, and the routing variants rewind does not run refused by key.
void read_experts(const Loader& ld, const GgufFile& g, LlamaHparams& hp, const std::string& k) {
    const ArchInfo& arch = *hp.arch;
    const std::string ck = k + "expert_count";
    const int64_t count = g.find(ck) ? g.get_int(ck).value_or(-1) : 0;
    if (count < 0) ld.fail("metadata '" + ck + "'", "expected a non-negative integer");
    if (count == 0) {
        if (arch.moe == MoeUse::Required)
            ld.fail("metadata '" + ck + "'", "required for '" + hp.architecture + "' (a positive expert count)");
        return;
    }
    if (arch.moe == MoeUse::None)
        ld.fail("metadata '" + ck + "'", "mixture-of-experts files are not supported for architecture '" +
                                             hp.architecture + "' (only llama and qwen3moe)", ErrorCode::unsupported);
    if (count > kMaxExperts)
        ld.fail("metadata '" + ck + "'", "value " + std::to_string(count) + " out of range 1.." + std::to_string(kMaxExperts));
    hp.n_expert = count;
    hp.n_expert_used = ld.positive(k + "expert_used_count");
    if (hp.n_expert_used > hp.n_expert)
        ld.fail("metadata '" + k + "expert_used_count'", "value " + std::to_string(hp.n_expert_used) +
                                                             " exceeds the expert count " + std::to_string(hp.n_expert));
    const std::string fk = k + "expert_feed_forward_length";
    if (hp.architecture == "llama") { // Mixtral: every expert is feed_forward_length wide
        hp.n_ff_exp = hp.n_ff;
        if (g.find(fk) && ld.positive(fk) != hp.n_ff)
            ld.fail("metadata '" + fk + "'", "differs from feed_forward_length (llama experts are that wide)", ErrorCode::shape);
    } else if (g.find(fk)) {
        hp.n_ff_exp = ld.positive(fk);
    } else {
        if (hp.n_ff / hp.n_expert_used <= 0) ld.fail("metadata '" + fk + "'", "required key is missing");
        hp.n_ff_exp = hp.n_ff / hp.n_expert_used; // llama.cpp's fallback
    }
    // Routing variants of other MoE families: refused, never run as if they were softmax top-k.
    const std::optional<int64_t> gating = g.get_int(k + "expert_gating_func");
    if (g.find(k + "expert_gating_func") && gating != 1)
        ld.fail("metadata '" + k + "expert_gating_func'", "only softmax gating (1) is supported", ErrorCode::unsupported);
    if (g.get_int(k + "expert_shared_count").value_or(0) > 0)
        ld.fail("metadata '" + k + "expert_shared_count'", "shared experts are not supported", ErrorCode::unsupported);
    if (g.find(k + "expert_weights_scale") && g.get_float(k + "expert_weights_scale").value_or(0.0) != 1.0)
        ld.fail("metadata '" + k + "expert_weights_scale'", "scaled expert weights are not supported", ErrorCode::unsupported);
}

// .vocab_size, else the tokenizer's token count.
void read_vocab_size(const Loader& ld, const GgufFile& g, LlamaHparams& hp, const std::string& k) {
    if (g.find(k + "vocab_size")) {
        hp.n_vocab = ld.positive(k + "vocab_size");
        return;
    }
    const GgufKeyValue* tokens = g.find("tokenizer.ggml.tokens");
    if (!tokens) ld.fail("metadata '" + k + "vocab_size'", "missing, and there is no 'tokenizer.ggml.tokens' to count");
    if (tokens->type != GgufValueType::Array ||
        std::get<std::shared_ptr<GgufArray>>(tokens->value)->type != GgufValueType::String)
        ld.fail("metadata 'tokenizer.ggml.tokens'", "expected an array of string");
    size_t n = std::get<std::shared_ptr<GgufArray>>(tokens->value)->values.size();
    if (n == 0 || n > static_cast<size_t>(kMaxHparam))
        ld.fail("metadata 'tokenizer.ggml.tokens'", "vocabulary size " + std::to_string(n) + " out of range");
    hp.n_vocab = static_cast<int64_t>(n);
}

int64_t arch_dim(const LlamaHparams& hp, ArchDim d) {
    switch (d) {
    case ArchDim::One: return 1;
    case ArchDim::Embd: return hp.n_embd;
    case ArchDim::Q: return hp.n_embd_q();
    case ArchDim::KV: return hp.n_embd_kv();
    case ArchDim::QKV: return hp.n_embd_q() + 2 * hp.n_embd_kv();
    case ArchDim::Ff: return hp.n_ff;
    case ArchDim::Ff2: return 2 * hp.n_ff;
    case ArchDim::HeadDim: return hp.head_dim();
    case ArchDim::RotHalf: return hp.n_rot / 2;
    case ArchDim::Vocab: return hp.n_vocab;
    case ArchDim::Expert: return hp.n_expert;
    case ArchDim::FfExp: return hp.n_ff_exp;
    }
    return 0;
}

} // namespace

std::unique_ptr<LlamaModelFile> LlamaModelFile::from_gguf(GgufFile gguf) {
    if (gguf.tensors().empty())
        throw Error(ErrorCode::format, gguf.path() + ": no tensors: this is a vocabulary-only GGUF file, not a model "
                                                     "(use `rewind inspect` to look at it)");
    std::unique_ptr<LlamaModelFile> mf(new LlamaModelFile(std::move(gguf)));
    mf->read_hparams();
    mf->bind_weights();
    mf->read_tokenizer();
    mf->compute_fingerprint();
    return mf;
}

void LlamaModelFile::read_hparams() {
    const Loader ld(gguf_);
    LlamaHparams& hp = hparams_;
    std::optional<std::string> arch_name = gguf_.get_string("general.architecture");
    if (!arch_name) ld.fail("metadata 'general.architecture'", "required key is missing");
    hp.arch = find_arch(*arch_name);
    if (!hp.arch)
        ld.fail("metadata 'general.architecture'",
                "unsupported architecture '" + *arch_name + "' (supported: " + supported_arch_names() + ")",
                ErrorCode::unsupported);
    hp.architecture = *arch_name;
    const std::string k = hp.architecture + "."; // every hyperparameter key carries the prefix
    read_core(ld, gguf_, hp, k);
    read_rope_scaling(ld, gguf_, hp, k);
    read_window_and_caps(ld, gguf_, hp, k);
    read_experts(ld, gguf_, hp, k);
    read_vocab_size(ld, gguf_, hp, k);
}

// Every tensor the architecture lists (its dense or its expert FFN, as the file has experts or
// not), shapes from the hyperparameters; any other tensor is refused.
void LlamaModelFile::bind_weights() {
    Loader ld(gguf_);
    const LlamaHparams& hp = hparams_;
    const ArchInfo& arch = *hp.arch;
    LlamaWeights& w = weights_;
    for (const RefusedTensor& r : arch.refused)
        if (gguf_.find_tensor(r.name)) ld.fail("tensor '" + std::string(r.name) + "'", r.reason, ErrorCode::unsupported);
    auto bind = [&](const ArchTensor& t, const std::string& name) {
        return ld.bind(name, arch_dim(hp, t.rows), arch_dim(hp, t.cols), t.rows == ArchDim::One, t.required,
                       t.experts == ArchDim::One ? 1 : arch_dim(hp, t.experts));
    };
    for (const ArchTensor& t : arch.globals) w.*(t.global) = bind(t, t.name);
    if (!w.output.data) {
        w.tied_output = true;
        w.output = w.tok_embd;
    } else if (w.output.type == w.tok_embd.type && w.output.n_bytes == w.tok_embd.n_bytes &&
               std::memcmp(w.output.data, w.tok_embd.data, w.output.n_bytes) == 0) {
        // Some converters (e.g. llama2.c's) store a tied head as a byte-identical copy; aliasing
        // it keeps one copy hot in cache and tells the runtime the head is tied.
        w.tied_output = true;
        w.output = w.tok_embd;
    }
    const FfnPart skipped = hp.is_moe() ? FfnPart::Dense : FfnPart::Moe;
    w.layers.resize(static_cast<size_t>(hp.n_layer));
    for (int64_t i = 0; i < hp.n_layer; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        LlamaLayerWeights& l = w.layers[static_cast<size_t>(i)];
        for (const ArchTensor& t : arch.layer)
            if (t.part != skipped) l.*(t.layer) = bind(t, p + t.name);
    }
    ld.check_all_used(hp.architecture);
}

void LlamaModelFile::read_tokenizer() {
    const std::string& path = gguf_.path();
    try {
        tokenizer_ = Tokenizer::from_gguf(gguf_);
    } catch (const Error& e) {
        // Make sure the file is named even if the tokenizer's message does not say it.
        std::string msg = e.what();
        if (msg.rfind(path, 0) == 0) throw;
        throw Error(e.code(), path + ": tokenizer: " + msg);
    }
    if (tokenizer_->n_vocab() != hparams_.n_vocab)
        Loader(gguf_).fail("tokenizer", "vocabulary has " + std::to_string(tokenizer_->n_vocab()) +
                                            " tokens but the model has " + std::to_string(hparams_.n_vocab) + " embeddings");
}

namespace {

// An expert tensor (one slice per expert, most of a MoE file's bytes) enters the fingerprint by
// kSampleWindows windows of kSampleWindow bytes spread evenly over it: hashing it whole would read
// every expert at load (seconds for an 18 GB file, and all of it resident), where a pass reads
// only the experts its tokens choose. The pages are asked for as random reads, so the sample
// reads a page per window instead of a readahead window each.
constexpr uint64_t kSampleWindows = 64, kSampleWindow = 64;

void hash_sample(Fnv1a& h, const uint8_t* p, uint64_t n) {
    if (n <= kSampleWindows * kSampleWindow) return h.blob(p, n);
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t b = reinterpret_cast<uintptr_t>(p) / page * page, e = reinterpret_cast<uintptr_t>(p) + n;
    (void)::madvise(reinterpret_cast<void*>(b), e - b, MADV_RANDOM); // a heap copy ignores it
    h.u64(n);
    for (uint64_t i = 0; i < kSampleWindows; ++i)
        h.blob(p + (n - kSampleWindow) * i / (kSampleWindows - 1), kSampleWindow);
    (void)::madvise(reinterpret_cast<void*>(b), e - b, MADV_NORMAL);
}

} // namespace

// Hyperparameters, then every tensor (name, type, dims, bytes or their sample) in file order.
void LlamaModelFile::compute_fingerprint() {
    const LlamaHparams& hp = hparams_;
    Fnv1a h;
    h.str(hp.architecture);
    for (int64_t v : {hp.n_ctx_train, hp.n_embd, hp.n_layer, hp.n_ff, hp.n_head, hp.n_head_kv, hp.n_rot, hp.n_vocab})
        h.u64(static_cast<uint64_t>(v));
    h.f32(hp.rope_freq_base);
    h.f32(hp.rms_eps);
    // Architecture hyperparameters beyond llama's (absent from llama files, whose digest stays).
    if (hp.architecture != "llama" || hp.rope_scaling != "none") {
        for (int64_t v : {hp.n_embd_head, hp.n_swa, int64_t(hp.swa_pattern)}) h.u64(static_cast<uint64_t>(v));
        for (float f : {hp.rope_freq_scale, hp.rope_freq_base_swa, hp.attn_scale, hp.final_logit_softcap}) h.f32(f);
    }
    if (hp.is_moe()) // absent from dense files, whose digest stays
        for (int64_t v : {hp.n_expert, hp.n_expert_used, hp.n_ff_exp}) h.u64(static_cast<uint64_t>(v));
    for (const GgufTensorInfo& ti : gguf_.tensors()) {
        h.str(ti.name);
        h.u64(static_cast<uint32_t>(ti.type));
        h.u64(ti.dims.size());
        for (uint64_t d : ti.dims) h.u64(d);
        if (ti.dims.size() == 3 && ti.dims[2] > 1) hash_sample(h, ti.data, ti.n_bytes); // *_exps
        else h.blob(ti.data, ti.n_bytes);
    }
    fingerprint_ = h.value();
}

} // namespace rwd
