// A model ready to run: the GGUF file, its hyperparameters, tokenizer and weights as kernel
// matrix views. Immutable after load, shared (read-only) by any number of contexts. Which
// optional weights are present follows the architecture (rewind/arch.h); absent ones are null.
// Threads: a loaded Model, with its tokenizer and weights, is never written after load(): any
// number of threads may use one at once (each with its own Context and KvCache). Loading is
// thread-safe too (no process-global state).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rewind/kernels/dtype.h"
#include "rewind/llama_model.h"
#include "rewind/tokenizer.h"

namespace rwd {

class ThreadPool;
namespace detail {
class ExpertPack;
}

// How Model::load prepares the weights.
struct ModelOptions {
    // Repack Q8_0, Q4_K, Q5_K and Q6_K matrices (not the token embedding, read one row at a time) into
    // the row-interleaved layouts of kernels/packed.h (q8_packed.h, kq_packed.h), so a pass unpacks each
    // weight block once, vectorised across rows, for all its tokens. The packed copy lives in
    // memory the model owns (Q8_0: about the size of the tensors; Q4_K +2.8 %, Q5_K +2.3 %, Q6_K +1 %); the
    // mapped originals are then released from memory (madvise), so resident memory is replaced,
    // not doubled. Costs a pass over those weights at load. Changes the Q8_0 products' reduction
    // order (still the same bits for a token whatever the pass size and thread count, and across
    // SIMD levels); the K-quants give exactly the bits of the file's layout. False keeps every
    // matrix in the file's layout. Q5_0 matrices (llama-quantize's
    // fallback in Q4_K_M files for rows that are not whole super-blocks, e.g. Qwen2.5-0.5B's 896)
    // are widened into the packed Q8_0 layout too: +55 % of their bytes, the same bits as the file's
    // layout, and their products run at the packed Q8_0 bodies' speed; so are Q5_1 matrices (the
    // fallback in Q5_K_M files), +50 %.
    bool repack = true;
    // With repack, widen Q4_0 and Q4_1 matrices the same way: the same bits, +89 % / +80 % of
    // their bytes (a Q4_0 file nearly doubles in memory), so only when asked.
    bool widen_q4 = false;
    // Threads for the repacking at load (their own, gone when load returns); 0: the hardware's,
    // at most 8. The packed bytes are the same for any count. Negative: rwd::Error (argument).
    int load_threads = 0;
};

// Whether Model::load with `opts` repacks a matrix of type t (rows of whole blocks; not the token
// embedding): the one statement of that policy, which `rewind inspect` reports.
bool repacked_at_load(DType t, const ModelOptions& opts);

class Model {
public:
    struct Layer {
        const float* attn_norm = nullptr; // [n_embd]
        MatrixView wq, wk, wv, wo;         // wq: [n_embd_q, n_embd]; wk, wv: [n_embd_kv, n_embd]; wo: [n_embd, n_embd_q]
        MatrixView wqkv;                   // [n_embd_q + 2 n_embd_kv, n_embd] when fused (then wq/wk/wv empty)
        const float* bq = nullptr;         // [n_embd_q] biases, or null
        const float* bk = nullptr;         // [n_embd_kv]
        const float* bv = nullptr;         // [n_embd_kv]
        const float* q_norm = nullptr;     // [head_dim] per-head RMSNorm weights, or null
        const float* k_norm = nullptr;     // [head_dim]
        const float* post_attn_norm = nullptr; // [n_embd] or null
        MatrixView ffn_gate, ffn_down, ffn_up; // gate, up: [n_ff, n_embd] (fused: gate empty, up [2 n_ff, n_embd]); down: [n_embd, n_ff]
        const float* ffn_norm = nullptr;  // [n_embd]
        const float* post_ffn_norm = nullptr; // [n_embd] or null
        // Files with experts (then ffn_gate/up/down are empty): the router and one matrix per
        // expert, each a slice of the file's 3-D tensor in the file's layout (never repacked
        // here: Model::expert gives the form products read, packed on first use).
        MatrixView ffn_gate_inp;               // [n_expert, n_embd]
        std::vector<MatrixView> gate_exps, up_exps; // [n_expert] of [n_ff_exp, n_embd]
        std::vector<MatrixView> down_exps;     // [n_expert] of [n_embd, n_ff_exp]
        bool is_moe() const { return !gate_exps.empty(); }
    };

    // One expert's three matrices in the form products read: packed copies where their type is
    // repacked (repacked_at_load), else the file's slices. They live as long as the Model.
    struct ExpertWeights {
        const MatrixView* gate = nullptr; // [n_ff_exp, n_embd]
        const MatrixView* up = nullptr;   // [n_ff_exp, n_embd]
        const MatrixView* down = nullptr; // [n_embd, n_ff_exp]
    };

    Model();
    ~Model();
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    // Loads a GGUF file of a supported architecture (llama, qwen2, qwen3, phi3, gemma3, qwen3moe). Throws
    // rwd::Error naming the file and tensor when a weight has a type the kernels cannot compute
    // with (llama_weight_type_supported), or when a shape or hyperparameter makes the model
    // impossible to run. Codes: those of LlamaModelFile::open (io, format, shape, unsupported);
    // capacity when memory for the repacked weights cannot be allocated.
    static std::shared_ptr<const Model> load(const std::string& path, const ModelOptions& opts = {});
    // The same checks over a GGUF file held in memory (copied); `name` stands for the path.
    // (Bytes first, then their name: the order of KvCache::load_from_memory too.)
    static std::shared_ptr<const Model> load_from_memory(std::span<const std::byte> bytes, const std::string& name,
                                                         const ModelOptions& opts = {});

    const ModelOptions& options() const { return opts_; }
    // Bytes of weights repacked into memory the model owns at load (0 when nothing was repacked;
    // experts are not among them: see expert()).
    uint64_t packed_bytes() const { return packed_bytes_; }

    // Expert e (0..n_expert-1) of layer il (0..n_layer-1, a layer with experts), ready to multiply.
    // Experts are repacked lazily: load only reserves address space for their packed copies, and
    // the first call for an expert whose type is repacked writes its copy (over `pool`, may be
    // null) and releases the file's pages of it, so experts no pass routes to are never read
    // or made resident. Thread-safe: concurrent first calls pack once, the others wait; later calls
    // cost one atomic load and allocate nothing. The packed bits are those of the file's layout's
    // products (the K-quants) or of packing at load (Q8_0). Throws rwd::Error (argument) for
    // indices out of range.
    ExpertWeights expert(int64_t il, int64_t e, ThreadPool* pool = nullptr) const;
    // Whether expert e of layer il has been packed (false when its types are not repacked).
    // Throws as expert().
    bool expert_packed(int64_t il, int64_t e) const;
    // The memory expert e of layer il's packed copy occupies, whole pages (its residency is that
    // expert's alone); empty when none of its matrices is repacked. Throws as expert().
    std::span<const std::byte> expert_packed_bytes(int64_t il, int64_t e) const;

    const std::string& path() const;
    const LlamaHparams& hparams() const { return file_->hparams(); }
    const Tokenizer& tokenizer() const { return file_->tokenizer(); }
    const LlamaModelFile& file() const { return *file_; }
    uint64_t fingerprint() const { return file_->fingerprint(); }
    int64_t n_vocab() const { return hparams().n_vocab; }

    MatrixView tok_embd;       // [n_vocab, n_embd]
    const float* output_norm = nullptr; // [n_embd]
    MatrixView output;         // [n_vocab, n_embd]
    const float* rope_freqs = nullptr; // [n_rot / 2] rope frequency factors, or null
    std::vector<Layer> layers;

private:
    // mapped: the file's bytes are a read-only mapping of it (load), not a copy (load_from_memory).
    static std::shared_ptr<const Model> from_file(std::unique_ptr<LlamaModelFile> file, const ModelOptions& opts,
                                                  bool mapped);
    std::unique_ptr<LlamaModelFile> file_;
    struct FreeDeleter {
        void operator()(std::byte* p) const;
    };
    std::unique_ptr<std::byte, FreeDeleter> packed_; // every repacked matrix, 64-byte aligned
    uint64_t packed_bytes_ = 0;
    std::unique_ptr<detail::ExpertPack> experts_; // null without experts or repacking
    ModelOptions opts_;
};

} // namespace rwd
