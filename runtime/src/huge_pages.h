// Memory for large buffers that passes stream through (repacked weights, the KV cache): 2 MiB
// aligned and advised as transparent huge pages, so a pass does not take a TLB miss and a page
// walk every 4 KiB. Pages are reserved, not written: memory is committed only where touched.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <memory>

namespace rwd::detail {

inline constexpr size_t kHugePage = size_t{2} << 20;

struct FreeDelete {
    void operator()(std::byte* p) const { std::free(p); }
};
using HugeBytes = std::unique_ptr<std::byte, FreeDelete>;

// Asks for transparent huge pages over [p, p + n) (p 2 MiB-aligned); failure (THP `never`, or a
// kernel without it) only means small pages.
void advise_huge_pages(void* p, size_t n);

// n bytes (n > 0), 2 MiB-aligned, the whole rounded-up range advised as huge pages; contents
// uninitialised. Null when the memory cannot be had (the caller says what for).
HugeBytes alloc_huge(size_t n);

} // namespace rwd::detail
