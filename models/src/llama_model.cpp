// Llama model files: reads `llama.*` hyperparameters, checks them for consistency, binds every
// weight tensor (shape and type checked), builds the tokenizer and fingerprints the whole model.
#include "rewind/llama_model.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

namespace rwd {

namespace {

constexpr int64_t kMaxHparam = std::numeric_limits<int32_t>::max();

// FNV-1a, 64-bit. Tensor bytes go through four interleaved lanes of 8-byte words so that the
// multiply chains overlap (one lane is latency bound); lanes fold back into the main state.
class Fnv1a {
public:
    static constexpr uint64_t kBasis = 0xcbf29ce484222325ull;
    static constexpr uint64_t kPrime = 0x100000001b3ull;

    void bytes(const void* data, size_t n) {
        const auto* p = static_cast<const uint8_t*>(data);
        for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * kPrime;
    }
    void u64(uint64_t v) {
        uint8_t b[8];
        for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i)); // fixed byte order
        bytes(b, 8);
    }
    void str(const std::string& s) {
        u64(s.size());
        bytes(s.data(), s.size());
    }
    void f32(float f) { u64(std::bit_cast<uint32_t>(f)); }

    void blob(const uint8_t* p, uint64_t n) {
        u64(n);
        uint64_t lane[4] = {h_, h_ ^ 1, h_ ^ 2, h_ ^ 3};
        uint64_t i = 0;
        for (; i + 32 <= n; i += 32)
            for (int l = 0; l < 4; ++l) lane[l] = (lane[l] ^ word(p + i + 8 * l)) * kPrime;
        for (int l = 0; l < 4; ++l) u64(lane[l]);
        bytes(p + i, static_cast<size_t>(n - i));
    }

    uint64_t value() const { return h_; }

private:
    static uint64_t word(const uint8_t* p) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        if constexpr (std::endian::native == std::endian::big) {
            uint64_t r = 0;
            for (int i = 0; i < 8; ++i) r = (r << 8) | ((v >> (8 * i)) & 0xff);
            v = r;
        }
        return v;
    }
    uint64_t h_ = kBasis;
};

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

    // Binds tensor `name`, requiring ggml dims == {cols, rows} (or {cols} for a vector).
    WeightRef bind(const std::string& name, int64_t rows, int64_t cols, bool vector, bool required = true) {
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
        return w;
    }

    void check_all_used() const {
        for (const GgufTensorInfo& ti : g_.tensors())
            if (!used_.count(ti.name))
                fail("tensor '" + ti.name + "'", "unexpected tensor (not part of the llama layout this build supports)",
                     ErrorCode::unsupported);
    }

private:
    const GgufFile& g_;
    std::set<std::string> used_;
};

} // namespace

bool llama_weight_type_supported(TensorType t) {
    switch (t) {
    case TensorType::F32: case TensorType::F16: case TensorType::BF16: case TensorType::Q8_0:
    case TensorType::Q4_0: case TensorType::Q4_1: case TensorType::Q5_0: case TensorType::Q5_1:
    case TensorType::Q4_K: case TensorType::Q5_K: case TensorType::Q6_K: return true;
    default: return false;
    }
}

std::unique_ptr<LlamaModelFile> LlamaModelFile::open(const std::string& path) {
    GgufFile gguf = GgufFile::open(path);
    if (gguf.tensors().empty())
        throw Error(ErrorCode::format, path + ": no tensors: this is a vocabulary-only GGUF file, not a model "
                           "(use `rewind inspect` to look at it)");
    std::unique_ptr<LlamaModelFile> mf(new LlamaModelFile(std::move(gguf)));
    const GgufFile& g = mf->gguf_;
    Loader ld(g);

    LlamaHparams& hp = mf->hparams_;
    std::optional<std::string> arch = g.get_string("general.architecture");
    if (!arch) ld.fail("metadata 'general.architecture'", "required key is missing");
    if (*arch != "llama")
        ld.fail("metadata 'general.architecture'", "unsupported architecture '" + *arch + "' (expected 'llama')",
                ErrorCode::unsupported);
    hp.architecture = *arch;
    hp.name = g.get_string("general.name").value_or("");
    hp.n_ctx_train = ld.positive("llama.context_length");
    hp.n_embd = ld.positive("llama.embedding_length");
    hp.n_layer = ld.positive("llama.block_count");
    hp.n_ff = ld.positive("llama.feed_forward_length");
    hp.n_head = ld.positive("llama.attention.head_count");
    hp.n_head_kv = ld.positive("llama.attention.head_count_kv", hp.n_head);
    if (hp.n_embd % hp.n_head != 0)
        ld.fail("metadata 'llama.attention.head_count'",
                "embedding length " + std::to_string(hp.n_embd) + " is not divisible by " +
                    std::to_string(hp.n_head) + " heads");
    if (hp.n_head % hp.n_head_kv != 0)
        ld.fail("metadata 'llama.attention.head_count_kv'",
                std::to_string(hp.n_head) + " heads are not divisible by " + std::to_string(hp.n_head_kv) +
                    " KV heads");
    hp.n_rot = ld.positive("llama.rope.dimension_count", hp.head_dim());
    if (hp.n_rot > hp.head_dim() || hp.n_rot % 2 != 0)
        ld.fail("metadata 'llama.rope.dimension_count'",
                "value " + std::to_string(hp.n_rot) + " must be even and at most the head dimension " +
                    std::to_string(hp.head_dim()));
    hp.rope_freq_base = ld.positive_float("llama.rope.freq_base", 10000.0f);
    hp.rms_eps = ld.positive_float("llama.attention.layer_norm_rms_epsilon", 1e-5f);

    if (g.find("llama.vocab_size")) {
        hp.n_vocab = ld.positive("llama.vocab_size");
    } else {
        const GgufKeyValue* tokens = g.find("tokenizer.ggml.tokens");
        if (!tokens)
            ld.fail("metadata 'llama.vocab_size'", "missing, and there is no 'tokenizer.ggml.tokens' to count");
        if (tokens->type != GgufValueType::Array ||
            std::get<std::shared_ptr<GgufArray>>(tokens->value)->type != GgufValueType::String)
            ld.fail("metadata 'tokenizer.ggml.tokens'", "expected an array of string");
        size_t n = std::get<std::shared_ptr<GgufArray>>(tokens->value)->values.size();
        if (n == 0 || n > static_cast<size_t>(kMaxHparam))
            ld.fail("metadata 'tokenizer.ggml.tokens'", "vocabulary size " + std::to_string(n) + " out of range");
        hp.n_vocab = static_cast<int64_t>(n);
    }

    // Weights. Shapes in ggml order are {cols (inputs), rows (outputs)}.
    LlamaWeights& w = mf->weights_;
    const int64_t E = hp.n_embd, KV = hp.n_embd_kv(), F = hp.n_ff, V = hp.n_vocab;
    w.tok_embd = ld.bind("token_embd.weight", V, E, false);
    w.output_norm = ld.bind("output_norm.weight", 1, E, true);
    w.output = ld.bind("output.weight", V, E, false, /*required=*/false);
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
    w.layers.resize(static_cast<size_t>(hp.n_layer));
    for (int64_t i = 0; i < hp.n_layer; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        LlamaLayerWeights& l = w.layers[static_cast<size_t>(i)];
        l.attn_norm = ld.bind(p + "attn_norm.weight", 1, E, true);
        l.wq = ld.bind(p + "attn_q.weight", E, E, false);
        l.wk = ld.bind(p + "attn_k.weight", KV, E, false);
        l.wv = ld.bind(p + "attn_v.weight", KV, E, false);
        l.wo = ld.bind(p + "attn_output.weight", E, E, false);
        l.ffn_norm = ld.bind(p + "ffn_norm.weight", 1, E, true);
        l.ffn_gate = ld.bind(p + "ffn_gate.weight", F, E, false);
        l.ffn_down = ld.bind(p + "ffn_down.weight", E, F, false);
        l.ffn_up = ld.bind(p + "ffn_up.weight", F, E, false);
    }
    ld.check_all_used();

    try {
        mf->tokenizer_ = Tokenizer::from_gguf(g);
    } catch (const Error& e) {
        // Make sure the file is named even if the tokenizer's message does not say it.
        std::string msg = e.what();
        if (msg.rfind(path, 0) == 0) throw;
        throw Error(e.code(), path + ": tokenizer: " + msg);
    }
    if (mf->tokenizer_->n_vocab() != hp.n_vocab)
        ld.fail("tokenizer", "vocabulary has " + std::to_string(mf->tokenizer_->n_vocab()) +
                                 " tokens but the model has " + std::to_string(hp.n_vocab) + " embeddings");

    // Fingerprint: hyperparameters, then every tensor (name, type, dims, bytes) in file order.
    Fnv1a h;
    h.str(hp.architecture);
    for (int64_t v : {hp.n_ctx_train, hp.n_embd, hp.n_layer, hp.n_ff, hp.n_head, hp.n_head_kv, hp.n_rot, hp.n_vocab})
        h.u64(static_cast<uint64_t>(v));
    h.f32(hp.rope_freq_base);
    h.f32(hp.rms_eps);
    for (const GgufTensorInfo& ti : g.tensors()) {
        h.str(ti.name);
        h.u64(static_cast<uint32_t>(ti.type));
        h.u64(ti.dims.size());
        for (uint64_t d : ti.dims) h.u64(d);
        h.blob(ti.data, ti.n_bytes);
    }
    mf->fingerprint_ = h.value();
    return mf;
}

} // namespace rwd
