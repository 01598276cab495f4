// libFuzzer target: rwd::fuzz::gguf (see entries.h for what it feeds and checks).
#include "entries.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    rwd::fuzz::prepare("gguf");
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    rwd::fuzz::gguf(std::span<const uint8_t>(data, size));
    return 0;
}
