// Memory for large buffers that passes stream through (repacked weights, the KV cache): 2 MiB
// aligned and advised as transparent huge pages, so a pass does not take a TLB miss and a page
// walk every 4 KiB. Pages are reserved, not written: memory is committed only where touched.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <memory>

namespace rwd::detail {

struct FreeDelete {
    void operator()(std::byte* p) const { std::free(p); }
};
using HugeBytes = std::unique_ptr<std::byte, FreeDelete>;

// n bytes (n > 0), 2 MiB-aligned, the whole rounded-up range advised as transparent huge pages
// (THP `never`, or a kernel without it, only leaves small pages); contents uninitialised. Null
// when the memory cannot be had (the caller says what for).
HugeBytes alloc_huge(size_t n);

} // namespace rwd::detail
