// Bounded whole-file reads and atomic, durable file replacement (POSIX: open/read/write/fsync/
// rename). See rewind/file_io.h for the guarantees.
#include "rewind/file_io.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>
#include <utility>

#include "rewind/error.h"

namespace rwd {
namespace {

std::string errno_text(int e) { return std::generic_category().message(e); }

struct Fd {
    int fd = -1;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

std::string megabytes(size_t n) {
    if (n % (size_t{1} << 20) == 0) return std::to_string(n >> 20) + " MiB";
    return std::to_string(n) + " bytes";
}

} // namespace

std::string read_file_limited(const std::string& path, size_t max_bytes, const std::string& what) {
    Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (f.fd < 0) throw Error(ErrorCode::io, path + ": cannot open the " + what + ": " + errno_text(errno));
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) throw Error(ErrorCode::io, path + ": cannot stat the " + what + ": " + errno_text(errno));
    if (S_ISDIR(st.st_mode)) throw Error(ErrorCode::io, path + ": the " + what + " is a directory");
    auto too_large = [&](const std::string& size) {
        return Error(ErrorCode::capacity, path + ": the " + what + " is " + size + ", over the limit of " + megabytes(max_bytes));
    };
    // A regular file says its size up front: refuse it before reading a byte.
    if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > max_bytes)
        throw too_large(std::to_string(st.st_size) + " bytes");
    std::string out;
    if (S_ISREG(st.st_mode)) out.reserve(static_cast<size_t>(st.st_size));
    // Pipes and devices (or a file that grows while we read) are read up to one byte past the limit.
    char buf[1 << 16];
    while (true) {
        const size_t room = max_bytes + 1 - out.size();
        const ssize_t n = ::read(f.fd, buf, std::min(sizeof buf, room));
        if (n < 0) {
            if (errno == EINTR) continue;
            throw Error(ErrorCode::io, path + ": cannot read the " + what + ": " + errno_text(errno));
        }
        if (n == 0) break;
        out.append(buf, static_cast<size_t>(n));
        if (out.size() > max_bytes) throw too_large("more than " + megabytes(max_bytes));
    }
    return out;
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
    tmp_ = path_ + ".tmp-XXXXXX";
    fd_ = ::mkstemp(tmp_.data());
    if (fd_ < 0) {
        const int e = errno;
        done_ = true;
        throw Error(ErrorCode::io, path_ + ": cannot create a temporary file beside it: " + errno_text(e));
    }
    // mkstemp creates 0600: keep the mode of the file being replaced, else an ordinary 0644.
    struct stat old {};
    const mode_t mode = ::stat(path_.c_str(), &old) == 0 ? (old.st_mode & 07777) : 0644;
    if (::fchmod(fd_, mode) != 0) fail("chmod");
}

AtomicFileWriter::~AtomicFileWriter() { discard(); }

void AtomicFileWriter::discard() noexcept {
    if (done_) return;
    done_ = true;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    ::unlink(tmp_.c_str());
}

void AtomicFileWriter::fail(const std::string& step) {
    const int e = errno;
    discard();
    throw Error(ErrorCode::io, path_ + ": " + step + " failed: " + errno_text(e) + " (the previous file, if any, is unchanged)");
}

void AtomicFileWriter::write(const void* data, size_t n) {
    if (done_) throw Error(ErrorCode::io, path_ + ": write after the file was committed or abandoned");
    const auto* p = static_cast<const std::byte*>(data);
    while (n > 0) {
        const ssize_t k = ::write(fd_, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            fail("write");
        }
        if (k == 0) {
            errno = EIO;
            fail("write");
        }
        p += k;
        n -= static_cast<size_t>(k);
    }
}

void AtomicFileWriter::commit() {
    if (done_) throw Error(ErrorCode::io, path_ + ": commit after the file was committed or abandoned");
    if (::fsync(fd_) != 0) fail("fsync");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("close");
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename into place");
    done_ = true;
    // The rename is durable once the directory entry is on disk.
    const size_t slash = path_.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
    Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
    if (d.fd < 0 || ::fsync(d.fd) != 0)
        throw Error(ErrorCode::io, path_ + ": written, but syncing its directory failed: " + errno_text(errno));
}

void write_file_atomic(const std::string& path, std::span<const std::byte> bytes) {
    AtomicFileWriter f(path);
    f.write(bytes.data(), bytes.size());
    f.commit();
}

} // namespace rwd
