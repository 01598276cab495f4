// libFuzzer target: rwd::fuzz::serve_request (see entries.h for what it feeds and checks).
#include "entries.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    rwd::fuzz::prepare("serve_request");
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    rwd::fuzz::serve_request(std::span<const uint8_t>(data, size));
    return 0;
}
