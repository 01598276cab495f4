// Huge-page allocations for streamed buffers (huge_pages.h).
#include "huge_pages.h"

#include <sys/mman.h>

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

} // namespace rwd::detail
