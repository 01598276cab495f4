// TextStream: UTF-8-safe decoding with stop strings held back until they cannot match.
#include "text_stream.h"

#include <algorithm>

namespace rwd::serve {

TextStream::TextStream(const Tokenizer& tok, std::vector<std::string> stops) : dec_(tok, false), stops_(std::move(stops)) {
    for (const auto& s : stops_) hold_ = std::max(hold_, s.size() - 1);
}

std::string TextStream::push(std::span<const TokenId> ids, bool final) {
    for (TokenId id : ids) text_ += dec_.push(id);
    if (final) text_ += dec_.flush();
    if (!stopped_) {
        size_t cut = std::string::npos;
        for (const auto& s : stops_) cut = std::min(cut, text_.find(s));
        if (cut != std::string::npos) {
            text_.resize(cut);
            stopped_ = true;
        }
    }
    size_t safe = text_.size();
    if (!final && !stopped_) safe = text_.size() > hold_ ? text_.size() - hold_ : 0;
    safe = std::max(safe, sent_);
    std::string out = text_.substr(sent_, safe - sent_);
    sent_ = safe;
    return out;
}

} // namespace rwd::serve
