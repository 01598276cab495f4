// libFuzzer target: rwd::fuzz::gbnf (see entries.h for what it feeds and checks).
#include "entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    rwd::fuzz::gbnf(std::span<const uint8_t>(data, size));
    return 0;
}
