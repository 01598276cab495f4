// Model::load: opens a GGUF file of a supported architecture and turns each stored weight into a kernel
// MatrixView (zero copy). Norm vectors are converted to F32 when the file stores them otherwise.
#include "rewind/model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "rewind/error.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kernels/q8_packed.h"

namespace rwd {
namespace {

// The kernels compute with these storage types; everything else is refused by name.
bool to_dtype(TensorType t, DType& out) {
    switch (t) {
    case TensorType::F32: out = DType::F32; return true;
    case TensorType::F16: out = DType::F16; return true;
    case TensorType::BF16: out = DType::BF16; return true;
    case TensorType::Q8_0: out = DType::Q8_0; return true;
    case TensorType::Q4_0: out = DType::Q4_0; return true;
    case TensorType::Q4_1: out = DType::Q4_1; return true;
    case TensorType::Q5_0: out = DType::Q5_0; return true;
    case TensorType::Q5_1: out = DType::Q5_1; return true;
    case TensorType::Q4_K: out = DType::Q4_K; return true;
    case TensorType::Q5_K: out = DType::Q5_K; return true;
    case TensorType::Q6_K: out = DType::Q6_K; return true;
    default: return false;
    }
}

std::string where(const std::string& path, const WeightRef& w) {
    return path + ": tensor '" + w.name + "'";
}

MatrixView to_matrix(const std::string& path, const WeightRef& w) {
    DType dt{};
    if (!to_dtype(w.type, dt))
        throw Error(ErrorCode::unsupported, where(path, w) + ": type " + tensor_type_name(w.type) +
                    " is not supported (rewind computes with F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, "
                    "Q5_K and Q6_K)");
    if (w.data == nullptr || w.rows <= 0 || w.cols <= 0)
        throw Error(ErrorCode::format, where(path, w) + ": empty or missing data");
    if (w.cols % dtype_block_size(dt) != 0)
        throw Error(ErrorCode::shape, where(path, w) + ": " + dtype_name(dt) + " rows of " + std::to_string(w.cols) +
                    " elements are not a multiple of " + std::to_string(dtype_block_size(dt)));
    const uint64_t need = static_cast<uint64_t>(dtype_row_bytes(dt, w.cols)) * static_cast<uint64_t>(w.rows);
    if (w.n_bytes < need)
        throw Error(ErrorCode::format, where(path, w) + ": holds " + std::to_string(w.n_bytes) + " bytes, its shape needs " +
                    std::to_string(need));
    return MatrixView{dt, w.data, w.rows, w.cols};
}

// Drops the pages of [p, p + n) from this process's memory; they come back from the file if
// touched again. MADV_PAGEOUT keeps data in every kind of mapping (never zero-fills), so this is
// safe even if the weights were not file-backed; failure only means the memory stays resident.
void release_pages(const void* p, size_t n) {
#ifdef MADV_PAGEOUT
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto b = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
    const auto e = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
    if (e > b) (void)::madvise(reinterpret_cast<void*>(b), e - b, MADV_PAGEOUT);
#else
    (void)p;
    (void)n;
#endif
}

} // namespace

void Model::FreeDeleter::operator()(std::byte* p) const { std::free(p); }

namespace {

// Repacks every Q8_0 matrix in `mats` into one owned allocation and points their views at it.
std::byte* repack_all(const std::vector<MatrixView*>& mats, uint64_t& total) {
    total = 0;
    for (const MatrixView* w : mats) total += q8_0_packed_bytes(w->rows, w->cols);
    if (total == 0) return nullptr;
    std::unique_ptr<std::byte, void (*)(void*)> owner(
        static_cast<std::byte*>(std::aligned_alloc(64, size_t((total + 63) / 64 * 64))), std::free);
    std::byte* mem = owner.get();
    if (!mem) throw Error(ErrorCode::capacity, "Model::load: cannot allocate " + std::to_string(total) + " bytes for repacked weights");
    size_t off = 0;
    for (MatrixView* w : mats) {
        const size_t n = q8_0_packed_bytes(w->rows, w->cols);
        repack_q8_0(*w, {mem + off, n});
        w->packed = mem + off;
        off += n;
        // The original is not read again (a tied output head's token rows come back from the
        // file one at a time), so its pages leave memory now: resident memory is replaced, not
        // doubled, and peaks at the packed copy plus one matrix.
        release_pages(w->data, dtype_row_bytes(w->type, w->cols) * static_cast<size_t>(w->rows));
    }
    return owner.release();
}

} // namespace

std::shared_ptr<const Model> Model::load(const std::string& path, const ModelOptions& opts) {
    return from_file(LlamaModelFile::open(path), opts);
}

std::shared_ptr<const Model> Model::load_from_memory(const std::string& name, std::span<const uint8_t> bytes,
                                                     const ModelOptions& opts) {
    return from_file(LlamaModelFile::from_memory(name, bytes), opts);
}

std::shared_ptr<const Model> Model::from_file(std::unique_ptr<LlamaModelFile> file, const ModelOptions& opts) {
    auto m = std::make_shared<Model>();
    m->opts_ = opts;
    m->file_ = std::move(file);
    const std::string path = m->file_->gguf().path();
    const LlamaHparams& hp = m->file_->hparams();
    const LlamaWeights& w = m->file_->weights();
    const int64_t n_embd = hp.n_embd;

    if (hp.n_embd <= 0 || hp.n_head <= 0 || hp.n_head_kv <= 0 || hp.n_layer <= 0 || hp.n_ff <= 0 ||
        hp.n_vocab <= 0 || hp.n_ctx_train <= 0)
        throw Error(ErrorCode::format, path + ": hyperparameters must all be positive");
    if (hp.head_dim() <= 0 || hp.n_head % hp.n_head_kv != 0)
        throw Error(ErrorCode::format, path + ": the head dimension must be positive and n_head divide by n_head_kv");
    if (hp.n_rot <= 0 || hp.n_rot % 2 != 0 || hp.n_rot > hp.head_dim())
        throw Error(ErrorCode::format, path + ": rope dimension " + std::to_string(hp.n_rot) +
                    " must be even, positive and at most the head size " + std::to_string(hp.head_dim()));
    if (m->file_->tokenizer().n_vocab() != hp.n_vocab)
        throw Error(ErrorCode::shape, path + ": tokenizer has " + std::to_string(m->file_->tokenizer().n_vocab()) +
                    " tokens, the model " + std::to_string(hp.n_vocab));

    // Norms: pointers straight into the mapping when F32, else an owned F32 copy. owned_ is
    // reserved up front so the copies never move once a pointer to them is handed out.
    m->owned_.reserve(10 * static_cast<size_t>(hp.n_layer) + 2);
    // A vector of `len` floats (norm weights, biases, rope factors), or null when absent.
    auto vec = [&](const WeightRef& r, int64_t len) -> const float* {
        if (r.data == nullptr && r.name.empty()) return nullptr;
        if (r.rows * r.cols != len || r.data == nullptr)
            throw Error(ErrorCode::shape, where(path, r) + ": a vector of " + std::to_string(len) + " elements was expected");
        if (r.type == TensorType::F32) return static_cast<const float*>(r.data);
        DType dt{};
        if (!to_dtype(r.type, dt) || dt == DType::Q8_0)
            throw Error(ErrorCode::unsupported, where(path, r) + ": vector of type " + tensor_type_name(r.type) +
                        " cannot be converted (F32, F16 or BF16 expected)");
        std::vector<float> f(static_cast<size_t>(len));
        dequantize_row(dt, r.data, len, f.data());
        m->owned_.push_back(std::move(f));
        return m->owned_.back().data();
    };
    auto norm = [&](const WeightRef& r) -> const float* {
        if (r.rows * r.cols != n_embd || r.data == nullptr)
            throw Error(ErrorCode::shape, where(path, r) + ": a norm of " + std::to_string(n_embd) + " elements was expected");
        if (r.type == TensorType::F32) return static_cast<const float*>(r.data);
        DType dt{};
        if (!to_dtype(r.type, dt) || dtype_block_size(dt) != 1)
            throw Error(ErrorCode::unsupported, where(path, r) + ": norm of type " + tensor_type_name(r.type) +
                        " cannot be converted (F32, F16 or BF16 expected)");
        std::vector<float> f(static_cast<size_t>(n_embd));
        dequantize_row(dt, r.data, n_embd, f.data());
        m->owned_.push_back(std::move(f));
        return m->owned_.back().data();
    };

    m->tok_embd = to_matrix(path, w.tok_embd);
    m->output = to_matrix(path, w.output);
    m->output_norm = norm(w.output_norm);
    m->rope_freqs = vec(w.rope_freqs, hp.n_rot / 2);
    if (m->rope_freqs)
        for (int64_t i = 0; i < hp.n_rot / 2; ++i)
            if (!(m->rope_freqs[i] > 0.0f) || !std::isfinite(m->rope_freqs[i]))
                throw Error(ErrorCode::format, where(path, w.rope_freqs) + ": factor " + std::to_string(i) + " is not a positive finite number");
    if (m->tok_embd.rows != hp.n_vocab || m->tok_embd.cols != n_embd || m->output.rows != hp.n_vocab ||
        m->output.cols != n_embd)
        throw Error(ErrorCode::shape, path + ": token embedding / output head shapes do not match [n_vocab, n_embd]");
    if (static_cast<int64_t>(w.layers.size()) != hp.n_layer)
        throw Error(ErrorCode::format, path + ": " + std::to_string(w.layers.size()) + " layers of weights for block_count " +
                    std::to_string(hp.n_layer));

    const int64_t n_embd_kv = hp.n_embd_kv(), n_embd_q = hp.n_embd_q(), hd = hp.head_dim();
    m->layers.reserve(w.layers.size());
    // An optional matrix: empty when the architecture has none there.
    auto opt_matrix = [&](const WeightRef& r) { return r.data ? to_matrix(path, r) : MatrixView{}; };
    for (const LlamaLayerWeights& lw : w.layers) {
        Layer l{};
        l.attn_norm = norm(lw.attn_norm);
        l.ffn_norm = norm(lw.ffn_norm);
        l.post_attn_norm = vec(lw.post_attn_norm, n_embd);
        l.post_ffn_norm = vec(lw.post_ffn_norm, n_embd);
        l.bq = vec(lw.bq, n_embd_q);
        l.bk = vec(lw.bk, n_embd_kv);
        l.bv = vec(lw.bv, n_embd_kv);
        l.q_norm = vec(lw.attn_q_norm, hd);
        l.k_norm = vec(lw.attn_k_norm, hd);
        l.wq = opt_matrix(lw.wq);
        l.wk = opt_matrix(lw.wk);
        l.wv = opt_matrix(lw.wv);
        l.wqkv = opt_matrix(lw.wqkv);
        l.wo = to_matrix(path, lw.wo);
        l.ffn_gate = opt_matrix(lw.ffn_gate);
        l.ffn_down = to_matrix(path, lw.ffn_down);
        l.ffn_up = to_matrix(path, lw.ffn_up);
        auto expect = [&](const WeightRef& r, const MatrixView& v, int64_t rows, int64_t cols) {
            if (v.rows != rows || v.cols != cols)
                throw Error(ErrorCode::shape, where(path, r) + ": shape [" + std::to_string(v.rows) + ", " + std::to_string(v.cols) +
                            "], expected [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
        };
        if (l.wqkv.data) {
            expect(lw.wqkv, l.wqkv, n_embd_q + 2 * n_embd_kv, n_embd);
        } else {
            if (!l.wq.data || !l.wk.data || !l.wv.data)
                throw Error(ErrorCode::format, path + ": a layer has neither attn_qkv nor all of attn_q, attn_k, attn_v");
            expect(lw.wq, l.wq, n_embd_q, n_embd);
            expect(lw.wk, l.wk, n_embd_kv, n_embd);
            expect(lw.wv, l.wv, n_embd_kv, n_embd);
        }
        expect(lw.wo, l.wo, n_embd, n_embd_q);
        expect(lw.ffn_up, l.ffn_up, l.ffn_gate.data ? hp.n_ff : 2 * hp.n_ff, n_embd);
        if (l.ffn_gate.data) expect(lw.ffn_gate, l.ffn_gate, hp.n_ff, n_embd);
        expect(lw.ffn_down, l.ffn_down, n_embd, hp.n_ff);
        m->layers.push_back(l);
    }

    if (opts.repack_q8_0) {
        std::vector<MatrixView*> mats;
        for (Layer& l : m->layers)
            for (MatrixView* v : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.ffn_gate, &l.ffn_down, &l.ffn_up})
                if (v->data && v->type == DType::Q8_0) mats.push_back(v); // absent ones have no data
        if (m->output.type == DType::Q8_0) mats.push_back(&m->output);
        m->packed_.reset(repack_all(mats, m->packed_bytes_));
    }
    return m;
}

const std::string& Model::path() const { return file_->gguf().path(); }

} // namespace rwd
