// The text a request's tokens spell, released to the client only once no stop string can still
// begin in it, and cut before the first stop string (OpenAI leaves it out).
#pragma once
#include <span>
#include <string>
#include <vector>

#include "rewind/tokenizer.h"

namespace rwd::serve {

class TextStream {
public:
    // `tok` must outlive this.
    TextStream(const Tokenizer& tok, std::vector<std::string> stops);
    // The text newly safe to send after `ids` were appended (final: the request has ended).
    std::string push(std::span<const TokenId> ids, bool final);
    const std::string& text() const { return text_; }

private:
    Utf8StreamDecoder dec_;
    std::vector<std::string> stops_;
    std::string text_;  // decoded so far, cut at a stop string
    size_t sent_ = 0;   // bytes of text_ released
    size_t hold_ = 0;   // bytes held back: the longest stop string less one
    bool stopped_ = false;
};

} // namespace rwd::serve
