// KvCache: per-layer K and V storage [capacity, n_head_kv, head_dim] (F32 or F16) with a length
// cursor; truncate/fork, a versioned checksummed file format, and float import/export. Every
// failing call throws before it changes anything.
#include "rewind/kv_cache.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "rewind/error.h"
#include "rewind/file_io.h"
#include "rewind/hash.h"
#include "rewind/model.h"
#include "huge_pages.h"

namespace rwd {
namespace {

constexpr char kMagic[8] = {'R', 'W', 'N', 'D', 'K', 'V', 'C', '\0'};
constexpr uint32_t kVersion = 2;
// Header bytes before the architecture name: magic, version, type, fingerprint, 4 identity
// fields, token count, payload size, name length.
constexpr uint64_t kHeaderFixedBytes = 8 + 4 + 4 + 8 + 4 * 8 + 8 + 8 + 4;

size_t elem_bytes(KvType t) { return dtype_row_bytes(kv_dtype(t), 1); }

uint64_t fnv1a(const std::byte* p, size_t n) {
    Fnv1a h;
    h.bytes(p, n);
    return h.value();
}

// Converts n values stored as `from` into `to` (same type: a copy).
void convert(KvType from, const std::byte* src, KvType to, std::byte* dst, size_t n) {
    if (n == 0) return; // src may be null (an empty span)
    if (from == to) {
        std::memcpy(dst, src, n * elem_bytes(from));
    } else if (from == KvType::F16) {
        for (size_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, src + 2 * i, 2);
            const float f = fp16_to_fp32(h);
            std::memcpy(dst + 4 * i, &f, 4);
        }
    } else {
        for (size_t i = 0; i < n; ++i) {
            float f;
            std::memcpy(&f, src + 4 * i, 4);
            const uint16_t h = fp32_to_fp16(f);
            std::memcpy(dst + 2 * i, &h, 2);
        }
    }
}

std::string describe(const KvIdentity& id) {
    char fp[32];
    std::snprintf(fp, sizeof fp, "%016llx", static_cast<unsigned long long>(id.model_fingerprint));
    return id.architecture + " n_layer=" + std::to_string(id.n_layer) + " n_head_kv=" + std::to_string(id.n_head_kv) +
           " head_dim=" + std::to_string(id.head_dim) + " n_vocab=" + std::to_string(id.n_vocab) + " weights " + fp;
}

int64_t resolve_capacity(const Model& model, int64_t capacity) {
    const int64_t n_ctx = model.hparams().n_ctx_train;
    if (capacity < 0) throw Error("KV cache: capacity " + std::to_string(capacity) + " is negative");
    if (capacity == 0) capacity = std::min<int64_t>(n_ctx, kDefaultKvCapacity); // as llama.cpp's default
    if (capacity > n_ctx)
        throw Error(ErrorCode::capacity, "KV cache: capacity " + std::to_string(capacity) + " exceeds the model's context length " +
                    std::to_string(n_ctx));
    return capacity;
}

// Bounds-checked little reader over a whole file held in memory.
struct Reader {
    const std::string& path;
    std::span<const std::byte> buf;
    size_t pos = 0;
    void need(size_t n, const char* what) {
        if (buf.size() - pos < n)
            throw Error(ErrorCode::format, path + ": truncated KV cache file (ends inside " + what + ")");
    }
    template <class T> T get(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, buf.data() + pos, sizeof(T));
        pos += sizeof(T);
        return v;
    }
};

} // namespace

void KvCache::Buffer::resize(size_t n) {
    constexpr size_t kHugeFrom = size_t{4} << 20;
    std::byte* q = nullptr;
    if (n >= kHugeFrom) {
        q = detail::alloc_huge(n).release();
    } else if (n > 0) {
        q = static_cast<std::byte*>(std::malloc(n));
    }
    if (n > 0 && !q) throw Error(ErrorCode::capacity, "KV cache: cannot allocate " + std::to_string(n) + " bytes for a layer");
    p.reset(q);
}

KvIdentity KvCache::identity_of(const Model& model) {
    const LlamaHparams& hp = model.hparams();
    return KvIdentity{hp.architecture, hp.n_layer, hp.n_head_kv, hp.head_dim(), model.n_vocab(), model.fingerprint()};
}

KvCache::KvCache(const Model& model, KvCacheOptions opts) {
    capacity_ = resolve_capacity(model, opts.capacity);
    if (opts.type != KvType::F32 && opts.type != KvType::F16) throw Error("KV cache: unknown KvType");
    id_ = identity_of(model);
    type_ = opts.type;
    const size_t layer_bytes = static_cast<size_t>(capacity_) * bytes_per_position();
    k_.resize(static_cast<size_t>(id_.n_layer));
    v_.resize(static_cast<size_t>(id_.n_layer));
    for (size_t il = 0; il < k_.size(); ++il) {
        k_[il].resize(layer_bytes);
        v_[il].resize(layer_bytes);
    }
}

size_t KvCache::bytes_per_position() const {
    return static_cast<size_t>(id_.n_head_kv * id_.head_dim) * elem_bytes(type_);
}

// Field by field (no temporary identity): the forward pass calls this and must not allocate.
bool KvCache::belongs_to(const Model& model) const {
    const LlamaHparams& hp = model.hparams();
    return id_.model_fingerprint == model.fingerprint() && id_.n_layer == hp.n_layer &&
           id_.n_head_kv == hp.n_head_kv && id_.head_dim == hp.head_dim() && id_.n_vocab == model.n_vocab() &&
           id_.architecture == hp.architecture;
}

void KvCache::truncate(int64_t n) {
    if (n < 0 || n > size_)
        throw Error("KV cache: cannot truncate to " + std::to_string(n) + " positions (it holds " +
                    std::to_string(size_) + ")");
    size_ = n;
}

void KvCache::keep_path(int64_t pos0, std::span<const int32_t> path) {
    auto bad = [&](const std::string& why) { throw Error("KV cache: keep_path at " + std::to_string(pos0) + ": " + why); };
    if (pos0 < 0 || pos0 > size_) bad("outside the " + std::to_string(size_) + " stored positions");
    for (size_t j = 0; j < path.size(); ++j) {
        if (path[j] < static_cast<int32_t>(j) || (j > 0 && path[j] <= path[j - 1]))
            bad("path entry " + std::to_string(j) + " is " + std::to_string(path[j]) +
                " (entries increase, entry j at least j)");
        if (pos0 + path[j] >= size_)
            bad("path entry " + std::to_string(j) + " is slot " + std::to_string(pos0 + path[j]) + " of a cache holding " +
                std::to_string(size_));
    }
    const size_t row = bytes_per_position();
    bool moved = false;
    for (size_t j = 0; j < path.size(); ++j) {
        if (path[j] == static_cast<int32_t>(j)) continue;
        const size_t from = static_cast<size_t>(pos0 + path[j]) * row, to = (static_cast<size_t>(pos0) + j) * row;
        // to < from, and every earlier destination lies below: a row is never overwritten before it moves.
        for (size_t il = 0; il < k_.size(); ++il) {
            std::memcpy(k_[il].data() + to, k_[il].data() + from, row);
            std::memcpy(v_[il].data() + to, v_[il].data() + from, row);
        }
        moved = true;
    }
    size_ = pos0 + static_cast<int64_t>(path.size());
    if (moved) version_ = next_version(); // rows below size() changed: a device copy is stale
}

void KvCache::commit(int64_t n) {
    if (n < size_ || n > capacity_)
        throw Error("KV cache: cannot commit length " + std::to_string(n) + " (size " + std::to_string(size_) +
                    ", capacity " + std::to_string(capacity_) + ")");
    size_ = n;
    version_ = next_version();
}

// A counter, not an address or a clock: values are never reused within the process, so a stale
// device copy can never look current.
uint64_t KvCache::next_version() noexcept {
    static std::atomic<uint64_t> counter{0};
    return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

KvCache KvCache::fork() const {
    KvCache c;
    c.id_ = id_;
    c.type_ = type_;
    c.capacity_ = capacity_;
    c.size_ = size_;
    const size_t layer_bytes = static_cast<size_t>(capacity_) * bytes_per_position();
    const size_t used = static_cast<size_t>(size_) * bytes_per_position();
    c.k_.resize(k_.size());
    c.v_.resize(v_.size());
    for (size_t il = 0; il < k_.size(); ++il) {
        c.k_[il].resize(layer_bytes);
        c.v_[il].resize(layer_bytes);
        std::memcpy(c.k_[il].data(), k_[il].data(), used);
        std::memcpy(c.v_[il].data(), v_[il].data(), used);
    }
    return c;
}

void KvCache::copy_prefix(const KvCache& src, int64_t n) {
    if (&src == this) throw Error("KV cache: copy_prefix from itself");
    if (!(src.id_ == id_) || src.type_ != type_)
        throw Error(ErrorCode::state, "KV cache: copy_prefix from a cache of another model or KV type");
    if (n < 0 || n > src.size_)
        throw Error("KV cache: cannot copy " + std::to_string(n) + " positions from a cache holding " +
                    std::to_string(src.size_));
    if (n > capacity_)
        throw Error(ErrorCode::capacity, "KV cache: " + std::to_string(n) + " positions exceed the capacity " +
                                             std::to_string(capacity_));
    const size_t used = static_cast<size_t>(n) * bytes_per_position();
    for (size_t il = 0; il < k_.size(); ++il) {
        if (used == 0) break;
        std::memcpy(k_[il].data(), src.k_[il].data(), used);
        std::memcpy(v_[il].data(), src.v_[il].data(), used);
    }
    size_ = n;
    version_ = next_version();
}

bool KvCache::contents_equal(const KvCache& other) const {
    if (!(id_ == other.id_) || type_ != other.type_ || size_ != other.size_) return false;
    const size_t used = static_cast<size_t>(size_) * bytes_per_position();
    for (size_t il = 0; il < k_.size(); ++il) {
        if (std::memcmp(k_[il].data(), other.k_[il].data(), used) != 0) return false;
        if (std::memcmp(v_[il].data(), other.v_[il].data(), used) != 0) return false;
    }
    return true;
}

// File layout, version 2 (little-endian):
//   header:  magic "RWNDKVC\0" | u32 version | u32 type (0 F32, 1 F16) | u64 model fingerprint |
//            i64 n_layer, n_head_kv, head_dim, n_vocab | i64 token count | u64 payload bytes |
//            u32 architecture length | architecture | u64 FNV-1a of the header so far
//   payload: per layer, K then V of positions < token count, in the file's type
//   trailer: u64 FNV-1a of the payload
// Two checksums, so a damaged file says where it is damaged and no count is trusted before its
// header checksum matches.
void KvCache::save(const std::string& path) const {
    std::vector<std::byte> out;
    auto put = [&](const void* p, size_t n) {
        const auto* b = static_cast<const std::byte*>(p);
        out.insert(out.end(), b, b + n);
    };
    auto put_u32 = [&](uint32_t v) { put(&v, 4); };
    auto put_u64 = [&](uint64_t v) { put(&v, 8); };
    auto put_i64 = [&](int64_t v) { put(&v, 8); };
    const size_t used = static_cast<size_t>(size_) * bytes_per_position();
    const size_t payload = 2 * k_.size() * used;
    out.reserve(kHeaderFixedBytes + id_.architecture.size() + 16 + payload);
    put(kMagic, sizeof kMagic);
    put_u32(kVersion);
    put_u32(type_ == KvType::F32 ? 0u : 1u);
    put_u64(id_.model_fingerprint);
    put_i64(id_.n_layer);
    put_i64(id_.n_head_kv);
    put_i64(id_.head_dim);
    put_i64(id_.n_vocab);
    put_i64(size_);
    put_u64(payload);
    put_u32(static_cast<uint32_t>(id_.architecture.size()));
    put(id_.architecture.data(), id_.architecture.size());
    put_u64(fnv1a(out.data(), out.size()));
    const size_t payload_at = out.size();
    for (size_t il = 0; il < k_.size(); ++il) {
        put(k_[il].data(), used);
        put(v_[il].data(), used);
    }
    put_u64(fnv1a(out.data() + payload_at, payload));
    write_file_atomic(path, out);
}

uint64_t KvCache::max_file_bytes(const Model& model) {
    const KvIdentity id = identity_of(model);
    const uint64_t per_pos = static_cast<uint64_t>(id.n_head_kv * id.head_dim) * 4; // F32, the wider type
    return kHeaderFixedBytes + id.architecture.size() + 16 +
           2 * static_cast<uint64_t>(id.n_layer) * static_cast<uint64_t>(model.hparams().n_ctx_train) * per_pos;
}

KvCache KvCache::load(const std::string& path, const Model& model, KvCacheOptions opts) {
    const std::string bytes = read_file_limited(path, max_file_bytes(model), "KV cache file");
    return load_from_memory(std::as_bytes(std::span(bytes.data(), bytes.size())), path, model, opts);
}

KvCache KvCache::load_from_memory(std::span<const std::byte> buf, const std::string& path, const Model& model,
                                  KvCacheOptions opts) {
    Reader r{path, buf};
    r.need(sizeof kMagic, "the magic");
    if (std::memcmp(buf.data(), kMagic, sizeof kMagic) != 0) throw Error(ErrorCode::format, path + ": not a rewind KV cache file (bad magic)");
    r.pos = sizeof kMagic;
    const uint32_t version = r.get<uint32_t>("the version");
    if (version > kVersion)
        throw Error(ErrorCode::unsupported, path + ": KV cache file format version " + std::to_string(version) +
                    " was written by a newer rewind (this one reads version " + std::to_string(kVersion) + ")");
    if (version < kVersion)
        throw Error(ErrorCode::unsupported, path + ": KV cache file format version " + std::to_string(version) +
                    " is no longer supported (this rewind reads version " + std::to_string(kVersion) +
                    "); save the cache again");
    const uint32_t type_code = r.get<uint32_t>("the header");
    KvIdentity id;
    id.model_fingerprint = r.get<uint64_t>("the header");
    id.n_layer = r.get<int64_t>("the header");
    id.n_head_kv = r.get<int64_t>("the header");
    id.head_dim = r.get<int64_t>("the header");
    id.n_vocab = r.get<int64_t>("the header");
    const int64_t size = r.get<int64_t>("the header");
    const uint64_t payload = r.get<uint64_t>("the header");
    const uint32_t arch_len = r.get<uint32_t>("the header");
    r.need(arch_len, "the header");
    id.architecture.assign(reinterpret_cast<const char*>(buf.data() + r.pos), arch_len);
    r.pos += arch_len;
    const size_t header_end = r.pos;
    if (r.get<uint64_t>("the header checksum") != fnv1a(buf.data(), header_end))
        throw Error(ErrorCode::format, path + ": KV cache file header is corrupted (header checksum mismatch)");

    const KvIdentity want = identity_of(model);
    if (!(id == want))
        throw Error(ErrorCode::state, path + ": KV cache was written for another model (" + describe(id) + "), not " + model.path() +
                    " (" + describe(want) + ")");
    if (type_code > 1) throw Error(ErrorCode::format, path + ": KV cache file header is corrupted (unknown KV type code " +
                                   std::to_string(type_code) + ")");
    const KvType file_type = type_code == 0 ? KvType::F32 : KvType::F16;
    // The identity matches the model, so these products are small; size is still unchecked.
    const uint64_t pos_bytes = static_cast<uint64_t>(id.n_head_kv * id.head_dim) * elem_bytes(file_type);
    if (size < 0 || size > model.hparams().n_ctx_train ||
        payload != 2 * static_cast<uint64_t>(id.n_layer) * static_cast<uint64_t>(size) * pos_bytes)
        throw Error(ErrorCode::format, path + ": KV cache file header is corrupted (" + std::to_string(size) + " positions and " +
                    std::to_string(payload) + " payload bytes disagree)");
    const uint64_t have = buf.size() - r.pos;
    if (have < payload + 8)
        throw Error(ErrorCode::format, path + ": truncated KV cache file: " + std::to_string(buf.size()) + " bytes, its header says " +
                    std::to_string(r.pos + payload + 8));
    if (have > payload + 8)
        throw Error(ErrorCode::format, path + ": KV cache file is corrupted: " + std::to_string(have - payload - 8) +
                    " unexpected bytes after the data");
    const std::byte* data = buf.data() + r.pos;
    uint64_t stored_sum;
    std::memcpy(&stored_sum, data + payload, 8);
    if (fnv1a(data, payload) != stored_sum)
        throw Error(ErrorCode::format, path + ": KV cache file is corrupted (data checksum mismatch)");

    KvCache c(model, opts);
    if (size > c.capacity_)
        throw Error(ErrorCode::capacity, path + ": holds " + std::to_string(size) + " positions, the cache capacity is " +
                    std::to_string(c.capacity_));
    const size_t n_vals = static_cast<size_t>(size * id.n_head_kv * id.head_dim);
    const size_t file_bytes = n_vals * elem_bytes(file_type);
    for (size_t il = 0; il < c.k_.size(); ++il) {
        convert(file_type, data, c.type_, c.k_[il].data(), n_vals);
        data += file_bytes;
        convert(file_type, data, c.type_, c.v_[il].data(), n_vals);
        data += file_bytes;
    }
    c.size_ = size;
    return c;
}

KvCache KvCache::import(const Model& model, int64_t n_tokens, std::span<const float> k, std::span<const float> v,
                        KvCacheOptions opts) {
    KvCache c(model, opts);
    if (n_tokens < 0 || n_tokens > c.capacity_)
        throw Error(ErrorCode::capacity, "KV import: " + std::to_string(n_tokens) + " tokens do not fit a cache of capacity " +
                    std::to_string(c.capacity_));
    const size_t per_layer = static_cast<size_t>(n_tokens * c.id_.n_head_kv * c.id_.head_dim);
    const size_t want = per_layer * static_cast<size_t>(c.id_.n_layer);
    for (const auto& [name, got] : {std::pair{"K", k.size()}, std::pair{"V", v.size()}}) {
        if (got == want) continue;
        std::string msg = "KV import: ";
        msg.append(name).append(" has ").append(std::to_string(got)).append(" floats, expected [");
        const int64_t dims[4] = {c.id_.n_layer, n_tokens, c.id_.n_head_kv, c.id_.head_dim};
        for (int i = 0; i < 4; ++i) msg.append(std::to_string(dims[i])).append(i == 3 ? "] = " : ", ");
        throw Error(ErrorCode::shape, msg.append(std::to_string(want)));
    }
    for (size_t i = 0; i < want; ++i) {
        if (!std::isfinite(k[i]) || !std::isfinite(v[i]))
            throw Error("KV import: non-finite value in " + std::string(std::isfinite(k[i]) ? "V" : "K") +
                        " at layer " + std::to_string(i / std::max<size_t>(per_layer, 1)) + ", flat index " +
                        std::to_string(i));
    }
    for (size_t il = 0; il < c.k_.size(); ++il) {
        convert(KvType::F32, reinterpret_cast<const std::byte*>(k.data() + il * per_layer), c.type_, c.k_[il].data(),
                per_layer);
        convert(KvType::F32, reinterpret_cast<const std::byte*>(v.data() + il * per_layer), c.type_, c.v_[il].data(),
                per_layer);
    }
    c.size_ = n_tokens;
    return c;
}

void KvCache::export_kv(std::vector<float>& k, std::vector<float>& v) const {
    const size_t per_layer = static_cast<size_t>(size_ * id_.n_head_kv * id_.head_dim);
    std::vector<float> ko(per_layer * k_.size()), vo(per_layer * v_.size());
    for (size_t il = 0; il < k_.size(); ++il) {
        convert(type_, k_[il].data(), KvType::F32, reinterpret_cast<std::byte*>(ko.data() + il * per_layer), per_layer);
        convert(type_, v_[il].data(), KvType::F32, reinterpret_cast<std::byte*>(vo.data() + il * per_layer), per_layer);
    }
    k = std::move(ko);
    v = std::move(vo);
}

} // namespace rwd
