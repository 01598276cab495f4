// libFuzzer target: rwd::fuzz::reference (see entries.h for what it feeds and checks).
#include "entries.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    rwd::fuzz::prepare("reference");
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    rwd::fuzz::reference(std::span<const uint8_t>(data, size));
    return 0;
}
