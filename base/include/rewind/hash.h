// The non-cryptographic hashes rewind uses in more than one place, written once: FNV-1a (model
// fingerprints, KV cache file checksums) and SplitMix64's finaliser (counter-based sampling
// randomness, n-gram keys). Header-only: each is a few instructions.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace rwd {

// SplitMix64's finaliser: a bijective 64-bit mix with full avalanche.
constexpr uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// FNV-1a, 64-bit, fed byte by byte (bytes, u64, str, f32). blob() is for bulk data (tensor
// bytes): four interleaved lanes of 8-byte words so that the multiply chains overlap (one lane is
// latency bound), folded back into the main state; its digest differs from bytes()'.
class Fnv1a {
public:
    static constexpr uint64_t kBasis = 0xcbf29ce484222325ull;
    static constexpr uint64_t kPrime = 0x100000001b3ull;

    void bytes(const void* data, size_t n) {
        const auto* p = static_cast<const uint8_t*>(data);
        for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * kPrime;
    }
    void u64(uint64_t v) {
        uint8_t b[8];
        for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i)); // fixed byte order
        bytes(b, 8);
    }
    void str(const std::string& s) {
        u64(s.size());
        bytes(s.data(), s.size());
    }
    void f32(float f) { u64(std::bit_cast<uint32_t>(f)); }

    void blob(const uint8_t* p, uint64_t n) {
        u64(n);
        uint64_t lane[4] = {h_, h_ ^ 1, h_ ^ 2, h_ ^ 3};
        uint64_t i = 0;
        for (; i + 32 <= n; i += 32)
            for (int l = 0; l < 4; ++l) lane[l] = (lane[l] ^ word(p + i + 8 * l)) * kPrime;
        for (int l = 0; l < 4; ++l) u64(lane[l]);
        bytes(p + i, static_cast<size_t>(n - i));
    }

    uint64_t value() const { return h_; }

private:
    static uint64_t word(const uint8_t* p) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        if constexpr (std::endian::native == std::endian::big) {
            uint64_t r = 0;
            for (int i = 0; i < 8; ++i) r = (r << 8) | ((v >> (8 * i)) & 0xff);
            v = r;
        }
        return v;
    }
    uint64_t h_ = kBasis;
};

} // namespace rwd
