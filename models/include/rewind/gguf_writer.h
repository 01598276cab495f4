// GGUF v3 writer: metadata of every value type, the tensor table with aligned offsets, and the
// tensor data appended as a stream (a file may be larger than memory). The file is written under
// a temporary name in the target's directory, synced and renamed into place only when complete
// (rwd::AtomicFileWriter), so a failure or a crash never leaves a half-written file under the final
// name, and any previous file there stays intact until then. Read back by rwd::GgufFile.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rewind/gguf.h"

namespace rwd {

class GgufWriter {
public:
    // Creates the temporary file "<path>.tmp-XXXXXX" beside `path`. `alignment` must be a power of
    // two (ggml's default is 32); when it is not 32, `general.alignment` is written too. Throws
    // rwd::Error naming the path if the file cannot be created (io) or the alignment is bad
    // (argument).
    explicit GgufWriter(const std::string& path, uint64_t alignment = 32);
    // Removes the temporary file unless finish() succeeded.
    ~GgufWriter();
    GgufWriter(const GgufWriter&) = delete;
    GgufWriter& operator=(const GgufWriter&) = delete;

    // Metadata, in the order added. The value's type is the variant's alternative (its index is
    // the GGUF value type); array elements must all be of the array's type. Throws rwd::Error on a
    // duplicate key, an empty key, a mistyped array element, or once data writing has begun.
    void add(const std::string& key, GgufValue value);
    void add(const GgufKeyValue& kv); // kv.type must agree with kv.value
    bool has(const std::string& key) const;

    // Declares a tensor (dims in ggml order: dims[0] is the row length). Its bytes follow in
    // declaration order through write(). Throws rwd::Error on a duplicate or empty name, 1..4
    // dims violated, a zero dim, a row length not a multiple of the type's block, or an unknown
    // type.
    void add_tensor(const std::string& name, TensorType type, const std::vector<uint64_t>& dims);

    // Bytes of tensor data: the first call writes the header (metadata and tensor table); then
    // each call appends to the tensors in declaration order (calls may split or span tensors;
    // padding between tensors is written here). Throws rwd::Error on a write failure (disk full)
    // (io) or more bytes than the declared tensors hold (argument); after a failure the temporary
    // file is gone and every later write() or finish() throws.
    void write(const void* data, size_t n);

    // Checks that every declared tensor byte was written, flushes and syncs the file, renames it
    // over `path` and syncs the directory. Throws rwd::Error (argument for missing bytes, io for a
    // system failure) with the temporary file removed and `path` as it was.
    void finish();

    // Size of one tensor's data and of the finished file; valid once all tensors are declared.
    static uint64_t tensor_bytes(TensorType type, const std::vector<uint64_t>& dims);
    uint64_t file_size() const;
    const std::string& path() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace rwd
