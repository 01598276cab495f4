// How the packed-weight products (Q8_0 and K-quant row groups) split their groups over the pool;
// one place for the threshold and chunking both use. Internal, not installed.
#pragma once
#include <algorithm>
#include <cstdint>

#include "rewind/kernels/thread_pool.h"

namespace rwd::detail {

// Row groups per pool chunk are chosen so there are several chunks per thread: a descheduled
// worker then delays a pass by one small chunk, not by its whole share.
inline constexpr int64_t kGroupChunksPerThread = 4;
// Below this many multiply-adds a call runs on the calling thread.
inline constexpr int64_t kGroupMinMacsPerThread = 64 * 1024;

// Runs body(g0, g1) over the row groups [0, groups) of a product of `macs` multiply-adds. Only
// who computes a group changes, never its value.
template <class Body>
void run_row_groups(ThreadPool* pool, int64_t groups, int64_t macs, const Body& body) {
    const int64_t threads =
        pool ? std::min<int64_t>(pool->size(), std::max<int64_t>(1, macs / kGroupMinMacsPerThread)) : 1;
    if (threads <= 1) {
        body(int64_t{0}, groups);
        return;
    }
    const int64_t chunks = std::min<int64_t>(groups, threads * kGroupChunksPerThread);
    const int64_t grain = (groups + chunks - 1) / chunks;
    pool->run(groups, [&](int64_t g0, int64_t g1) { body(g0, g1); }, grain, chunks);
}

} // namespace rwd::detail
