// GGUF v2/v3 reader: maps the file read-only, parses and validates the header, metadata and
// tensor infos with bounds-checked reads, and hands out zero-copy views of tensor data.
#include "rewind/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <system_error>
#include <type_traits>

namespace rwd {

namespace {

constexpr uint32_t kMaxDims = 4;          // ggml's GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;         // nested arrays deeper than this are rejected (stack safety)
constexpr uint64_t kDefaultAlignment = 32;

struct TypeTraits {
    const char* name;
    uint64_t block_elems;
    uint64_t block_bytes;
};

// ggml's block layouts. K-quants use super-blocks of 256 elements.
bool type_traits(TensorType t, TypeTraits& out) {
    switch (t) {
    case TensorType::F32: out = {"F32", 1, 4}; return true;
    case TensorType::F16: out = {"F16", 1, 2}; return true;
    case TensorType::Q4_0: out = {"Q4_0", 32, 18}; return true;   // fp16 d + 16 nibble bytes
    case TensorType::Q4_1: out = {"Q4_1", 32, 20}; return true;   // fp16 d, m + 16
    case TensorType::Q5_0: out = {"Q5_0", 32, 22}; return true;   // fp16 d + 4 high bits + 16
    case TensorType::Q5_1: out = {"Q5_1", 32, 24}; return true;   // fp16 d, m + 4 + 16
    case TensorType::Q8_0: out = {"Q8_0", 32, 34}; return true;   // fp16 d + 32 int8
    case TensorType::Q8_1: out = {"Q8_1", 32, 36}; return true;   // fp16 d, s + 32 int8
    case TensorType::Q2_K: out = {"Q2_K", 256, 84}; return true;
    case TensorType::Q3_K: out = {"Q3_K", 256, 110}; return true;
    case TensorType::Q4_K: out = {"Q4_K", 256, 144}; return true;
    case TensorType::Q5_K: out = {"Q5_K", 256, 176}; return true;
    case TensorType::Q6_K: out = {"Q6_K", 256, 210}; return true;
    case TensorType::Q8_K: out = {"Q8_K", 256, 292}; return true; // f32 d + 256 int8 + 16 int16
    case TensorType::I8: out = {"I8", 1, 1}; return true;
    case TensorType::I16: out = {"I16", 1, 2}; return true;
    case TensorType::I32: out = {"I32", 1, 4}; return true;
    case TensorType::I64: out = {"I64", 1, 8}; return true;
    case TensorType::F64: out = {"F64", 1, 8}; return true;
    case TensorType::BF16: out = {"BF16", 1, 2}; return true;
    }
    return false;
}

// Fixed encoded size of a scalar value type; 0 for string/array/unknown.
uint64_t scalar_size(uint32_t type) {
    switch (static_cast<GgufValueType>(type)) {
    case GgufValueType::UInt8: case GgufValueType::Int8: case GgufValueType::Bool: return 1;
    case GgufValueType::UInt16: case GgufValueType::Int16: return 2;
    case GgufValueType::UInt32: case GgufValueType::Int32: case GgufValueType::Float32: return 4;
    case GgufValueType::UInt64: case GgufValueType::Int64: case GgufValueType::Float64: return 8;
    case GgufValueType::String: case GgufValueType::Array: return 0;
    }
    return 0;
}

bool known_value_type(uint32_t type) { return type <= static_cast<uint32_t>(GgufValueType::Float64); }

// Smallest number of bytes one element of `type` can occupy (used to bound array counts).
uint64_t min_encoded_size(uint32_t type) {
    if (type == static_cast<uint32_t>(GgufValueType::String)) return 8;      // length only
    if (type == static_cast<uint32_t>(GgufValueType::Array)) return 4 + 8;  // type + count
    return scalar_size(type);
}

std::string errno_text(int e) { return std::generic_category().message(e); }

// A read-only private mapping of a whole file; unmapped on destruction.
class Mapping {
public:
    Mapping() = default;
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    Mapping(Mapping&& o) noexcept : data_(o.data_), size_(o.size_), owned_(std::move(o.owned_)) {
        o.data_ = nullptr; o.size_ = 0;
    }
    Mapping& operator=(Mapping&& o) noexcept {
        if (this != &o) {
            reset();
            data_ = o.data_; size_ = o.size_; owned_ = std::move(o.owned_);
            o.data_ = nullptr; o.size_ = 0;
        }
        return *this;
    }
    ~Mapping() { reset(); }

    static Mapping map(const std::string& path) {
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw Error(ErrorCode::io, path + ": cannot open: " + errno_text(errno));
        struct FdCloser { int fd; ~FdCloser() { ::close(fd); } } closer{fd};
        struct stat st {};
        if (::fstat(fd, &st) != 0) throw Error(ErrorCode::io, path + ": cannot stat: " + errno_text(errno));
        if (!S_ISREG(st.st_mode)) throw Error(ErrorCode::io, path + ": not a regular file");
        Mapping m;
        if (st.st_size == 0) return m; // nothing to map; the parser reports the truncation
        if (static_cast<uint64_t>(st.st_size) > std::numeric_limits<size_t>::max())
            throw Error(ErrorCode::io, path + ": file too large to map");
        void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) throw Error(ErrorCode::io, path + ": cannot map: " + errno_text(errno));
        m.data_ = static_cast<const uint8_t*>(p);
        m.size_ = static_cast<uint64_t>(st.st_size);
        return m;
    }

    // A copy of bytes in memory, aligned like a mapping's start would be for the kernels.
    static Mapping copy(std::span<const uint8_t> bytes) {
        Mapping m;
        if (bytes.empty()) return m;
        m.owned_.reset(new (std::align_val_t{64}) uint8_t[bytes.size()]);
        std::memcpy(m.owned_.get(), bytes.data(), bytes.size());
        m.data_ = m.owned_.get();
        m.size_ = bytes.size();
        return m;
    }

    const uint8_t* data() const { return data_; }
    uint64_t size() const { return size_; }

private:
    struct AlignedDelete {
        void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t{64}); }
    };
    void reset() {
        if (data_ && !owned_) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
        owned_.reset();
        data_ = nullptr;
        size_ = 0;
    }
    const uint8_t* data_ = nullptr;
    uint64_t size_ = 0;
    std::unique_ptr<uint8_t[], AlignedDelete> owned_; // set for copies, null for mappings
};

template <class T>
T load_le(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
        using U = std::conditional_t<sizeof(T) == 2, uint16_t,
                                     std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
        U u;
        std::memcpy(&u, &v, sizeof(U));
        U r = 0;
        for (size_t i = 0; i < sizeof(U); ++i) r = static_cast<U>((r << 8) | ((u >> (8 * i)) & 0xff));
        std::memcpy(&v, &r, sizeof(U));
    }
    return v;
}

// Sequential, bounds-checked reader over the mapping. Every failure names the file and the
// field being read (`what`), with the offset where the problem is.
class Reader {
public:
    Reader(const std::string& path, const uint8_t* data, uint64_t size)
        : path_(path), data_(data), size_(size) {}

    uint64_t pos() const { return pos_; }
    uint64_t size() const { return size_; }
    uint64_t remaining() const { return size_ - pos_; }

    [[noreturn]] void fail(const std::string& what, const std::string& problem,
                           ErrorCode code = ErrorCode::format) const {
        throw Error(code, path_ + ": " + what + ": " + problem);
    }

    void need(uint64_t n, const std::string& what) const {
        if (n > remaining())
            fail(what, "truncated file: needs " + std::to_string(n) + " bytes at offset " +
                           std::to_string(pos_) + ", file has " + std::to_string(size_) + " bytes");
    }

    template <class T>
    T read(const std::string& what) {
        need(sizeof(T), what);
        T v = load_le<T>(data_ + pos_);
        pos_ += sizeof(T);
        return v;
    }

    // `index` >= 0: element `index` of the array `what`. The name is only built for an error:
    // vocabularies hold hundreds of thousands of strings.
    std::string read_string(const std::string& what, int64_t index = -1) {
        const auto name = [&] { return index < 0 ? what : what + "[" + std::to_string(index) + "]"; };
        if (remaining() < sizeof(uint64_t)) need(sizeof(uint64_t), name() + " (string length)");
        uint64_t len = load_le<uint64_t>(data_ + pos_);
        pos_ += sizeof(uint64_t);
        if (len > remaining())
            fail(name(), "string length " + std::to_string(len) + " at offset " +
                           std::to_string(pos_ - 8) + " runs past the end of the file (" +
                           std::to_string(remaining()) + " bytes left)");
        std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
        pos_ += len;
        return s;
    }

private:
    const std::string& path_;
    const uint8_t* data_;
    uint64_t size_;
    uint64_t pos_ = 0;
};

GgufValue read_value(Reader& r, uint32_t type, const std::string& what, int depth);

GgufValue read_array(Reader& r, const std::string& what, int depth) {
    if (depth >= kMaxArrayDepth)
        r.fail(what, "arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
    uint32_t elem_type = r.read<uint32_t>(what + " (array element type)");
    if (!known_value_type(elem_type))
        r.fail(what, "unknown array element type id " + std::to_string(elem_type));
    uint64_t count = r.read<uint64_t>(what + " (array length)");
    // Bound the count by the bytes left before allocating anything for it.
    uint64_t min_size = min_encoded_size(elem_type);
    if (count > r.remaining() / min_size)
        r.fail(what, "array length " + std::to_string(count) + " of " +
                         gguf_value_type_name(static_cast<GgufValueType>(elem_type)) +
                         " runs past the end of the file (" + std::to_string(r.remaining()) +
                         " bytes left)");
    auto arr = std::make_shared<GgufArray>();
    arr->type = static_cast<GgufValueType>(elem_type);
    arr->values.reserve(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) {
        // Element names only for the types whose reads can fail in ways worth pinpointing (a
        // string builds its name only on failure); the array name is precise enough for scalars
        // (their size was pre-checked).
        if (elem_type == static_cast<uint32_t>(GgufValueType::String))
            arr->values.push_back(r.read_string(what, static_cast<int64_t>(i)));
        else if (elem_type == static_cast<uint32_t>(GgufValueType::Array) ||
                 elem_type == static_cast<uint32_t>(GgufValueType::Bool))
            arr->values.push_back(read_value(r, elem_type, what + "[" + std::to_string(i) + "]", depth + 1));
        else
            arr->values.push_back(read_value(r, elem_type, what, depth + 1));
    }
    return arr;
}

GgufValue read_value(Reader& r, uint32_t type, const std::string& what, int depth) {
    switch (static_cast<GgufValueType>(type)) {
    case GgufValueType::UInt8: return r.read<uint8_t>(what);
    case GgufValueType::Int8: return r.read<int8_t>(what);
    case GgufValueType::UInt16: return r.read<uint16_t>(what);
    case GgufValueType::Int16: return r.read<int16_t>(what);
    case GgufValueType::UInt32: return r.read<uint32_t>(what);
    case GgufValueType::Int32: return r.read<int32_t>(what);
    case GgufValueType::Float32: return r.read<float>(what);
    case GgufValueType::Bool: {
        uint8_t b = r.read<uint8_t>(what);
        if (b > 1) r.fail(what, "invalid bool value " + std::to_string(b) + " (must be 0 or 1)");
        return b == 1;
    }
    case GgufValueType::String: return r.read_string(what);
    case GgufValueType::Array: return read_array(r, what, depth);
    case GgufValueType::UInt64: return r.read<uint64_t>(what);
    case GgufValueType::Int64: return r.read<int64_t>(what);
    case GgufValueType::Float64: return r.read<double>(what);
    }
    r.fail(what, "unknown value type id " + std::to_string(type));
}

std::string dims_to_string(const std::vector<uint64_t>& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

// Integer value of a scalar metadata value, if it is of an integer type.
struct IntValue {
    bool is_int = false;
    bool negative = false;
    uint64_t magnitude_u = 0; // value when !negative
    int64_t value_s = 0;      // value when negative
};

IntValue int_value(const GgufValue& v) {
    IntValue out;
    std::visit(
        [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
                out.is_int = true;
                if constexpr (std::is_signed_v<T>) {
                    if (x < 0) {
                        out.negative = true;
                        out.value_s = static_cast<int64_t>(x);
                    } else {
                        out.magnitude_u = static_cast<uint64_t>(x);
                    }
                } else {
                    out.magnitude_u = static_cast<uint64_t>(x);
                }
            }
        },
        v);
    return out;
}

bool is_integer_type(GgufValueType t) {
    switch (t) {
    case GgufValueType::UInt8: case GgufValueType::Int8: case GgufValueType::UInt16:
    case GgufValueType::Int16: case GgufValueType::UInt32: case GgufValueType::Int32:
    case GgufValueType::UInt64: case GgufValueType::Int64: return true;
    default: return false;
    }
}

std::string escape_string(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
            if (c < 0x20 || c == 0x7f) {
                static const char* hex = "0123456789abcdef";
                out += "\\x";
                out += hex[c >> 4];
                out += hex[c & 15];
            } else {
                out += static_cast<char>(c); // UTF-8 passes through unchanged
            }
        }
    }
    return out + "\"";
}

template <class F>
std::string float_to_string(F f) {
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, f);
    return std::string(buf, res.ptr);
}

} // namespace

std::string tensor_type_name(TensorType t) {
    TypeTraits tt;
    if (type_traits(t, tt)) return tt.name;
    return "type#" + std::to_string(static_cast<uint32_t>(t));
}

bool tensor_type_block(TensorType t, uint64_t& block_elems, uint64_t& block_bytes) {
    TypeTraits tt;
    if (!type_traits(t, tt)) return false;
    block_elems = tt.block_elems;
    block_bytes = tt.block_bytes;
    return true;
}

const char* gguf_value_type_name(GgufValueType t) {
    switch (t) {
    case GgufValueType::UInt8: return "uint8";
    case GgufValueType::Int8: return "int8";
    case GgufValueType::UInt16: return "uint16";
    case GgufValueType::Int16: return "int16";
    case GgufValueType::UInt32: return "uint32";
    case GgufValueType::Int32: return "int32";
    case GgufValueType::Float32: return "float32";
    case GgufValueType::Bool: return "bool";
    case GgufValueType::String: return "string";
    case GgufValueType::Array: return "array";
    case GgufValueType::UInt64: return "uint64";
    case GgufValueType::Int64: return "int64";
    case GgufValueType::Float64: return "float64";
    }
    return "unknown";
}

std::string gguf_value_to_string(const GgufValue& v, size_t max_elems) {
    return std::visit(
        [&](const auto& x) -> std::string {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, bool>) {
                return x ? "true" : "false";
            } else if constexpr (std::is_same_v<T, std::string>) {
                return escape_string(x);
            } else if constexpr (std::is_same_v<T, std::shared_ptr<GgufArray>>) {
                if (!x) return "[]";
                std::string s = "[";
                size_t n = x->values.size();
                size_t shown = std::min(n, max_elems);
                for (size_t i = 0; i < shown; ++i) {
                    if (i) s += ", ";
                    s += gguf_value_to_string(x->values[i], max_elems);
                }
                if (shown < n) s += (shown ? ", ... (" : "... (") + std::to_string(n) + " total)";
                return s + "]";
            } else if constexpr (std::is_floating_point_v<T>) {
                return float_to_string(x);
            } else {
                return std::to_string(x); // integers (int8/uint8 print as numbers, not chars)
            }
        },
        v);
}

struct GgufFile::Impl {
    std::string path;
    Mapping map;
    uint32_t version = 0;
    uint64_t alignment = kDefaultAlignment;
    uint64_t data_offset = 0;
    std::vector<GgufKeyValue> kvs;
    std::map<std::string, size_t, std::less<>> kv_index;
    std::vector<GgufTensorInfo> tensors;
    std::map<std::string, size_t, std::less<>> tensor_index;

    // parse(): the steps below in order, then the tensors' data placed and checked.
    void parse();
    void parse_header(Reader& r, uint64_t& n_tensors, uint64_t& n_kv);
    void parse_alignment();
    GgufTensorInfo parse_tensor_info(Reader& r, uint64_t i) const;
    void place_tensor_data(Reader& r);
    void check_no_overlap() const;
    [[noreturn]] void fail(const std::string& what, const std::string& problem) const {
        throw Error(ErrorCode::format, path + ": " + what + ": " + problem);
    }
};

void GgufFile::Impl::parse() {
    Reader r(path, map.data(), map.size());
    uint64_t n_tensors = 0, n_kv = 0;
    parse_header(r, n_tensors, n_kv);
    kvs.reserve(static_cast<size_t>(n_kv));
    for (uint64_t i = 0; i < n_kv; ++i) {
        std::string where = "metadata key #" + std::to_string(i);
        GgufKeyValue kv;
        kv.key = r.read_string(where);
        where = "metadata '" + kv.key + "'";
        uint32_t type = r.read<uint32_t>(where + " (value type)");
        if (!known_value_type(type)) r.fail(where, "unknown value type id " + std::to_string(type));
        kv.type = static_cast<GgufValueType>(type);
        kv.value = read_value(r, type, where, 0);
        if (kv_index.count(kv.key)) r.fail(where, "duplicate key");
        kv_index.emplace(kv.key, kvs.size());
        kvs.push_back(std::move(kv));
    }
    parse_alignment();
    tensors.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t i = 0; i < n_tensors; ++i) {
        GgufTensorInfo ti = parse_tensor_info(r, i);
        if (tensor_index.count(ti.name)) r.fail("tensor '" + ti.name + "'", "duplicate tensor name");
        tensor_index.emplace(ti.name, tensors.size());
        tensors.push_back(std::move(ti));
    }
    place_tensor_data(r);
}

// Magic, version, tensor count, key/value count; the counts checked against the bytes left.
void GgufFile::Impl::parse_header(Reader& r, uint64_t& n_tensors, uint64_t& n_kv) {
    if (map.size() < 4)
        r.fail("header", "truncated file: " + std::to_string(map.size()) +
                             " bytes is too short for the GGUF magic");
    const uint8_t* m = map.data();
    if (std::memcmp(m, "GGUF", 4) != 0) {
        std::string shown;
        for (int i = 0; i < 4; ++i) {
            if (m[i] >= 0x20 && m[i] < 0x7f) {
                shown += static_cast<char>(m[i]);
            } else {
                static const char* hex = "0123456789abcdef";
                shown += {'\\', 'x', hex[m[i] >> 4], hex[m[i] & 15]};
            }
        }
        r.fail("header", "bad magic '" + shown + "' (not a GGUF file)");
    }
    r.read<uint32_t>("header (magic)");
    version = r.read<uint32_t>("header (version)");
    if (version != 2 && version != 3) {
        uint32_t swapped = ((version & 0xffu) << 24) | ((version & 0xff00u) << 8) |
                           ((version >> 8) & 0xff00u) | (version >> 24);
        if (swapped == 2 || swapped == 3)
            r.fail("header", "big-endian GGUF files are not supported (version field " +
                                 std::to_string(version) + ")",
                   ErrorCode::unsupported);
        r.fail("header", "unsupported GGUF version " + std::to_string(version) +
                             " (supported: 2, 3)", ErrorCode::unsupported);
    }
    n_tensors = r.read<uint64_t>("header (tensor count)");
    n_kv = r.read<uint64_t>("header (metadata count)");
    // Each key/value needs at least a key length, a type and one byte of value; each tensor info
    // at least a name length, n_dims, one dim, a type and an offset. Checking the counts against
    // that up front keeps a corrupt count from driving allocations.
    auto check_count = [&](uint64_t count, uint64_t min_bytes, const char* what) {
        if (count > r.remaining() / min_bytes)
            r.fail("header", std::string(what) + " " + std::to_string(count) +
                                 " is impossible: that many entries need more than the " +
                                 std::to_string(r.remaining()) +
                                 " bytes left in the file (corrupt count or truncated file)");
    };
    check_count(n_kv, 8 + 4 + 1, "metadata count");
    check_count(n_tensors, 8 + 4 + 8 + 4 + 8, "tensor count");
}

// One tensor's info: name, dims, type, offset; its element count and byte size checked.
GgufTensorInfo GgufFile::Impl::parse_tensor_info(Reader& r, uint64_t i) const {
    std::string where = "tensor #" + std::to_string(i);
    GgufTensorInfo ti;
    ti.name = r.read_string(where + " (name)");
    where = "tensor '" + ti.name + "'";
    uint32_t n_dims = r.read<uint32_t>(where + " (n_dims)");
    if (n_dims == 0 || n_dims > kMaxDims)
        r.fail(where, "n_dims " + std::to_string(n_dims) + " out of range 1.." +
                          std::to_string(kMaxDims));
    ti.dims.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) ti.dims[d] = r.read<uint64_t>(where + " (dims)");
    uint32_t type = r.read<uint32_t>(where + " (type)");
    ti.type = static_cast<TensorType>(type);
    ti.offset = r.read<uint64_t>(where + " (offset)");

    TypeTraits tt;
    if (!type_traits(ti.type, tt))
        r.fail(where, "unknown or unsupported tensor type id " + std::to_string(type));
    // ggml counts elements in int64: every dim and their product must fit.
    uint64_t n = 1;
    for (uint64_t d : ti.dims) {
        if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
            (d != 0 && n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / d))
            r.fail(where, "dims " + dims_to_string(ti.dims) + " overflow the element count");
        n *= d;
    }
    ti.n_elements = n;
    if (ti.dims[0] % tt.block_elems != 0)
        r.fail(where, "row length " + std::to_string(ti.dims[0]) + " is not a multiple of the " +
                          tt.name + " block size " + std::to_string(tt.block_elems));
    uint64_t n_blocks = n / tt.block_elems;
    if (n_blocks > std::numeric_limits<uint64_t>::max() / tt.block_bytes)
        r.fail(where, "dims " + dims_to_string(ti.dims) + " overflow the byte size");
    ti.n_bytes = n_blocks * tt.block_bytes;
    return ti;
}

// The data section starts at the next multiple of the alignment after the header; each tensor's
// bytes must lie inside it.
void GgufFile::Impl::place_tensor_data(Reader& r) {
    uint64_t header_end = r.pos();
    uint64_t rem = header_end % alignment;
    uint64_t pad = rem ? alignment - rem : 0;
    if (pad > std::numeric_limits<uint64_t>::max() - header_end)
        r.fail("data section", "start offset overflows with alignment " + std::to_string(alignment));
    data_offset = header_end + pad;
    if (tensors.empty()) return; // vocabulary-only files may end right after the header
    if (data_offset > map.size())
        r.fail("data section", "starts at offset " + std::to_string(data_offset) +
                                   ", past the end of the file (" + std::to_string(map.size()) +
                                   " bytes; truncated file?)");
    uint64_t data_size = map.size() - data_offset;

    for (GgufTensorInfo& ti : tensors) {
        std::string where = "tensor '" + ti.name + "'";
        if (ti.offset % alignment != 0)
            fail(where, "data offset " + std::to_string(ti.offset) + " is not a multiple of the alignment " +
                            std::to_string(alignment));
        if (ti.offset > data_size || ti.n_bytes > data_size - ti.offset)
            fail(where, "data [" + std::to_string(ti.offset) + ", +" + std::to_string(ti.n_bytes) +
                            " bytes) runs past the end of the file (data section holds " +
                            std::to_string(data_size) + " bytes; truncated file?)");
        ti.data = map.data() + data_offset + ti.offset;
    }
    check_no_overlap();
}

void GgufFile::Impl::check_no_overlap() const {
    // Tensors must not share bytes: a view of one would silently alias another.
    std::vector<const GgufTensorInfo*> by_offset;
    by_offset.reserve(tensors.size());
    for (const GgufTensorInfo& ti : tensors)
        if (ti.n_bytes) by_offset.push_back(&ti);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const GgufTensorInfo* a = by_offset[i - 1];
        const GgufTensorInfo* b = by_offset[i];
        if (a->offset + a->n_bytes > b->offset) // no overflow: both were checked against data_size
            fail("tensor '" + b->name + "'", "data overlaps tensor '" + a->name + "'");
    }
}

void GgufFile::Impl::parse_alignment() {
    auto it = kv_index.find(std::string_view("general.alignment"));
    if (it == kv_index.end()) return;
    const GgufKeyValue& kv = kvs[it->second];
    IntValue iv = int_value(kv.value);
    if (!iv.is_int)
        fail("metadata 'general.alignment'", std::string("has type ") + gguf_value_type_name(kv.type) +
                                                 ", expected an integer");
    if (iv.negative || iv.magnitude_u == 0 || !std::has_single_bit(iv.magnitude_u))
        fail("metadata 'general.alignment'",
             "value " + (iv.negative ? std::to_string(iv.value_s) : std::to_string(iv.magnitude_u)) +
                 " is not a positive power of two");
    alignment = iv.magnitude_u;
}

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::string& path) {
    auto impl = std::make_unique<Impl>();
    impl->path = path;
    impl->map = Mapping::map(path);
    impl->parse();
    return GgufFile(std::move(impl));
}

GgufFile GgufFile::from_memory(const std::string& name, std::span<const uint8_t> bytes) {
    auto impl = std::make_unique<Impl>();
    impl->path = name;
    impl->map = Mapping::copy(bytes);
    impl->parse();
    return GgufFile(std::move(impl));
}

const std::string& GgufFile::path() const { return impl_->path; }
uint32_t GgufFile::version() const { return impl_->version; }
uint64_t GgufFile::alignment() const { return impl_->alignment; }
uint64_t GgufFile::file_size() const { return impl_->map.size(); }
const std::vector<GgufKeyValue>& GgufFile::metadata() const { return impl_->kvs; }
const std::vector<GgufTensorInfo>& GgufFile::tensors() const { return impl_->tensors; }

const GgufKeyValue* GgufFile::find(std::string_view key) const {
    auto it = impl_->kv_index.find(key);
    return it == impl_->kv_index.end() ? nullptr : &impl_->kvs[it->second];
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
    auto it = impl_->tensor_index.find(name);
    return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

namespace {

[[noreturn]] void type_error(const std::string& path, const GgufKeyValue& kv, const std::string& expected) {
    std::string got = gguf_value_type_name(kv.type);
    if (kv.type == GgufValueType::Array) {
        const auto& arr = std::get<std::shared_ptr<GgufArray>>(kv.value);
        got += std::string(" of ") + gguf_value_type_name(arr->type);
    }
    throw Error(ErrorCode::format, path + ": metadata '" + kv.key + "' has type " + got + ", expected " + expected);
}

const GgufArray& array_of(const std::string& path, const GgufKeyValue& kv, const std::string& expected) {
    if (kv.type != GgufValueType::Array) type_error(path, kv, expected);
    return *std::get<std::shared_ptr<GgufArray>>(kv.value);
}

} // namespace

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
    const GgufKeyValue* kv = find(key);
    if (!kv) return std::nullopt;
    if (kv->type != GgufValueType::String) type_error(path(), *kv, "string");
    return std::get<std::string>(kv->value);
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
    const GgufKeyValue* kv = find(key);
    if (!kv) return std::nullopt;
    IntValue iv = int_value(kv->value);
    if (!iv.is_int) type_error(path(), *kv, "an integer");
    if (iv.negative)
        throw Error(ErrorCode::format, path() + ": metadata '" + kv->key + "': value " + std::to_string(iv.value_s) +
                    " is negative, expected an unsigned integer");
    return iv.magnitude_u;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
    const GgufKeyValue* kv = find(key);
    if (!kv) return std::nullopt;
    IntValue iv = int_value(kv->value);
    if (!iv.is_int) type_error(path(), *kv, "an integer");
    if (iv.negative) return iv.value_s;
    if (iv.magnitude_u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw Error(ErrorCode::format, path() + ": metadata '" + kv->key + "': value " + std::to_string(iv.magnitude_u) +
                    " does not fit in a signed 64-bit integer");
    return static_cast<int64_t>(iv.magnitude_u);
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
    const GgufKeyValue* kv = find(key);
    if (!kv) return std::nullopt;
    if (kv->type == GgufValueType::Float32) return static_cast<double>(std::get<float>(kv->value));
    if (kv->type == GgufValueType::Float64) return std::get<double>(kv->value);
    IntValue iv = int_value(kv->value);
    if (!iv.is_int) type_error(path(), *kv, "a number");
    return iv.negative ? static_cast<double>(iv.value_s) : static_cast<double>(iv.magnitude_u);
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
    const GgufKeyValue* kv = find(key);
    if (!kv) return std::nullopt;
    if (kv->type != GgufValueType::Bool) type_error(path(), *kv, "bool");
    return std::get<bool>(kv->value);
}

std::optional<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
    const GgufKeyValue* kv = find(key);
    if (!kv) return std::nullopt;
    const GgufArray& arr = array_of(path(), *kv, "array of string");
    if (arr.type != GgufValueType::String) type_error(path(), *kv, "array of string");
    std::vector<std::string> out;
    out.reserve(arr.values.size());
    for (const GgufValue& v : arr.values) out.push_back(std::get<std::string>(v));
    return out;
}

std::optional<std::vector<float>> GgufFile::get_float_array(std::string_view key) const {
    const GgufKeyValue* kv = find(key);
    if (!kv) return std::nullopt;
    const GgufArray& arr = array_of(path(), *kv, "array of float32");
    std::vector<float> out;
    out.reserve(arr.values.size());
    if (arr.type == GgufValueType::Float32) {
        for (const GgufValue& v : arr.values) out.push_back(std::get<float>(v));
    } else if (arr.type == GgufValueType::Float64) {
        for (const GgufValue& v : arr.values) out.push_back(static_cast<float>(std::get<double>(v)));
    } else {
        type_error(path(), *kv, "array of float32");
    }
    return out;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
    const GgufKeyValue* kv = find(key);
    if (!kv) return std::nullopt;
    const GgufArray& arr = array_of(path(), *kv, "array of integers");
    if (!is_integer_type(arr.type)) type_error(path(), *kv, "array of integers");
    std::vector<int64_t> out;
    out.reserve(arr.values.size());
    for (size_t i = 0; i < arr.values.size(); ++i) {
        IntValue iv = int_value(arr.values[i]);
        if (iv.negative) {
            out.push_back(iv.value_s);
        } else if (iv.magnitude_u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            throw Error(ErrorCode::format, path() + ": metadata '" + kv->key + "'[" + std::to_string(i) + "]: value " +
                        std::to_string(iv.magnitude_u) + " does not fit in a signed 64-bit integer");
        } else {
            out.push_back(static_cast<int64_t>(iv.magnitude_u));
        }
    }
    return out;
}

} // namespace rwd
