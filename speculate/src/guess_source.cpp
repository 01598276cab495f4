// Small shared pieces of the guess-source interface.
#include "rewind/speculate/guess_source.h"

#include <string>

#include "rewind/error.h"

namespace rwd::speculate {

void check_k(std::string_view source, int k) {
    if (k < 1)
        throw Error(std::string(source) + ": asked for " + std::to_string(k) + " guesses; k must be at least 1");
}

} // namespace rwd::speculate
