// Memory-mapped GGUF (v2, v3) reader: metadata key/values of every type, tensor infos and
// zero-copy views of tensor data. Every offset, count and size is validated on open.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "rewind/error.h"

namespace rwd {

// GGUF metadata value types (numbering fixed by the format).
enum class GgufValueType : uint32_t {
    UInt8 = 0, Int8 = 1, UInt16 = 2, Int16 = 3, UInt32 = 4, Int32 = 5, Float32 = 6, Bool = 7,
    String = 8, Array = 9, UInt64 = 10, Int64 = 11, Float64 = 12,
};

// ggml tensor types (numbering fixed by ggml). The reader accepts every id it knows the block
// layout of; the model loader decides which ones it can compute with.
enum class TensorType : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
};

// "F32", "Q8_0", ... ; "type#N" for an unknown id.
std::string tensor_type_name(TensorType t);
// Elements per block and bytes per block; returns false for an unknown type id.
bool tensor_type_block(TensorType t, uint64_t& block_elems, uint64_t& block_bytes);

struct GgufArray;
// A metadata value. Arrays hold their elements (nested arrays allowed).
using GgufValue = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, std::shared_ptr<GgufArray>, uint64_t, int64_t, double>;
struct GgufArray {
    GgufValueType type;            // element type
    std::vector<GgufValue> values; // elements
};

struct GgufKeyValue {
    std::string key;
    GgufValueType type;
    GgufValue value;
};

struct GgufTensorInfo {
    std::string name;
    TensorType type;
    std::vector<uint64_t> dims; // ggml order: dims[0] is the contiguous (row) dimension
    uint64_t offset = 0;        // relative to the start of the data section
    uint64_t n_elements = 0;
    uint64_t n_bytes = 0;
    const uint8_t* data = nullptr; // into the mapping; valid while the GgufFile lives
};

class GgufFile {
public:
    // Maps and validates `path`. Throws rwd::Error naming the file, the field or tensor and
    // what is wrong (truncation, bad magic/version, counts or lengths past the end, offsets
    // outside the file, misalignment, unknown type ids, dimension overflow): io if it cannot be
    // opened or mapped, unsupported for a big-endian file or a GGUF version other than 2 and 3,
    // format for everything else.
    static GgufFile open(const std::string& path);
    // The same parser over a copy of `bytes` (a file held in memory; the fuzz targets use it).
    // `name` stands for the path in errors and path().
    static GgufFile from_memory(const std::string& name, std::span<const uint8_t> bytes);

    GgufFile(GgufFile&&) noexcept;
    GgufFile& operator=(GgufFile&&) noexcept;
    ~GgufFile();

    const std::string& path() const;
    uint32_t version() const;
    uint64_t alignment() const;
    uint64_t file_size() const;

    const std::vector<GgufKeyValue>& metadata() const;
    const GgufKeyValue* find(std::string_view key) const; // nullptr if absent

    // Typed getters. Throw rwd::Error (format, naming the key) if the key is present with another type;
    // return std::nullopt if absent. Integer getters accept any integer type whose value fits.
    std::optional<std::string> get_string(std::string_view key) const;
    std::optional<uint64_t> get_uint(std::string_view key) const;
    std::optional<int64_t> get_int(std::string_view key) const;
    std::optional<double> get_float(std::string_view key) const; // any float or integer type
    std::optional<bool> get_bool(std::string_view key) const;
    // Arrays of a given element type; throw if present with another element type.
    std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
    std::optional<std::vector<float>> get_float_array(std::string_view key) const;
    std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;

    const std::vector<GgufTensorInfo>& tensors() const;
    const GgufTensorInfo* find_tensor(std::string_view name) const; // nullptr if absent

private:
    struct Impl;
    explicit GgufFile(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Human-readable rendering of a value (arrays abbreviated after `max_elems` elements).
std::string gguf_value_to_string(const GgufValue& v, size_t max_elems = 8);
const char* gguf_value_type_name(GgufValueType t);

} // namespace rwd
