// Huge-page allocations for streamed buffers (huge_pages.h).
#include "huge_pages.h"

#include <sys/mman.h>

namespace rwd::detail {

void advise_huge_pages(void* p, size_t n) {
#ifdef MADV_HUGEPAGE
    (void)::madvise(p, n, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

HugeBytes alloc_huge(size_t n) {
    const size_t alloc = (n + kHugePage - 1) / kHugePage * kHugePage;
    HugeBytes p(static_cast<std::byte*>(std::aligned_alloc(kHugePage, alloc)));
    if (p) advise_huge_pages(p.get(), alloc);
    return p;
}

} // namespace rwd::detail
