// Experts repacked lazily: each expert's packed copy is written the first time a pass routes a
// token to it, into address space reserved at load, so experts no token chose are never read,
// copied or made resident (a 30B-A3B file is mostly experts a short run never uses).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "rewind/model.h"

namespace rwd::detail {

class ExpertPack {
public:
    // Plans one slot per (layer, expert) for the matrices of `layers`' experts whose type
    // `repacked(type)` says is repacked, each slot a whole number of pages (so no two experts
    // share a page), and reserves the address space for all of them without committing memory.
    // `mapped`: the experts' file views lie in a mapping of the file (how their pages are released:
    // huge_pages.h). Throws rwd::Error (capacity) when the address space cannot be reserved.
    ExpertPack(const std::vector<Model::Layer>& layers, bool (*repacked)(DType, const ModelOptions&),
               const ModelOptions& opts, bool mapped);
    ~ExpertPack();
    ExpertPack(const ExpertPack&) = delete;
    ExpertPack& operator=(const ExpertPack&) = delete;

    // Expert e of layer il (L = that layer), packed first if this is its first use: repacked
    // over `pool` (may be null) under a lock, its file pages then released; other threads asking
    // for it meanwhile wait, those asking for packed experts never do (one acquire load). Nothing
    // is allocated. Matrices whose type is not repacked are the file's views.
    Model::ExpertWeights get(const Model::Layer& L, int64_t il, int64_t e, ThreadPool* pool) const;
    bool is_packed(int64_t il, int64_t e) const;
    // The bytes expert e of layer il's packed copy occupies (whole pages), empty when none of
    // its matrices is repacked.
    std::span<const std::byte> slot_bytes(int64_t il, int64_t e) const;
    // Address space reserved for all experts' packed copies.
    uint64_t reserved_bytes() const { return size_; }

private:
    struct Slot {
        size_t offset = 0, bytes = 0; // in base_, whole pages; bytes 0: nothing repacked
        MatrixView gate, up, down;    // packed views (packed set) or the file's
    };
    void pack(const Model::Layer& L, int64_t il, int64_t e, ThreadPool* pool) const;

    bool mapped_ = false;
    std::byte* base_ = nullptr;
    size_t size_ = 0;
    int64_t n_expert_ = 0;
    std::vector<Slot> slots_; // [n_layer * n_expert]
    mutable std::unique_ptr<std::atomic<uint8_t>[]> ready_; // [n_layer * n_expert] 1 once packed
    mutable std::mutex mu_;
};

} // namespace rwd::detail
