// Small shared pieces of the guess-source interface.
#include "rewind/speculate/guess_source.h"

#include <string>

#include "rewind/error.h"

namespace rwd::speculate {

const char* verify_mode_name(VerifyMode m) {
    switch (m) {
    case VerifyMode::Exact: return "exact";
    case VerifyMode::Rejection: return "rejection";
    }
    return "?";
}

void check_k(std::string_view source, int k) {
    if (k < 1)
        throw Error(std::string(source) + ": asked for " + std::to_string(k) + " guesses; k must be at least 1");
}

} // namespace rwd::speculate
