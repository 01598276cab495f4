// A flat, position-indexed KV cache for one sequence: per layer K and V as
// [capacity, n_head_kv, head_dim], plus a length cursor. Rollback is truncate(n), O(1).
// Every failing call throws rwd::Error and leaves the cache exactly as it was.
// Threads: a KvCache belongs to one thread at a time (forward() writes it); const calls such as
// fork() and save() may run concurrently with each other, not with a writer.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rewind/kernels/dtype.h"

namespace rwd {

class Model;

enum class KvType { F32, F16 };
// The element type a KvType stores (its size: dtype_row_bytes(kv_dtype(t), 1)).
inline DType kv_dtype(KvType t) { return t == KvType::F32 ? DType::F32 : DType::F16; }

// Capacity of a cache whose options leave it at 0 (when the model's context is longer).
constexpr int64_t kDefaultKvCapacity = 4096;

struct KvCacheOptions {
    int64_t capacity = 0;     // positions; 0 means min(the model's training context, kDefaultKvCapacity)
    // F32 here, the reference-exact type; the CLI's --kv-type auto picks F16 (half the memory;
    // exactness holds at either fixed type, docs/numerics.md "The KV cache type").
    KvType type = KvType::F32;
};

// What a cache belongs to: a cache only ever runs with the model it was built for.
struct KvIdentity {
    std::string architecture;
    int64_t n_layer = 0, n_head_kv = 0, head_dim = 0, n_vocab = 0;
    uint64_t model_fingerprint = 0;
    bool operator==(const KvIdentity&) const = default;
};

class KvCache {
public:
    // Allocates capacity positions for every layer. Throws rwd::Error if capacity exceeds the
    // model's context length (capacity), is negative or opts.type is no KvType (argument).
    explicit KvCache(const Model& model, KvCacheOptions opts = {});

    KvCache(KvCache&&) noexcept = default;
    KvCache& operator=(KvCache&&) noexcept = default;
    KvCache(const KvCache&) = delete;            // copies are explicit: fork()
    KvCache& operator=(const KvCache&) = delete;

    int64_t size() const { return size_; }
    int64_t capacity() const { return capacity_; }
    KvType type() const { return type_; }
    DType dtype() const { return kv_dtype(type_); }
    const KvIdentity& identity() const { return id_; }
    // The identity a cache built for `model` carries.
    static KvIdentity identity_of(const Model& model);
    bool belongs_to(const Model& model) const;

    // Keeps the first n positions. Throws rwd::Error (argument) if n < 0 or n > size().
    void truncate(int64_t n);
    // After a token-tree pass (Context::forward_tree) stored its tokens at slots pos0 + i: keeps
    // positions < pos0 and the tokens `path` (a root-to-node path: increasing indices of the
    // pass, path[j] at depth j), moved to positions pos0, pos0 + 1, ...; size() becomes
    // pos0 + path.size(). Copies path.size() rows per layer at most. Throws rwd::Error
    // (argument), the cache unchanged, unless 0 <= pos0, path[j] >= j, path increasing and
    // pos0 + path.back() < size().
    void keep_path(int64_t pos0, std::span<const int32_t> path);
    // An independent cache with the same contents (positions < size()) and capacity.
    KvCache fork() const;
    // Replaces this cache's contents by src's first n positions (a shared prompt prefix): then
    // size() == n, whatever it was. Throws rwd::Error, this cache unchanged: state (src belongs
    // to another model or stores another KvType), argument (n < 0 or n > src.size(); src is this
    // cache), capacity (n > capacity()).
    void copy_prefix(const KvCache& src, int64_t n);

    // Versioned binary file (little-endian; layout in kv_cache.cpp): magic "RWNDKVC\0", format
    // version, type, the model's identity and fingerprint, token count and payload size under a
    // header checksum, then per layer K and V of positions < size(), then a payload checksum.
    // save() replaces `path` atomically and durably (rwd::write_file_atomic): a failure or a
    // crash mid-write leaves any previous file intact. Throws rwd::Error (io) naming the path.
    void save(const std::string& path) const;
    // load() refuses, with an rwd::Error naming the path and the reason: a file it cannot read or
    // larger than max_file_bytes(model) (bounded memory, whatever the input); "not a rewind KV
    // cache file" (bad magic); a version "written by a newer rewind" or an older one; a corrupted
    // header (header checksum); a cache "written for another model" (identity or fingerprint);
    // a "truncated" file; a corrupted payload (data checksum) or trailing bytes; more positions
    // than opts.capacity. Codes: io (cannot read), capacity (too large, more positions than the
    // capacity), format (magic, header, truncated, data), unsupported (version), state (another
    // model). Nothing else is changed by a refusal. The loaded cache has
    // opts.capacity (0: the default capacity) and opts.type: an F16 file loads into an F32 cache
    // exactly; an F32 file into an F16 cache is rounded to half precision.
    static KvCache load(const std::string& path, const Model& model, KvCacheOptions opts = {});
    // The same parser over bytes in memory; `name` stands for the path in errors.
    static KvCache load_from_memory(std::span<const std::byte> bytes, const std::string& name, const Model& model,
                                    KvCacheOptions opts = {});
    // The largest file a cache of `model` can be saved as (F32, its full context).
    static uint64_t max_file_bytes(const Model& model);

    // The past_key_values case: k and v are [n_layer, n_tokens, n_head_kv, head_dim] floats
    // (K already rotated, as the model stores it). Throws rwd::Error on any size mismatch
    // (shape), n_tokens < 0 or above the capacity (capacity), a non-finite value (argument), or
    // options the constructor refuses. An F16 cache stores the values rounded to half.
    static KvCache import(const Model& model, int64_t n_tokens, std::span<const float> k,
                          std::span<const float> v, KvCacheOptions opts = {});
    // The inverse of import: positions < size() as floats in the same layout.
    void export_kv(std::vector<float>& k, std::vector<float>& v) const;

    size_t bytes_per_position() const; // one layer's K (or V) for one position

    // Bit-for-bit equality of identity, type, size and every stored byte below size().
    bool contents_equal(const KvCache& other) const;

private:
    // The forward pass reaches the raw layers, commit() and version() through KvStorage
    // (runtime/src/kv_storage.h), private to the runtime: users never write a cache's rows.
    friend class KvStorage;

    // Marks positions [size, n) as written. Throws rwd::Error (argument) if n > capacity or n < size.
    void commit(int64_t n);

    KvCache() = default;
    KvIdentity id_;
    KvType type_ = KvType::F32;
    int64_t capacity_ = 0;
    int64_t size_ = 0;
    // Storage whose pages are reserved, not written, until used: a large capacity costs memory
    // only for the positions actually filled (no zeroing of the whole cache at start). A layer of
    // 4 MiB or more is 2 MiB-aligned and advised as huge pages (attention reads one KV head's rows
    // a whole position apart, with 4 KiB pages a TLB miss every row or two), and is then committed
    // 2 MiB at a time as positions fill.
    struct Buffer {
        std::unique_ptr<std::byte, void (*)(void*)> p{nullptr, std::free};
        std::byte* data() { return p.get(); }
        const std::byte* data() const { return p.get(); }
        void resize(size_t n); // uninitialised; throws rwd::Error (capacity) when memory cannot be had
    };
    uint64_t version_ = next_version();
    static uint64_t next_version() noexcept;
    std::vector<Buffer> k_, v_; // per layer, [capacity, n_head_kv, head_dim]
};

} // namespace rwd
