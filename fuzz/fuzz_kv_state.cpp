// libFuzzer target: rwd::fuzz::kv_state (see entries.h for what it feeds and checks).
#include "entries.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    rwd::fuzz::prepare("kv_state");
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    rwd::fuzz::kv_state(std::span<const uint8_t>(data, size));
    return 0;
}
