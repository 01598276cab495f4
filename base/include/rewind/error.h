// The one exception type rewind's libraries throw for bad input (files, tokens, shapes, options).
// Messages say what and where: "pycode.gguf: tensor 'blk.0.attn_q.weight': data past end of file";
// the code says which kind of failure it is, so a program can react without parsing the message.
#pragma once
#include <stdexcept>
#include <string>

namespace rwd {

// What went wrong, coarsely. Public functions name in their header comment the codes they throw.
enum class ErrorCode {
    io,          // a file cannot be opened, read, written or renamed
    format,      // a file or document is malformed, truncated or corrupted (GGUF, KV cache, workload)
    unsupported, // well formed but outside what rewind handles (architecture, tensor type, CPU level)
    shape,       // sizes disagree: a tensor's shape, a buffer's length, hyperparameters, a scratch span
    capacity,    // a limit would be passed: KV cache capacity, max_batch, a model's context length
    argument,    // an out-of-range option or value, a null pointer, a token id outside the vocabulary
    state,       // the object is not in a state that allows the call (a cache from another model, an
                 // empty session, mismatched draft and target)
};

// "io", "format", "unsupported", "shape", "capacity", "argument", "state".
constexpr const char* error_code_name(ErrorCode c) noexcept {
    switch (c) {
    case ErrorCode::io: return "io";
    case ErrorCode::format: return "format";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::shape: return "shape";
    case ErrorCode::capacity: return "capacity";
    case ErrorCode::argument: return "argument";
    case ErrorCode::state: return "state";
    }
    return "unknown";
}

class Error : public std::runtime_error {
public:
    Error(ErrorCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
    // Without a code: an argument error (the most common kind).
    explicit Error(const std::string& what) : Error(ErrorCode::argument, what) {}

    ErrorCode code() const noexcept { return code_; }

private:
    ErrorCode code_;
};

} // namespace rwd
