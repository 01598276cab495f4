// Huge-page allocations for streamed buffers (huge_pages.h).
#include "huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace rwd::detail {

HugeBytes alloc_huge(size_t n) {
    constexpr size_t kHugePage = size_t{2} << 20;
    const size_t alloc = (n + kHugePage - 1) / kHugePage * kHugePage;
    HugeBytes p(static_cast<std::byte*>(std::aligned_alloc(kHugePage, alloc)));
#ifdef MADV_HUGEPAGE
    if (p) (void)::madvise(p.get(), alloc, MADV_HUGEPAGE);
#endif
    return p;
}

void release_pages(const void* p, size_t n, bool mapped) {
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto b = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
    const auto e = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
    if (e <= b) return;
    if (mapped) {
        (void)::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
        return;
    }
#ifdef MADV_PAGEOUT
    (void)::madvise(reinterpret_cast<void*>(b), e - b, MADV_PAGEOUT);
#endif
}

} // namespace rwd::detail
