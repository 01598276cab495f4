// Model::load: opens a GGUF file of a supported architecture and turns each stored weight into a kernel
// MatrixView (zero copy). LlamaModelFile has already checked every hyperparameter, tensor shape,
// type and alignment against the architecture (rewind/arch.h); nothing is checked twice here.
#include "rewind/model.h"


#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "rewind/error.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kernels/packed.h"
#include "expert_pack.h"
#include "huge_pages.h"

namespace rwd {
namespace {

// A weight as the kernels see it. LlamaModelFile admitted only types tensor_dtype() names, with
// shapes, sizes and alignment checked.
MatrixView to_matrix(const WeightRef& w) { return MatrixView{tensor_dtype(w.type).value(), w.data, w.rows, w.cols}; }

// A vector weight (norm, bias, rope factors): F32 and of its architecture's length, as
// LlamaModelFile checked; null when the architecture or the file has none.
const float* to_vector(const WeightRef& w) { return static_cast<const float*>(w.data); }

// The experts of a 3-D tensor, one matrix each (n_bytes is a whole number of slices: the loader
// checked the dims), or none when the file has no such tensor.
std::vector<MatrixView> expert_matrices(const WeightRef& w) {
    std::vector<MatrixView> out;
    if (!w.data) return out;
    const uint64_t slice = w.n_bytes / static_cast<uint64_t>(w.experts);
    for (int64_t e = 0; e < w.experts; ++e)
        out.push_back(MatrixView{tensor_dtype(w.type).value(), static_cast<const std::byte*>(w.data) + e * slice,
                                 w.rows, w.cols});
    return out;
}

std::string where(const std::string& path, const WeightRef& w) { return path + ": tensor '" + w.name + "'"; }

} // namespace

void Model::FreeDeleter::operator()(std::byte* p) const { std::free(p); }

namespace {

// Rows per slice of a large matrix's repacking: whole groups of 16 rows (both packed layouts),
// 64 groups at a time so that every slice's packed bytes are a multiple of 64 (the destination
// alignment repack() needs) whatever the group size.
constexpr int64_t kSliceRowUnit = 1024;
// Source bytes per slice, about: the most file pages resident beside the packed copy.
constexpr size_t kSliceBytes = size_t{16} << 20;

// Repacks w into dst (its packed_bytes) and drops its file pages. The original is not read again
// (a tied output head's token rows come back from the file one at a time), so resident memory is
// replaced, not doubled. A large matrix goes in slices of whole row groups, each released once
// packed: the packed form is group by group, so a slice packs into the bytes the whole would put
// there, and a 128k-row head (280 MB in Q8_0) never sits in memory twice.
void repack_releasing(const MatrixView& w, std::span<std::byte> dst, ThreadPool* pool, bool mapped) {
    const size_t row_bytes = dtype_row_bytes(w.type, w.cols);
    const int64_t units = std::max<int64_t>(1, int64_t(kSliceBytes / (row_bytes * size_t(kSliceRowUnit))));
    const int64_t step = units * kSliceRowUnit;
    const auto* src = static_cast<const std::byte*>(w.data);
    size_t off = 0;
    for (int64_t r = 0; r < w.rows; r += step) {
        const int64_t n = std::min(step, w.rows - r);
        const MatrixView part{w.type, src + size_t(r) * row_bytes, n, w.cols};
        const size_t bytes = packed_bytes(w.type, n, w.cols);
        repack(part, dst.subspan(off, bytes), pool);
        off += bytes;
        // From the matrix's start: a page shared by two slices goes with the second.
        detail::release_pages(src, size_t(r + n) * row_bytes, mapped);
    }
}

// Repacks every matrix in `mats` (packable types: packed.h) into one owned allocation and
// points their views at it.
std::byte* repack_all(const std::vector<MatrixView*>& mats, uint64_t& total, int threads, bool mapped) {
    total = 0;
    for (const MatrixView* w : mats) total += packed_bytes(w->type, w->rows, w->cols);
    if (total == 0) return nullptr;
    // 2 MiB-aligned and advised as huge pages before the first write: a decode pass streams the
    // whole copy (1.3 GB for a 1B Q8_0 model), and with 4 KiB pages that is a TLB miss and a page
    // walk every 4 KiB. THP set to `never` only leaves the small pages.
    detail::HugeBytes owner = detail::alloc_huge(size_t(total));
    std::byte* mem = owner.get();
    if (!mem) throw Error(ErrorCode::capacity, "Model::load: cannot allocate " + std::to_string(total) + " bytes for repacked weights");
    // Threads of their own for the one pass over the weights (and the first touch of the copy's
    // pages, which the kernel zeroes): gone before Model::load returns, so they never compete with
    // a context's pool. A group's packed bytes do not depend on who writes them.
    std::unique_ptr<ThreadPool> pool;
    if (threads > 1) pool = std::make_unique<ThreadPool>(threads);
    size_t off = 0;
    for (MatrixView* w : mats) {
        const size_t n = packed_bytes(w->type, w->rows, w->cols); // a multiple of 64
        repack_releasing(*w, {mem + off, n}, pool.get(), mapped);
        w->packed = mem + off;
        off += n;
    }
    return owner.release();
}

} // namespace

bool repacked_at_load(DType t, const ModelOptions& opts) {
    if (!opts.repack) return false;
    const bool four = t == DType::Q4_0 || t == DType::Q4_1;
    return packable(t) && (!four || opts.widen_q4);
}

std::shared_ptr<const Model> Model::load(const std::string& path, const ModelOptions& opts) {
    return from_file(LlamaModelFile::open(path), opts, /*mapped=*/true);
}

std::shared_ptr<const Model> Model::load_from_memory(std::span<const std::byte> bytes, const std::string& name,
                                                     const ModelOptions& opts) {
    const std::span<const uint8_t> raw(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    return from_file(LlamaModelFile::from_memory(name, raw), opts, /*mapped=*/false);
}

std::shared_ptr<const Model> Model::from_file(std::unique_ptr<LlamaModelFile> file, const ModelOptions& opts,
                                             bool mapped) {
    auto m = std::make_shared<Model>();
    m->opts_ = opts;
    m->file_ = std::move(file);
    const std::string& path = m->file_->gguf().path();
    const LlamaHparams& hp = m->file_->hparams();
    const LlamaWeights& w = m->file_->weights();

    m->tok_embd = to_matrix(w.tok_embd);
    m->output = to_matrix(w.output);
    m->output_norm = to_vector(w.output_norm);
    m->rope_freqs = to_vector(w.rope_freqs);
    // The factors' values are data, not shape: the loader does not read them.
    if (m->rope_freqs)
        for (int64_t i = 0; i < hp.n_rot / 2; ++i)
            if (!(m->rope_freqs[i] > 0.0f) || !std::isfinite(m->rope_freqs[i]))
                throw Error(ErrorCode::format, where(path, w.rope_freqs) + ": factor " + std::to_string(i) + " is not a positive finite number");

    m->layers.reserve(w.layers.size());
    // Optional matrices (fused QKV, ffn_gate) stay empty when the architecture has none there.
    auto opt_matrix = [](const WeightRef& r) { return r.data ? to_matrix(r) : MatrixView{}; };
    for (const LlamaLayerWeights& lw : w.layers) {
        Layer l{};
        l.attn_norm = to_vector(lw.attn_norm);
        l.ffn_norm = to_vector(lw.ffn_norm);
        l.post_attn_norm = to_vector(lw.post_attn_norm);
        l.post_ffn_norm = to_vector(lw.post_ffn_norm);
        l.bq = to_vector(lw.bq);
        l.bk = to_vector(lw.bk);
        l.bv = to_vector(lw.bv);
        l.q_norm = to_vector(lw.attn_q_norm);
        l.k_norm = to_vector(lw.attn_k_norm);
        l.wq = opt_matrix(lw.wq);
        l.wk = opt_matrix(lw.wk);
        l.wv = opt_matrix(lw.wv);
        l.wqkv = opt_matrix(lw.wqkv);
        l.wo = to_matrix(lw.wo);
        l.ffn_gate = opt_matrix(lw.ffn_gate);
        l.ffn_down = opt_matrix(lw.ffn_down);
        l.ffn_up = opt_matrix(lw.ffn_up);
        l.ffn_gate_inp = opt_matrix(lw.ffn_gate_inp);
        l.gate_exps = expert_matrices(lw.ffn_gate_exps);
        l.up_exps = expert_matrices(lw.ffn_up_exps);
        l.down_exps = expert_matrices(lw.ffn_down_exps);
        m->layers.push_back(std::move(l));
    }

    if (opts.repack) {
        // K-quant widths that are not whole super-blocks never reach here (the loader refuses them).
        auto repackable = [&](const MatrixView& v) { return repacked_at_load(v.type, opts); };
        std::vector<MatrixView*> mats;
        for (Layer& l : m->layers) {
            for (MatrixView* v : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.ffn_gate, &l.ffn_down, &l.ffn_up, &l.ffn_gate_inp})
                if (v->data && repackable(*v)) mats.push_back(v); // absent ones have no data
        }
        if (m->output.data && repackable(m->output)) mats.push_back(&m->output);
        if (opts.load_threads < 0)
            throw Error(ErrorCode::argument, "Model::load: load_threads " + std::to_string(opts.load_threads) + " is negative");
        const int threads = opts.load_threads > 0 ? opts.load_threads : int(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
        m->packed_.reset(repack_all(mats, m->packed_bytes_, threads, mapped));
        // Experts: only their slots now; each is packed by the first pass that routes to it.
        if (hp.is_moe()) m->experts_ = std::make_unique<detail::ExpertPack>(m->layers, &repacked_at_load, opts, mapped);
    }
    return m;
}

Model::Model() = default;
Model::~Model() = default;

namespace {

void check_expert(const Model& m, int64_t il, int64_t e) {
    const LlamaHparams& hp = m.hparams();
    if (il < 0 || il >= hp.n_layer || e < 0 || e >= hp.n_expert || !m.layers[static_cast<size_t>(il)].is_moe())
        throw Error(ErrorCode::argument, "Model::expert: no expert " + std::to_string(e) + " in layer " + std::to_string(il));
}

} // namespace

Model::ExpertWeights Model::expert(int64_t il, int64_t e, ThreadPool* pool) const {
    check_expert(*this, il, e);
    const Layer& l = layers[static_cast<size_t>(il)];
    if (experts_) return experts_->get(l, il, e, pool);
    const auto ue = static_cast<size_t>(e);
    return {&l.gate_exps[ue], &l.up_exps[ue], &l.down_exps[ue]};
}

bool Model::expert_packed(int64_t il, int64_t e) const {
    check_expert(*this, il, e);
    return experts_ && experts_->is_packed(il, e);
}

std::span<const std::byte> Model::expert_packed_bytes(int64_t il, int64_t e) const {
    check_expert(*this, il, e);
    return experts_ ? experts_->slot_bytes(il, e) : std::span<const std::byte>();
}

const std::string& Model::path() const { return file_->gguf().path(); }

} // namespace rwd
