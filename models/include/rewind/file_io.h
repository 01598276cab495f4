// Files rewind reads whole or writes for a user to keep: reads stop at a stated size limit (so an
// endless or huge input such as /dev/zero fails fast, in bounded memory), and writes replace the
// target atomically and durably (temporary file in the same directory, fsync, rename, fsync of
// the directory), so a crash or a full disk never leaves a half-written file under the final name.
// One home for that sequence: KV cache files (KvCache::save) and GGUF files (GgufWriter) use it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rwd {

// Size limits on the inputs the CLI and the harness read whole (documented in `rewind --help`).
// A prompt must fit the model's context anyway, and references are indexed in memory.
inline constexpr size_t kMaxPromptFileBytes = size_t{8} << 20;     // 8 MiB
inline constexpr size_t kMaxReferenceFileBytes = size_t{16} << 20; // 16 MiB per document
inline constexpr size_t kMaxWorkloadFileBytes = size_t{64} << 20;  // 64 MiB

// Reads all of `path` (a regular file, a pipe or a device) into memory, reading at most
// max_bytes + 1 bytes. Throws rwd::Error naming the path and `what` ("prompt file") when it cannot
// be opened or read, or is a directory (ErrorCode::io), or holds more than max_bytes bytes
// (ErrorCode::capacity); no more than
// max_bytes + 1 bytes are ever held, whatever the input.
std::string read_file_limited(const std::string& path, size_t max_bytes, const std::string& what);

// Replaces `path` with `bytes` in one go (an AtomicFileWriter: write, then commit). On any failure
// (open, short write, full disk, size limit, fsync, rename) throws rwd::Error (ErrorCode::io)
// naming the path and the system error, removes the temporary file and leaves any previous file
// at `path` untouched. A crash mid-write can leave a stray "<path>.tmp-*" file beside it, never a
// partial `path`.
void write_file_atomic(const std::string& path, std::span<const std::byte> bytes);

// The same replacement for data that arrives in pieces (a file larger than memory): a temporary
// file "<path>.tmp-XXXXXX" in the target's directory, with the mode of the file it replaces (else
// 0644); commit() fsyncs it, renames it over `path` and fsyncs the directory. Until commit()
// succeeds `path` is untouched. Every failure throws rwd::Error (ErrorCode::io) naming `path`,
// the step and the system error, and removes the temporary file (so does the destructor, unless
// committed); after a failure write() and commit() throw again.
class AtomicFileWriter {
public:
    explicit AtomicFileWriter(std::string path); // creates the temporary file
    ~AtomicFileWriter();
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

    void write(const void* data, size_t n);
    void commit();
    // Removes the temporary file now (nothing under `path` changes). Never throws.
    void discard() noexcept;

    const std::string& path() const { return path_; }
    // False once committed, abandoned or failed.
    bool open() const noexcept { return !done_; }

private:
    [[noreturn]] void fail(const std::string& step);
    std::string path_, tmp_;
    int fd_ = -1;
    bool done_ = false; // committed or discarded
};

} // namespace rwd
