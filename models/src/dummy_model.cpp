// Dummy model files: shapes, llama.cpp's per-tensor type choices, and the streaming writer that
// generates each row from its own seeded generator and quantizes it with rewind's quantizers.
#include "rewind/dummy_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "rewind/arch.h"
#include "rewind/error.h"
#include "rewind/gguf_writer.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kernels/thread_pool.h"
#include "rewind/llama_model.h"

namespace rwd {

namespace {

uint64_t block_of(TensorType t) {
    uint64_t be = 0, bb = 0;
    if (!tensor_type_block(t, be, bb)) throw Error("unknown tensor type " + tensor_type_name(t));
    return be;
}

bool ends_with(const std::string& s, std::string_view tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// llama-quantize's "more bits" layers: the first and last eighth and every third in between.
bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// One row's generator: mt19937_64 (fully specified by the standard, so the same numbers on every
// platform) seeded from (seed, tensor, row).
std::mt19937_64 row_generator(uint64_t seed, uint64_t tensor, uint64_t row) {
    uint64_t h = seed * 0x9E3779B97F4A7C15ull;
    h = (h ^ (tensor + 1)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (row + 1)) * 0x94D049BB133111EBull;
    return std::mt19937_64(h ^ (h >> 31));
}

// Uniform values in [center - half, center + half): two per 64-bit draw, 24 bits each, converted
// by hand (std::uniform_real_distribution differs between standard libraries).
void fill_uniform(std::mt19937_64& g, float center, float half, float* x, int64_t n) {
    constexpr float kScale = 1.0f / 16777216.0f; // 2^-24
    int64_t i = 0;
    for (; i + 1 < n; i += 2) {
        const uint64_t b = g();
        x[i] = center + half * (2.0f * static_cast<float>(b >> 40) * kScale - 1.0f);
        x[i + 1] = center + half * (2.0f * static_cast<float>((b >> 8) & 0xFFFFFF) * kScale - 1.0f);
    }
    if (i < n) x[i] = center + half * (2.0f * static_cast<float>(g() >> 40) * kScale - 1.0f);
}

struct PlannedTensor {
    std::string name;
    int64_t rows = 1, cols = 0; // a vector: rows 1; an expert tensor: rows of all experts
    bool vector = false;
    TensorType type = TensorType::F32;
    int64_t experts = 1;        // > 1: ggml dims {cols, rows / experts, experts}
};

// The tensors of `arch` (its table in arch.cpp: every required tensor, and the head unless the
// shape ties it to the embeddings), sized by the shape.
std::vector<PlannedTensor> plan(const DummyShape& s, const ArchInfo& arch, DummyFileType ft, int64_t n_vocab) {
    const int64_t E = s.n_embd, hd = s.head_size(), Q = hd * s.n_head, KV = hd * s.n_head_kv, F = s.n_ff;
    auto dim = [&](ArchDim d) -> int64_t {
        switch (d) {
        case ArchDim::One: return 1;
        case ArchDim::Embd: return E;
        case ArchDim::Q: return Q;
        case ArchDim::KV: return KV;
        case ArchDim::QKV: return Q + 2 * KV;
        case ArchDim::Ff: return F;
        case ArchDim::Ff2: return 2 * F;
        case ArchDim::HeadDim: return hd;
        case ArchDim::RotHalf: return hd / 2;
        case ArchDim::Vocab: return n_vocab;
        case ArchDim::Expert: return s.n_expert;
        case ArchDim::FfExp: return s.n_ff_exp;
        }
        return 0;
    };
    std::vector<PlannedTensor> out;
    auto add = [&](const std::string& name, const ArchTensor& t, int64_t layer) {
        const bool vector = t.rows == ArchDim::One;
        const int64_t experts = t.experts == ArchDim::One ? 1 : dim(t.experts);
        PlannedTensor p{name, dim(t.rows) * experts, dim(t.cols), vector, TensorType::F32, experts};
        if (!vector) p.type = dummy_tensor_type(ft, name, p.cols, layer, s.n_layer, s.tied_output, s.n_expert);
        out.push_back(std::move(p));
    };
    const FfnPart skipped = s.n_expert > 0 ? FfnPart::Dense : FfnPart::Moe;
    auto wanted = [&](const ArchTensor& t) {
        if (t.part == skipped) return false;
        return t.required || (std::string_view(t.name) == "output.weight" && !s.tied_output);
    };
    for (const ArchTensor& t : arch.globals)
        if (std::string_view(t.name) == "token_embd.weight") add(t.name, t, -1);
    for (int64_t i = 0; i < s.n_layer; ++i)
        for (const ArchTensor& t : arch.layer)
            if (wanted(t)) add("blk." + std::to_string(i) + "." + t.name, t, i);
    for (const ArchTensor& t : arch.globals)
        if (std::string_view(t.name) != "token_embd.weight" && wanted(t)) add(t.name, t, -1);
    return out;
}

// The architecture written: `name`, else the shape's own, else llama; one that cannot hold the
// shape's FFN (experts or not) is refused.
const ArchInfo* dummy_arch(const DummyShape& shape, const std::string& name) {
    const std::string arch_name = !name.empty() ? name : !shape.arch.empty() ? shape.arch : "llama";
    const ArchInfo* arch = find_arch(arch_name);
    if (!arch)
        throw Error("make-dummy: unknown architecture '" + arch_name + "' (choose from " + supported_arch_names() + ")");
    if ((shape.n_expert > 0 && arch->moe == MoeUse::None) || (shape.n_expert == 0 && arch->moe == MoeUse::Required))
        throw Error("make-dummy: shape '" + shape.name + "' " + (shape.n_expert > 0 ? "has" : "has no") +
                    " experts, architecture '" + arch_name + "' " + (shape.n_expert > 0 ? "none" : "needs them"));
    return arch;
}

// The expert keys as llama.cpp's converter writes them (llama's experts are feed_forward_length wide).
void add_expert_keys(GgufWriter& w, const DummyShape& shape, const ArchInfo& arch) {
    if (shape.n_expert == 0) return;
    const std::string k = std::string(arch.name) + ".";
    w.add(k + "expert_count", static_cast<uint32_t>(shape.n_expert));
    w.add(k + "expert_used_count", static_cast<uint32_t>(shape.n_expert_used));
    if (arch.moe == MoeUse::Required) w.add(k + "expert_feed_forward_length", static_cast<uint32_t>(shape.n_ff_exp));
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

} // namespace

const std::vector<DummyShape>& dummy_shapes() {
    static const std::vector<DummyShape> shapes = {
        {"tiny", 256, 2, 4, 2, 512, 2048, 10000.0f, 1e-5f, false, "tiny test", "", 0, 0, 0, 0},
        {"llama-1b", 2048, 16, 32, 8, 8192, 131072, 500000.0f, 1e-5f, true, "Llama 3.2 1B", "", 0, 0, 0, 0},
        {"llama-3b", 3072, 28, 24, 8, 8192, 131072, 500000.0f, 1e-5f, true, "Llama 3.2 3B", "", 0, 0, 0, 0},
        {"llama-8b", 4096, 32, 32, 8, 14336, 131072, 500000.0f, 1e-5f, false, "Llama 3.1 8B", "", 0, 0, 0, 0},
        {"qwen-0.5b", 896, 24, 14, 2, 4864, 32768, 1000000.0f, 1e-6f, true, "Qwen2.5 0.5B", "", 0, 0, 0, 0},
        {"qwen-7b", 3584, 28, 28, 4, 18944, 32768, 1000000.0f, 1e-6f, false, "Qwen2.5 7B", "", 0, 0, 0, 0},
        // Qwen3-30B-A3B (and Qwen3-Coder-30B-A3B): feed_forward_length is the family's dense width.
        {"qwen3-30b-a3b", 2048, 48, 32, 4, 6144, 40960, 1000000.0f, 1e-6f, false, "Qwen3-30B-A3B", "qwen3moe", 128,
         128, 8, 768},
        // Small files with experts for the tests: heads wider than n_embd / n_head, as Qwen3's.
        {"qwen3-moe-tiny", 256, 2, 4, 2, 768, 2048, 1000000.0f, 1e-6f, false, "tiny qwen3moe test", "qwen3moe", 128,
         16, 4, 256},
        {"mixtral-tiny", 256, 2, 4, 2, 256, 2048, 1000000.0f, 1e-5f, false, "tiny Mixtral-style test", "llama", 0,
         8, 2, 256},
    };
    return shapes;
}

const DummyShape& find_dummy_shape(std::string_view name) {
    std::string names;
    for (const DummyShape& s : dummy_shapes()) {
        if (s.name == name) return s;
        names += (names.empty() ? "" : ", ") + s.name;
    }
    throw Error("unknown shape '" + std::string(name) + "' (known: " + names + ")");
}

DummyFileType parse_dummy_file_type(std::string_view name) {
    const std::string n = lower(name);
    for (DummyFileType t : {DummyFileType::F32, DummyFileType::F16, DummyFileType::BF16, DummyFileType::Q8_0,
                            DummyFileType::Q4_0, DummyFileType::Q4_K_M, DummyFileType::Q5_K_M, DummyFileType::Q6_K})
        if (n == dummy_file_type_name(t)) return t;
    throw Error("unknown type '" + std::string(name) + "' (known: f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q6_k)");
}

const char* dummy_file_type_name(DummyFileType t) {
    switch (t) {
    case DummyFileType::F32: return "f32";
    case DummyFileType::F16: return "f16";
    case DummyFileType::BF16: return "bf16";
    case DummyFileType::Q8_0: return "q8_0";
    case DummyFileType::Q4_0: return "q4_0";
    case DummyFileType::Q4_K_M: return "q4_k_m";
    case DummyFileType::Q5_K_M: return "q5_k_m";
    case DummyFileType::Q6_K: return "q6_k";
    }
    return "?";
}

TensorType dummy_tensor_type(DummyFileType ft, const std::string& name, int64_t cols, int64_t layer,
                             int64_t n_layer, bool tied_output, int64_t n_expert) {
    // The convert script keeps the router F32 and llama-quantize leaves it so.
    if (ends_with(name, "ffn_gate_inp.weight")) return TensorType::F32;
    TensorType t;
    switch (ft) {
    case DummyFileType::F32: return TensorType::F32;
    case DummyFileType::F16: return TensorType::F16;
    case DummyFileType::BF16: return TensorType::BF16;
    case DummyFileType::Q8_0: t = TensorType::Q8_0; break;
    case DummyFileType::Q4_0: t = TensorType::Q4_0; break;
    case DummyFileType::Q4_K_M: t = TensorType::Q4_K; break;
    case DummyFileType::Q5_K_M: t = TensorType::Q5_K; break;
    case DummyFileType::Q6_K: t = TensorType::Q6_K; break;
    default: throw Error("unknown file type");
    }
    const auto ucols = static_cast<uint64_t>(cols);
    const bool is_head = name == "output.weight" || (tied_output && name == "token_embd.weight");
    if (is_head) {
        if (ucols % block_of(t) != 0) t = TensorType::Q8_0;
        else if (t != TensorType::Q8_0) t = TensorType::Q6_K;
    } else if (name == "token_embd.weight") {
        // the file type's own type
    } else if (ends_with(name, "attn_v.weight") || ends_with(name, "ffn_down.weight") ||
               ends_with(name, "ffn_down_exps.weight")) {
        const bool k_m = ft == DummyFileType::Q4_K_M || ft == DummyFileType::Q5_K_M;
        if (k_m && layer >= 0 && use_more_bits(layer, n_layer)) t = TensorType::Q6_K;
    }
    // llama-quantize gives 8-expert models (Mixtral) Q8_0 keys and values.
    if (n_expert == 8 && (ends_with(name, "attn_v.weight") || ends_with(name, "attn_k.weight"))) t = TensorType::Q8_0;
    if (ucols % block_of(t) != 0) {
        switch (t) {
        case TensorType::Q4_K: t = TensorType::Q5_0; break;
        case TensorType::Q5_K: t = TensorType::Q5_1; break;
        case TensorType::Q6_K: t = TensorType::Q8_0; break;
        default:
            throw Error("tensor '" + name + "': rows of " + std::to_string(cols) + " cannot be stored as " +
                        tensor_type_name(t));
        }
        if (ucols % block_of(t) != 0) t = TensorType::F16;
    }
    return t;
}

bool dummy_can_write(TensorType t) { return tensor_dtype(t).has_value(); }

namespace {

// The header's metadata: the architecture's hyperparameters from the shape, the file type, and
// every tokenizer.* key of the vocabulary file (the chat template replaced when one is given).
void write_metadata(GgufWriter& w, const DummyShape& shape, const ArchInfo* arch, DummyFileType ft, int64_t n_vocab,
                    const GgufFile& vocab, const DummyOptions& opts) {
    const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
    const std::string k = std::string(arch->name) + "."; // every hyperparameter key carries the prefix
    w.add("general.architecture", std::string(arch->name));
    w.add("general.type", std::string("model"));
    w.add("general.name", "rewind dummy " + shape.name + " (" + shape.model_name + " shape, " + arch->name +
                              " architecture, random weights)");
    w.add(k + "block_count", u32(shape.n_layer));
    w.add(k + "context_length", u32(shape.n_ctx));
    w.add(k + "embedding_length", u32(shape.n_embd));
    w.add(k + "feed_forward_length", u32(shape.n_ff));
    w.add(k + "attention.head_count", u32(shape.n_head));
    w.add(k + "attention.head_count_kv", u32(shape.n_head_kv));
    w.add(k + "rope.freq_base", shape.rope_base);
    w.add(k + "attention.layer_norm_rms_epsilon", shape.rms_eps);
    w.add(k + "vocab_size", u32(n_vocab));
    w.add(k + "rope.dimension_count", u32(shape.head_size()));
    w.add(k + "attention.key_length", u32(shape.head_size()));
    w.add(k + "attention.value_length", u32(shape.head_size()));
    add_expert_keys(w, shape, *arch);
    // A sliding-window architecture needs its window: Gemma 3's own (1024), at most the context.
    if (arch->swa_pattern > 0) w.add(k + "attention.sliding_window", u32(std::min<int64_t>(1024, shape.n_ctx)));
    w.add("general.file_type", static_cast<uint32_t>(ft));
    if (ft != DummyFileType::F32 && ft != DummyFileType::F16 && ft != DummyFileType::BF16)
        w.add("general.quantization_version", uint32_t{2});
    for (const GgufKeyValue& kv : vocab.metadata())
        if (kv.key.rfind("tokenizer.", 0) == 0 && !(kv.key == "tokenizer.chat_template" && !opts.chat_template.empty()))
            w.add(kv);
    if (!opts.chat_template.empty()) w.add("tokenizer.chat_template", opts.chat_template);
}

// The tensors' seeded random rows, generated and quantized a block of rows at a time on the pool.
void write_weights(GgufWriter& w, const std::vector<PlannedTensor>& tensors, const DummyOptions& opts,
                   const std::function<void(uint64_t, uint64_t)>& progress, uint64_t file_bytes) {
    const int threads = opts.threads > 0 ? opts.threads : std::max(1u, std::thread::hardware_concurrency());
    ThreadPool pool(threads);
    constexpr int64_t kBlockFloats = int64_t{1} << 21; // rows generated per block: about 8 MB of floats
    std::vector<uint8_t> block;
    uint64_t done = 0;
    for (size_t ti = 0; ti < tensors.size(); ++ti) {
        const PlannedTensor& t = tensors[ti];
        const uint64_t row_bytes = GgufWriter::tensor_bytes(t.type, {static_cast<uint64_t>(t.cols)});
        const int64_t block_rows = std::clamp<int64_t>(kBlockFloats / t.cols, 1, t.rows);
        block.resize(static_cast<size_t>(block_rows * row_bytes));
        const float center = t.vector ? 1.0f : 0.0f;
        // Uniform on [-h, h) has std h / sqrt(3): h = sqrt(3 / fan-in) gives std 1 / sqrt(fan-in).
        const float half = t.vector ? 0.1f : std::sqrt(3.0f / static_cast<float>(t.cols));
        // With a row pool of N rows, rows N.. repeat rows 0..N-1, copied from the bytes kept.
        const int64_t pool_rows = opts.row_pool > 0 && opts.row_pool < t.rows ? opts.row_pool : t.rows;
        std::vector<uint8_t> pooled;
        int64_t nr = 0;
        for (int64_t r0 = 0; r0 < t.rows; r0 += nr) {
            // Blocks stop at the pool's end, so a repeat is one run of the pool's bytes.
            nr = std::min({block_rows, t.rows - r0, pool_rows - r0 % pool_rows});
            if (r0 >= pool_rows) {
                const uint64_t from = static_cast<uint64_t>(r0 % pool_rows) * row_bytes;
                w.write(pooled.data() + from, static_cast<size_t>(static_cast<uint64_t>(nr) * row_bytes));
                done += static_cast<uint64_t>(nr) * row_bytes;
                if (progress) progress(done, file_bytes);
                continue;
            }
            const DType dt = *tensor_dtype(t.type); // checked above
            auto rows_fn = [&](int64_t b, int64_t e) {
                std::vector<float> x(static_cast<size_t>(t.cols));
                for (int64_t r = b; r < e; ++r) {
                    std::mt19937_64 g = row_generator(opts.seed, ti, static_cast<uint64_t>(r0 + r));
                    fill_uniform(g, center, half, x.data(), t.cols);
                    quantize_row(dt, x.data(), t.cols, block.data() + static_cast<size_t>(r) * row_bytes);
                }
            };
            parallel_rows(&pool, nr, rows_fn);
            w.write(block.data(), static_cast<size_t>(nr) * row_bytes);
            if (pool_rows < t.rows) // the pool's rows, kept for the repeats
                pooled.insert(pooled.end(), block.begin(), block.begin() + static_cast<std::ptrdiff_t>(nr * row_bytes));
            done += static_cast<uint64_t>(nr) * row_bytes;
            if (progress) progress(done, file_bytes);
        }
    }
}

} // namespace

DummyReport write_dummy_model(const DummyOptions& opts, const std::function<void(uint64_t, uint64_t)>& progress) {
    const DummyShape& shape = find_dummy_shape(opts.shape);
    const DummyFileType ft = parse_dummy_file_type(opts.file_type);
    if (opts.out_path.empty()) throw Error("make-dummy: no output path");
    if (opts.threads < 0) throw Error("make-dummy: threads must not be negative");
    if (opts.row_pool < 0) throw Error("make-dummy: row pool must not be negative");

    // The tokenizer: every tokenizer.* key of the vocabulary file, as the convert script writes them.
    GgufFile vocab = GgufFile::open(opts.vocab_path);
    const auto tokens = vocab.get_string_array("tokenizer.ggml.tokens");
    if (!tokens || tokens->empty() || !vocab.get_string("tokenizer.ggml.model"))
        throw Error(ErrorCode::format, opts.vocab_path + ": no tokenizer (tokenizer.ggml.model and tokenizer.ggml.tokens are needed)");
    const auto n_vocab = static_cast<int64_t>(tokens->size());

    const ArchInfo* arch = dummy_arch(shape, opts.arch);
    const std::vector<PlannedTensor> tensors = plan(shape, *arch, ft, n_vocab);
    DummyReport report;
    report.n_vocab = n_vocab;
    for (const PlannedTensor& t : tensors) {
        if (!dummy_can_write(t.type))
            throw Error(ErrorCode::unsupported, "make-dummy: type " + std::string(dummy_file_type_name(ft)) + " needs a " +
                        tensor_type_name(t.type) + " quantizer (for '" + t.name + "'), which this build lacks");
        ++report.tensor_types[t.type];
        report.n_params += t.rows * t.cols;
    }

    GgufWriter w(opts.out_path);
    write_metadata(w, shape, arch, ft, n_vocab, vocab, opts);
    for (const PlannedTensor& t : tensors) {
        // [cols], [cols, rows], or [cols, rows per expert, experts] for the *_exps tensors.
        std::vector<uint64_t> dims{static_cast<uint64_t>(t.cols)};
        if (!t.vector) dims.push_back(static_cast<uint64_t>(t.rows / t.experts));
        if (t.experts > 1) dims.push_back(static_cast<uint64_t>(t.experts));
        w.add_tensor(t.name, t.type, dims);
    }
    report.file_bytes = w.file_size();
    write_weights(w, tensors, opts, progress, report.file_bytes);
    w.finish();
    return report;
}

} // namespace rwd
