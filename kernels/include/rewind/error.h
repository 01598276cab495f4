// The one exception type rewind's libraries throw for bad input (files, tokens, shapes, options).
// Messages say what and where: "pycode.gguf: tensor 'blk.0.attn_q.weight': data past end of file".
#pragma once
#include <stdexcept>
#include <string>

namespace rwd {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

} // namespace rwd
