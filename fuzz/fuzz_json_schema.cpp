// libFuzzer target: rwd::fuzz::json_schema (see entries.h for what it feeds and checks).
#include "entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    rwd::fuzz::json_schema(std::span<const uint8_t>(data, size));
    return 0;
}
