// Test-only GGUF tooling shared by the GGUF and model tests: an independent writer that can also
// re-serialize a real file with edits, a map of where each header field lies in a file (to
// truncate or patch precisely), and temp-file helpers. Inputs here are trusted test fixtures.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "rewind/error.h"

namespace gguf_test {

inline std::string shared_dir() { return REWIND_SHARED_DIR; }
inline std::string model_path(const std::string& name) { return shared_dir() + "/models/" + name; }
inline std::string vocab_path(const std::string& name) { return shared_dir() + "/vocab/" + name; }

inline std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot read " + path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// Error message of `f()`, or "" if it did not throw rwd::Error.
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const rwd::Error& e) {
        return e.what();
    }
    return "";
}

inline void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) throw std::runtime_error("cannot write " + path);
}

// A per-process scratch directory, removed with everything in it on destruction.
class TempDir {
public:
    TempDir() {
        path_ = std::filesystem::temp_directory_path() /
                ("rewind-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    static int& counter() {
        static int n = 0;
        return n;
    }
    std::filesystem::path path_;
};

// Little-endian encoders.
struct Enc {
    std::string b;
    template <class T>
    Enc& put(T v) {
        char raw[sizeof(T)];
        std::memcpy(raw, &v, sizeof(T));
        b.append(raw, sizeof(T));
        return *this;
    }
    Enc& u8(uint8_t v) { return put(v); }
    Enc& u32(uint32_t v) { return put(v); }
    Enc& u64(uint64_t v) { return put(v); }
    Enc& str(const std::string& s) {
        u64(s.size());
        b += s;
        return *this;
    }
};

// Value type ids as in the format.
enum : uint32_t { U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STR = 8, ARR = 9, U64 = 10, I64 = 11, F64 = 12 };

template <class T>
inline std::string raw(T v) { return Enc{}.put(v).b; }
inline std::string raw_str(const std::string& s) { return Enc{}.str(s).b; }

struct RawKv {
    std::string key;
    uint32_t type;
    std::string value; // encoded value bytes
};
struct RawTensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    std::string data;
    bool keep_offset = false; // write `offset` as is instead of laying the tensor out
    uint64_t offset = 0;
};

// Writes GGUF files. Layout uses `alignment` (independently of any general.alignment key, so a
// test can make them disagree).
struct Builder {
    uint32_t version = 3;
    uint64_t alignment = 32;
    std::vector<RawKv> kvs;
    std::vector<RawTensor> tensors;

    Builder& set(const std::string& key, uint32_t type, const std::string& value) {
        for (RawKv& kv : kvs)
            if (kv.key == key) {
                kv.type = type;
                kv.value = value;
                return *this;
            }
        kvs.push_back({key, type, value});
        return *this;
    }
    Builder& remove_kv(const std::string& key) {
        std::erase_if(kvs, [&](const RawKv& kv) { return kv.key == key; });
        return *this;
    }
    RawTensor* tensor(const std::string& name) {
        for (RawTensor& t : tensors)
            if (t.name == name) return &t;
        return nullptr;
    }
    Builder& remove_tensor(const std::string& name) {
        std::erase_if(tensors, [&](const RawTensor& t) { return t.name == name; });
        return *this;
    }

    std::string serialize() const {
        Enc e;
        e.b = "GGUF";
        e.u32(version).u64(tensors.size()).u64(kvs.size());
        for (const RawKv& kv : kvs) {
            e.str(kv.key).u32(kv.type);
            e.b += kv.value;
        }
        std::string data;
        for (const RawTensor& t : tensors) {
            uint64_t off = t.offset;
            if (!t.keep_offset) {
                while (data.size() % alignment) data += '\0';
                off = data.size();
                data += t.data;
            }
            e.str(t.name).u32(static_cast<uint32_t>(t.dims.size()));
            for (uint64_t d : t.dims) e.u64(d);
            e.u32(t.type).u64(off);
        }
        if (!tensors.empty())
            while (e.b.size() % alignment) e.b += '\0';
        return e.b + data;
    }

    void write(const std::string& path) const { write_file(path, serialize()); }

    // Reads a well-formed file (fixtures only: no validation beyond what the tests need).
    static Builder load(const std::string& path);
};

// Where each part of a file's header lies (byte offsets), from an independent walk.
struct Layout {
    struct Kv {
        std::string key;
        uint32_t type;
        uint64_t start, type_at, value_at, end;
    };
    struct Tensor {
        std::string name;
        uint64_t start, n_dims_at, dims_at, type_at, offset_at, end;
        uint32_t n_dims, type;
        uint64_t offset;
    };
    uint64_t header_end = 0; // end of the tensor infos
    uint64_t data_start = 0;
    std::vector<Kv> kvs;
    std::vector<Tensor> tensors;
    const Kv* kv(const std::string& key) const {
        for (const Kv& k : kvs)
            if (k.key == key) return &k;
        return nullptr;
    }
};

namespace detail {
struct Cursor {
    const std::string& b;
    uint64_t pos = 0;
    template <class T>
    T get() {
        if (pos + sizeof(T) > b.size()) throw std::runtime_error("fixture truncated");
        T v;
        std::memcpy(&v, b.data() + pos, sizeof(T));
        pos += sizeof(T);
        return v;
    }
    std::string str() {
        uint64_t n = get<uint64_t>();
        if (n > b.size() - pos) throw std::runtime_error("fixture string too long");
        std::string s = b.substr(pos, n);
        pos += n;
        return s;
    }
    void skip_value(uint32_t type) {
        switch (type) {
        case U8: case I8: case BOOL: pos += 1; break;
        case U16: case I16: pos += 2; break;
        case U32: case I32: case F32: pos += 4; break;
        case U64: case I64: case F64: pos += 8; break;
        case STR: str(); break;
        case ARR: {
            uint32_t et = get<uint32_t>();
            uint64_t n = get<uint64_t>();
            for (uint64_t i = 0; i < n; ++i) skip_value(et);
            break;
        }
        default: throw std::runtime_error("fixture has unknown value type");
        }
    }
};
} // namespace detail

inline Layout scan(const std::string& bytes) {
    Layout L;
    detail::Cursor c{bytes};
    c.pos = 8;
    uint64_t n_tensors = c.get<uint64_t>();
    uint64_t n_kv = c.get<uint64_t>();
    uint64_t alignment = 32;
    for (uint64_t i = 0; i < n_kv; ++i) {
        Layout::Kv k;
        k.start = c.pos;
        k.key = c.str();
        k.type_at = c.pos;
        k.type = c.get<uint32_t>();
        k.value_at = c.pos;
        if (k.key == "general.alignment") {
            uint32_t a = c.get<uint32_t>();
            alignment = a;
        } else {
            c.skip_value(k.type);
        }
        k.end = c.pos;
        L.kvs.push_back(k);
    }
    for (uint64_t i = 0; i < n_tensors; ++i) {
        Layout::Tensor t;
        t.start = c.pos;
        t.name = c.str();
        t.n_dims_at = c.pos;
        t.n_dims = c.get<uint32_t>();
        t.dims_at = c.pos;
        c.pos += 8ull * t.n_dims;
        t.type_at = c.pos;
        t.type = c.get<uint32_t>();
        t.offset_at = c.pos;
        t.offset = c.get<uint64_t>();
        t.end = c.pos;
        L.tensors.push_back(t);
    }
    L.header_end = c.pos;
    L.data_start = (c.pos + alignment - 1) / alignment * alignment;
    return L;
}

inline Builder Builder::load(const std::string& path) {
    std::string bytes = read_file(path);
    Layout L = scan(bytes);
    Builder b;
    std::memcpy(&b.version, bytes.data() + 4, 4);
    for (const Layout::Kv& k : L.kvs) {
        b.kvs.push_back({k.key, k.type, bytes.substr(k.value_at, k.end - k.value_at)});
        if (k.key == "general.alignment") {
            uint32_t a;
            std::memcpy(&a, bytes.data() + k.value_at, 4);
            b.alignment = a;
        }
    }
    // Tensor sizes: F32/F16/Q8_0 are all the fixtures use.
    for (const Layout::Tensor& t : L.tensors) {
        RawTensor rt;
        rt.name = t.name;
        rt.type = t.type;
        uint64_t n = 1;
        for (uint32_t d = 0; d < t.n_dims; ++d) {
            uint64_t v;
            std::memcpy(&v, bytes.data() + t.dims_at + 8 * d, 8);
            rt.dims.push_back(v);
            n *= v;
        }
        uint64_t nb = t.type == 0 ? n * 4 : t.type == 1 ? n * 2 : t.type == 8 ? n / 32 * 34 : 0;
        if (nb == 0) throw std::runtime_error("fixture tensor type not handled by the test loader");
        rt.data = bytes.substr(L.data_start + t.offset, nb);
        b.tensors.push_back(std::move(rt));
    }
    return b;
}

// Overwrites sizeof(T) bytes at `at`.
template <class T>
inline std::string patched(std::string bytes, uint64_t at, T v) {
    std::memcpy(bytes.data() + at, &v, sizeof(T));
    return bytes;
}

} // namespace gguf_test
