// Memory for large buffers that passes stream through (repacked weights, the KV cache): 2 MiB
// aligned and advised as transparent huge pages, so a pass does not take a TLB miss and a page
// walk every 4 KiB. Pages are reserved, not written: memory is committed only where touched.
// Also: dropping the pages of weights that are not read again.
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

// Drops the whole pages inside [p, p + n) from this process's memory; they come back from the
// file if touched again. `mapped`: the range lies in a read-only private mapping of the file,
// whose pages MADV_DONTNEED unmaps but leaves in the page cache, so a later touch (the embedding
// row of each new token, when the head is tied to the embeddings) is a minor fault, not a read
// from the disk (MADV_PAGEOUT evicts the pages from the cache). Otherwise (a copy in anonymous
// memory, which MADV_DONTNEED would zero) MADV_PAGEOUT, which keeps the data in every kind of
// mapping. Failure only means the memory stays resident.
void release_pages(const void* p, size_t n, bool mapped);

} // namespace rwd::detail
