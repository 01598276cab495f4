// libFuzzer target: rwd::fuzz::tokenizer (see entries.h for what it feeds and checks).
#include "entries.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    rwd::fuzz::prepare("tokenizer");
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    rwd::fuzz::tokenizer(std::span<const uint8_t>(data, size));
    return 0;
}
