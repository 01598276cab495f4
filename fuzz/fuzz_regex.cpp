// libFuzzer target: rwd::fuzz::regex (see entries.h for what it feeds and checks).
#include "entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    rwd::fuzz::regex(std::span<const uint8_t>(data, size));
    return 0;
}
