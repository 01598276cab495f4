// The forward pass's view of a KvCache: its raw layers, the commit of newly written positions and
// the version a device mirror is checked against. Private to the runtime (and its tests), so the
// public KvCache shows users only what they call.
#pragma once
#include <cstdint>

#include "rewind/kv_cache.h"

namespace rwd {

class KvStorage {
public:
    // Raw layer storage [capacity, n_head_kv, head_dim] of the cache's dtype().
    static void* k_layer(KvCache& c, int64_t il) { return c.k_[static_cast<size_t>(il)].data(); }
    static void* v_layer(KvCache& c, int64_t il) { return c.v_[static_cast<size_t>(il)].data(); }
    static const void* k_layer(const KvCache& c, int64_t il) { return c.k_[static_cast<size_t>(il)].data(); }
    static const void* v_layer(const KvCache& c, int64_t il) { return c.v_[static_cast<size_t>(il)].data(); }

    // Marks positions [size, n) as written (after a pass wrote them). Throws rwd::Error
    // (argument) if n > capacity or n < size.
    static void commit(KvCache& c, int64_t n) { c.commit(n); }

    // Changes whenever positions are written (commit(); every cache that a constructor, load(),
    // import() or fork() makes starts with a value no other cache of this process has had), never
    // on truncate(). A copy of the stored positions < size() taken at one version (the CUDA
    // backend's device copy) is still right while the version is the same.
    static uint64_t version(const KvCache& c) { return c.version_; }
};

} // namespace rwd
