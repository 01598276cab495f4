// GGUF v3 writer: buffers the header in memory (metadata and tensor table are small), then
// streams tensor data through a fixed buffer into an AtomicFileWriter (rewind/file_io.h: temporary
// file, fsync, rename into place, fsync of the directory).
#include "rewind/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "rewind/file_io.h"

namespace rwd {

namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr size_t kBufferBytes = size_t{4} << 20;

// Little-endian encoding into a byte string.
class Enc {
public:
    template <class T>
    void put(T v) {
        static_assert(std::is_trivially_copyable_v<T>);
        if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
            uint8_t raw[sizeof(T)];
            std::memcpy(raw, &v, sizeof(T));
            std::reverse(raw, raw + sizeof(T));
            b_.append(reinterpret_cast<const char*>(raw), sizeof(T));
        } else {
            b_.append(reinterpret_cast<const char*>(&v), sizeof(T));
        }
    }
    void str(const std::string& s) {
        put<uint64_t>(s.size());
        b_ += s;
    }
    std::string& bytes() { return b_; }
    const std::string& bytes() const { return b_; }

private:
    std::string b_;
};

GgufValueType type_of(const GgufValue& v) { return static_cast<GgufValueType>(v.index()); }

// Checks and encodes a value whose type is `t` (the variant's alternative must agree).
void encode_value(Enc& e, const GgufValue& v, const std::string& where, int depth = 0) {
    if (depth > 8) throw Error(where + ": arrays nested too deeply");
    switch (type_of(v)) {
    case GgufValueType::UInt8: e.put(std::get<uint8_t>(v)); return;
    case GgufValueType::Int8: e.put(std::get<int8_t>(v)); return;
    case GgufValueType::UInt16: e.put(std::get<uint16_t>(v)); return;
    case GgufValueType::Int16: e.put(std::get<int16_t>(v)); return;
    case GgufValueType::UInt32: e.put(std::get<uint32_t>(v)); return;
    case GgufValueType::Int32: e.put(std::get<int32_t>(v)); return;
    case GgufValueType::Float32: e.put(std::get<float>(v)); return;
    case GgufValueType::Bool: e.put<uint8_t>(std::get<bool>(v) ? 1 : 0); return;
    case GgufValueType::String: e.str(std::get<std::string>(v)); return;
    case GgufValueType::UInt64: e.put(std::get<uint64_t>(v)); return;
    case GgufValueType::Int64: e.put(std::get<int64_t>(v)); return;
    case GgufValueType::Float64: e.put(std::get<double>(v)); return;
    case GgufValueType::Array: {
        const auto& a = std::get<std::shared_ptr<GgufArray>>(v);
        if (!a) throw Error(where + ": null array");
        e.put(static_cast<uint32_t>(a->type));
        e.put<uint64_t>(a->values.size());
        for (size_t i = 0; i < a->values.size(); ++i) {
            if (type_of(a->values[i]) != a->type)
                throw Error(where + ": array element " + std::to_string(i) + " has type " +
                            gguf_value_type_name(type_of(a->values[i])) + ", the array holds " +
                            gguf_value_type_name(a->type));
            encode_value(e, a->values[i], where, depth + 1);
        }
        return;
    }
    }
    throw Error(where + ": unknown value type");
}

uint64_t padding(uint64_t offset, uint64_t alignment) {
    const uint64_t rem = offset % alignment;
    return rem ? alignment - rem : 0;
}

struct Tensor {
    std::string name;
    TensorType type;
    std::vector<uint64_t> dims;
    uint64_t offset = 0; // in the data section
    uint64_t n_bytes = 0;
};

} // namespace

struct GgufWriter::Impl {
    std::string path;
    uint64_t alignment = kDefaultAlignment;
    std::unique_ptr<AtomicFileWriter> file; // null until created
    bool finished = false;
    bool usable() const { return file && file->open(); }

    Enc kv_bytes;
    uint64_t n_kv = 0;
    std::set<std::string> keys;
    std::vector<Tensor> tensors;
    std::set<std::string> names;
    uint64_t data_bytes = 0; // data section size so far, padded

    bool header_written = false;
    size_t cur = 0;          // tensor being written
    uint64_t cur_done = 0;   // its bytes written so far
    std::vector<char> buf;
    size_t buf_used = 0;

    [[noreturn]] void fail(const std::string& what) const { throw Error(path + ": " + what); }

    void flush_buffer() {
        file->write(buf.data(), buf_used); // on failure the temporary file is gone
        buf_used = 0;
    }
    void put(const void* p, size_t n) {
        const char* c = static_cast<const char*>(p);
        while (n > 0) {
            if (buf_used == buf.size()) flush_buffer();
            const size_t k = std::min(n, buf.size() - buf_used);
            std::memcpy(buf.data() + buf_used, c, k);
            buf_used += k;
            c += k;
            n -= k;
        }
    }
    void zeros(uint64_t n) {
        static const char z[64] = {};
        while (n > 0) {
            const size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof z));
            put(z, k);
            n -= k;
        }
    }

    std::string header() {
        Enc e;
        e.put<uint32_t>(0x46554747u); // "GGUF" read as a little-endian u32
        e.put<uint32_t>(3);
        e.put<uint64_t>(tensors.size());
        e.put<uint64_t>(n_kv);
        e.bytes() += kv_bytes.bytes();
        for (const Tensor& t : tensors) {
            e.str(t.name);
            e.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
            for (uint64_t d : t.dims) e.put<uint64_t>(d);
            e.put<uint32_t>(static_cast<uint32_t>(t.type));
            e.put<uint64_t>(t.offset);
        }
        return std::move(e.bytes());
    }

    void write_header() {
        if (alignment != kDefaultAlignment && !keys.count("general.alignment")) {
            Enc e;
            e.str("general.alignment");
            e.put<uint32_t>(static_cast<uint32_t>(GgufValueType::UInt32));
            e.put<uint32_t>(static_cast<uint32_t>(alignment));
            kv_bytes.bytes() += e.bytes();
            ++n_kv;
            keys.insert("general.alignment");
        }
        const std::string h = header();
        put(h.data(), h.size());
        zeros(padding(h.size(), alignment));
        header_written = true;
        skip_empty();
    }

    // Moves past finished tensors, writing the padding after each.
    void skip_empty() {
        while (cur < tensors.size() && cur_done == tensors[cur].n_bytes) {
            zeros(padding(tensors[cur].offset + tensors[cur].n_bytes, alignment));
            ++cur;
            cur_done = 0;
        }
    }

    void remove_tmp() {
        if (file) file->discard();
    }
};

GgufWriter::GgufWriter(const std::string& path, uint64_t alignment) : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.path = path;
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (uint64_t{1} << 30))
        m.fail("alignment " + std::to_string(alignment) + " is not a power of two up to 2^30");
    m.alignment = alignment;
    if (std::filesystem::path(path).filename().empty()) m.fail("not a file name");
    m.file = std::make_unique<AtomicFileWriter>(path);
    m.buf.resize(kBufferBytes);
}

GgufWriter::~GgufWriter() {
    if (impl_ && !impl_->finished) impl_->remove_tmp();
}

const std::string& GgufWriter::path() const { return impl_->path; }

bool GgufWriter::has(const std::string& key) const { return impl_->keys.count(key) > 0; }

void GgufWriter::add(const std::string& key, GgufValue value) {
    Impl& m = *impl_;
    const std::string where = "metadata '" + key + "'";
    if (m.header_written || m.finished) m.fail(where + ": added after the tensor data began");
    if (key.empty()) m.fail("metadata key is empty");
    if (m.keys.count(key)) m.fail(where + ": duplicate key");
    if (key == "general.alignment") {
        const auto* u = std::get_if<uint32_t>(&value);
        if (!u || *u != m.alignment)
            m.fail(where + ": must be a uint32 equal to the writer's alignment " + std::to_string(m.alignment));
    }
    Enc e;
    e.str(key);
    e.put<uint32_t>(static_cast<uint32_t>(type_of(value)));
    encode_value(e, value, m.path + ": " + where);
    m.kv_bytes.bytes() += e.bytes();
    ++m.n_kv;
    m.keys.insert(key);
}

void GgufWriter::add(const GgufKeyValue& kv) {
    if (type_of(kv.value) != kv.type)
        impl_->fail("metadata '" + kv.key + "': declared type " + gguf_value_type_name(kv.type) +
                    " but the value is " + gguf_value_type_name(type_of(kv.value)));
    add(kv.key, kv.value);
}

uint64_t GgufWriter::tensor_bytes(TensorType type, const std::vector<uint64_t>& dims) {
    uint64_t be = 0, bb = 0;
    if (!tensor_type_block(type, be, bb)) throw Error("unknown tensor type " + tensor_type_name(type));
    if (dims.empty()) return 0;
    uint64_t rows = 1;
    for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
    return dims[0] / be * bb * rows;
}

void GgufWriter::add_tensor(const std::string& name, TensorType type, const std::vector<uint64_t>& dims) {
    Impl& m = *impl_;
    const std::string where = "tensor '" + name + "'";
    if (m.header_written || m.finished) m.fail(where + ": declared after the tensor data began");
    if (name.empty()) m.fail("tensor name is empty");
    if (m.names.count(name)) m.fail(where + ": duplicate name");
    if (dims.empty() || dims.size() > 4) m.fail(where + ": " + std::to_string(dims.size()) + " dims (1..4 allowed)");
    uint64_t be = 0, bb = 0;
    if (!tensor_type_block(type, be, bb)) m.fail(where + ": unknown type " + tensor_type_name(type));
    for (uint64_t d : dims)
        if (d == 0 || d > (uint64_t{1} << 40)) m.fail(where + ": dim " + std::to_string(d) + " out of range");
    if (dims[0] % be != 0)
        m.fail(where + ": row length " + std::to_string(dims[0]) + " is not a multiple of " +
               tensor_type_name(type) + "'s block of " + std::to_string(be));
    Tensor t{name, type, dims, m.data_bytes, tensor_bytes(type, dims)};
    m.data_bytes = t.offset + t.n_bytes + padding(t.offset + t.n_bytes, m.alignment);
    m.names.insert(name);
    m.tensors.push_back(std::move(t));
}

void GgufWriter::write(const void* data, size_t n) {
    Impl& m = *impl_;
    if (m.finished || !m.usable()) m.fail("write after finish or after a failure");
    try {
        if (!m.header_written) m.write_header();
        const char* p = static_cast<const char*>(data);
        while (n > 0) {
            if (m.cur >= m.tensors.size())
                m.fail("more tensor data written than the " + std::to_string(m.tensors.size()) +
                       " declared tensors hold");
            const Tensor& t = m.tensors[m.cur];
            const size_t k = static_cast<size_t>(std::min<uint64_t>(n, t.n_bytes - m.cur_done));
            m.put(p, k);
            m.cur_done += k;
            p += k;
            n -= k;
            m.skip_empty();
        }
    } catch (...) {
        m.remove_tmp(); // a failed file is gone at once, not at destruction
        throw;
    }
}

void GgufWriter::finish() {
    Impl& m = *impl_;
    if (m.finished || !m.usable()) m.fail("finish after finish or after a failure");
    try {
        if (!m.header_written) m.write_header();
        if (m.cur < m.tensors.size())
            m.fail("tensor '" + m.tensors[m.cur].name + "' has " + std::to_string(m.cur_done) + " of its " +
                   std::to_string(m.tensors[m.cur].n_bytes) + " bytes written");
        m.flush_buffer();
        m.file->commit();
    } catch (...) {
        m.remove_tmp();
        throw;
    }
    m.finished = true;
}

uint64_t GgufWriter::file_size() const {
    const Impl& m = *impl_;
    uint64_t extra = 0; // general.alignment, added when the header is written
    if (m.alignment != kDefaultAlignment && !m.keys.count("general.alignment"))
        extra = 8 + std::string("general.alignment").size() + 4 + 4;
    uint64_t h = 4 + 4 + 8 + 8 + m.kv_bytes.bytes().size() + extra;
    for (const Tensor& t : m.tensors) h += 8 + t.name.size() + 4 + 8 * t.dims.size() + 4 + 8;
    return h + padding(h, m.alignment) + m.data_bytes;
}

} // namespace rwd
