// ExpertPack: page-rounded slots in reserved anonymous memory, one per (layer, expert), filled
// by the first pass that routes a token to the expert (double-checked under one lock).
#include "expert_pack.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>

#include "rewind/error.h"
#include "rewind/kernels/packed.h"
#include "huge_pages.h"

namespace rwd::detail {

ExpertPack::ExpertPack(const std::vector<Model::Layer>& layers, bool (*repacked)(DType, const ModelOptions&),
                       const ModelOptions& opts, bool mapped)
    : mapped_(mapped) {
    for (const Model::Layer& l : layers) n_expert_ = std::max<int64_t>(n_expert_, static_cast<int64_t>(l.gate_exps.size()));
    const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    slots_.resize(layers.size() * static_cast<size_t>(n_expert_));
    ready_ = std::make_unique<std::atomic<uint8_t>[]>(slots_.size());
    // Pass 0 sizes the slots, pass 1 (once the space is reserved) points the packed views into them.
    for (int pass = 0; pass < 2; ++pass) {
        for (size_t il = 0; il < layers.size(); ++il) {
            const Model::Layer& l = layers[il];
            for (size_t e = 0; e < l.gate_exps.size(); ++e) {
                Slot& s = slots_[il * static_cast<size_t>(n_expert_) + e];
                size_t at = 0;
                for (auto [from, to] : {std::pair{&l.gate_exps[e], &s.gate}, {&l.up_exps[e], &s.up}, {&l.down_exps[e], &s.down}}) {
                    *to = *from;
                    if (!repacked(from->type, opts)) continue;
                    if (pass == 1) to->packed = base_ + s.offset + at;
                    at += packed_bytes(from->type, from->rows, from->cols); // a multiple of 64
                }
                if (pass == 1) continue;
                s.offset = size_;
                s.bytes = (at + page - 1) / page * page;
                size_ += s.bytes;
            }
        }
        if (size_ == 0) return;
        if (pass == 1) break;
        // Reserved, not committed: a slot's pages become memory when its expert is first packed.
        // Small pages, so an expert's memory is its own (a huge page would pull in its neighbours').
        void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            throw Error(ErrorCode::capacity, "Model::load: cannot reserve " + std::to_string(size_) +
                                                 " bytes of address space for the experts' packed copies");
#ifdef MADV_NOHUGEPAGE
        (void)::madvise(p, size_, MADV_NOHUGEPAGE);
#endif
        base_ = static_cast<std::byte*>(p);
    }
}

ExpertPack::~ExpertPack() {
    if (base_) ::munmap(base_, size_);
}

void ExpertPack::pack(const Model::Layer& L, int64_t il, int64_t e, ThreadPool* pool) const {
    const Slot& s = slots_[static_cast<size_t>(il * n_expert_ + e)];
    const auto ue = static_cast<size_t>(e);
    for (auto [from, to] : {std::pair{&L.gate_exps[ue], &s.gate}, {&L.up_exps[ue], &s.up}, {&L.down_exps[ue], &s.down}}) {
        if (!to->packed) continue;
        const size_t n = packed_bytes(to->type, to->rows, to->cols);
        repack(*from, {const_cast<std::byte*>(static_cast<const std::byte*>(to->packed)), n}, pool);
        // As at load: the file's copy is not read again, so its pages leave memory.
        release_pages(from->data, dtype_row_bytes(from->type, from->cols) * static_cast<size_t>(from->rows), mapped_);
    }
}

Model::ExpertWeights ExpertPack::get(const Model::Layer& L, int64_t il, int64_t e, ThreadPool* pool) const {
    const auto i = static_cast<size_t>(il * n_expert_ + e);
    const Slot& s = slots_[i];
    if (s.bytes > 0 && ready_[i].load(std::memory_order_acquire) == 0) {
        const std::lock_guard<std::mutex> lock(mu_);
        if (ready_[i].load(std::memory_order_relaxed) == 0) {
            pack(L, il, e, pool);
            ready_[i].store(1, std::memory_order_release);
        }
    }
    return {&s.gate, &s.up, &s.down};
}

bool ExpertPack::is_packed(int64_t il, int64_t e) const {
    return ready_[static_cast<size_t>(il * n_expert_ + e)].load(std::memory_order_acquire) != 0;
}

std::span<const std::byte> ExpertPack::slot_bytes(int64_t il, int64_t e) const {
    const Slot& s = slots_[static_cast<size_t>(il * n_expert_ + e)];
    return s.bytes ? std::span<const std::byte>(base_ + s.offset, s.bytes) : std::span<const std::byte>();
}

} // namespace rwd::detail
