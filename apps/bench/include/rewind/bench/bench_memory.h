// The machine's memory read bandwidth, measured by rewind itself (a read and a copy of a buffer
// far larger than the caches, on 1 and on N threads), and what decoding reaches of it: a decode
// pass reads every weight once, so weight bytes per token x tokens/s is its memory traffic.
#pragma once
#include <cstdint>

#include "rewind/model.h"
#include "rewind/bench/bench_result.h"

namespace rwd::bench {

// Reads (sums 64-bit words, plainly and with software prefetch, and with 32-byte loads where the
// CPU has AVX2: the fastest counts) and copies
// (memcpy into a second buffer) `bytes` of huge-page memory split over `threads` threads, `repeats`
// times each after one untimed pass; keeps the best. Throws rwd::Error on
// threads < 1, repeats < 1 or bytes below 1 MiB.
MemoryBandwidth measure_memory_bandwidth(int threads, int64_t bytes = int64_t{512} << 20, int repeats = 5);

// Bytes a one-token decode pass reads from the weights: every layer matrix and norm, the output
// head, and one row of the token embedding (the head counted once even when tied to it); with
// experts, the router and n_expert_used of each layer's experts (their mean size); a
// repacked matrix counts its packed form (Q5_0 widened to the Q8_0 layout reads 34 bytes per 32
// weights, not the file's 22).
int64_t weight_bytes_per_token(const Model& model);

// A mixture-of-experts model's weight bytes split as a pass reads them: `dense`, what every pass
// reads once whatever its tokens (attention, router, norms, head, one embedding row:
// weight_bytes_per_token less one token's experts), and `per_expert`, the mean bytes of one
// expert's gate, up and down in the form read. Both 0 for a dense model.
struct ExpertBytes {
    int64_t dense = 0;
    double per_expert = 0;
};
ExpertBytes expert_bytes(const Model& model);

// (weight bytes per token x tokens per second) / (read bandwidth in bytes per second); 0 when
// any figure is missing (not positive).
double bandwidth_fraction(int64_t bytes_per_token, double tokens_per_second, double read_gbps);

// The process's peak resident memory so far (Linux: VmHWM of /proc/self/status, in bytes; 0 when
// unknown): what the model, its repacked weights, the caches and every buffer held at most at once.
int64_t peak_resident_bytes();
// Starts the peak over from the current resident memory (Linux: "5" into /proc/self/clear_refs),
// so that a measurement's own buffers (the bandwidth probe's 1 GiB) do not stand for the model's
// peak. Returns false when the peak cannot be reset (then it keeps counting from the start).
bool reset_peak_resident();

} // namespace rwd::bench
