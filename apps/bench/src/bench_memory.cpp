// Memory bandwidth: threads each stream their slice of one buffer; the wall time from a common
// start to the last finish gives the rate. Weight bytes per token from the model's tensor sizes;
// the process's peak resident memory.
#include "rewind/bench/bench_memory.h"

#include <sys/mman.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rewind/error.h"
#include "rewind/kernels/packed.h"

namespace rwd::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Sums the words of [p, p + n): four independent sums keep loads in flight; the result is
// consumed so the reads are not optimised away.
uint64_t sum_words(const uint64_t* p, int64_t n) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    for (; i < n; ++i) s0 += p[i];
    return s0 + s1 + s2 + s3;
}

// The same sum with a software prefetch 8 KiB ahead, as the packed weight bodies do: a core's
// plain stream can be held back by how few misses it keeps in flight, and then decode (which
// prefetches) would read faster than the probe, a share above 100 %. The probe keeps the fastest
// of its readers, so it states what a read-only stream can get, not what one loop style gets.
uint64_t sum_words_prefetched(const uint64_t* p, int64_t n) {
    constexpr int64_t kAhead = 1024; // words: 8 KiB
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + kAhead + 8 <= n; i += 8) { // one prefetch per 64-byte line, never past the slice
        __builtin_prefetch(p + i + kAhead, 0, 3);
        s0 += p[i] + p[i + 4];
        s1 += p[i + 1] + p[i + 5];
        s2 += p[i + 2] + p[i + 6];
        s3 += p[i + 3] + p[i + 7];
    }
    return s0 + s1 + s2 + s3 + sum_words(p + i, n - i);
}

#if defined(__x86_64__) || defined(__i386__)
// The same two readers with 32-byte loads, for CPUs with AVX2: a core that streams faster than
// one 8-byte load a cycle can take (Zen 5 decodes above 30 GB/s on one thread) would otherwise
// time the loop, not the memory, and decode would show a share above 100 %.
__attribute__((target("avx2"))) uint64_t sum_vectors(const uint64_t* p, int64_t n, bool prefetch) {
    constexpr int64_t kAhead = 1024; // words: 8 KiB
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) { // 128 bytes: two lines
        if (prefetch && i + kAhead + 16 <= n) {
            __builtin_prefetch(p + i + kAhead, 0, 3);
            __builtin_prefetch(p + i + kAhead + 8, 0, 3);
        }
        s0 = _mm256_add_epi64(s0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
        s2 = _mm256_add_epi64(s2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
        s3 = _mm256_add_epi64(s3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
    }
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                       _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + sum_words(p + i, n - i);
}
uint64_t sum_vectors_plain(const uint64_t* p, int64_t n) { return sum_vectors(p, n, false); }
uint64_t sum_vectors_prefetched(const uint64_t* p, int64_t n) { return sum_vectors(p, n, true); }
#endif

using Reader = uint64_t (*)(const uint64_t*, int64_t);

// Every reader this CPU can run; the probe keeps the fastest.
std::vector<Reader> readers() {
    std::vector<Reader> r{sum_words, sum_words_prefetched};
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_cpu_supports("avx2")) r.insert(r.end(), {sum_vectors_plain, sum_vectors_prefetched});
#endif
    return r;
}

struct FreeDelete {
    void operator()(uint64_t* p) const { std::free(p); }
};

// `words` 64-bit words, 2 MiB-aligned and advised as transparent huge pages (small pages where
// the kernel has none). Throws rwd::Error when the memory cannot be had.
std::unique_ptr<uint64_t[], FreeDelete> huge_page_words(int64_t words) {
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t bytes = (static_cast<size_t>(words) * 8 + kHuge - 1) / kHuge * kHuge;
    std::unique_ptr<uint64_t[], FreeDelete> p(static_cast<uint64_t*>(std::aligned_alloc(kHuge, bytes)));
    if (!p) throw Error(ErrorCode::capacity, "memory bandwidth: cannot allocate " + std::to_string(bytes) + " bytes");
#ifdef MADV_HUGEPAGE
    (void)::madvise(p.get(), bytes, MADV_HUGEPAGE);
#endif
    return p;
}

// Runs body(thread, begin, end) over [0, words) split in `threads` slices, all started together;
// returns the wall time from the start signal to the last slice done.
template <class Body>
double timed_split(int threads, int64_t words, Body&& body) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    auto slice = [&](int t) {
        const int64_t b = words * t / threads, e = words * (t + 1) / threads;
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        body(t, b, e);
    };
    for (int t = 1; t < threads; ++t) pool.emplace_back(slice, t);
    while (ready.load() < threads - 1) std::this_thread::yield();
    const auto t0 = Clock::now();
    go.store(true, std::memory_order_release);
    ready.fetch_add(1);
    body(0, 0, words / threads);
    for (auto& th : pool) th.join();
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

} // namespace

MemoryBandwidth measure_memory_bandwidth(int threads, int64_t bytes, int repeats) {
    if (threads < 1) throw Error("memory bandwidth: threads must be at least 1");
    if (repeats < 1) throw Error("memory bandwidth: repeats must be at least 1");
    if (bytes < (int64_t{1} << 20)) throw Error("memory bandwidth: buffer must be at least 1 MiB");
    const int64_t words = bytes / 8;
    // Written once, so every page is mapped before timing (no page faults in the timed passes).
    // Huge pages as the repacked weights have (Model::load), so the probe measures the memory,
    // not 4 KiB page walks, and the decode fraction is not flattered by a slowed-down probe.
    auto src = huge_page_words(words);
    auto dst = huge_page_words(words);
    for (int64_t i = 0; i < words; ++i) src[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
    std::memset(dst.get(), 0, static_cast<size_t>(words) * 8);

    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    auto copy = [&](int, int64_t b, int64_t e) {
        std::memcpy(dst.get() + b, src.get() + b, static_cast<size_t>(e - b) * 8);
    };
    const std::vector<Reader> all = readers();
    double best_read = 0, best_copy = 0;
    for (int i = 0; i <= repeats; ++i) { // pass 0 warms up
        double r = 1e300;
        for (Reader fn : all)
            r = std::min(r, timed_split(threads, words, [&](int t, int64_t b, int64_t e) {
                             sums[static_cast<size_t>(t)] += fn(src.get() + b, e - b);
                         }));
        const double c = timed_split(threads, words, copy);
        if (i == 0) continue;
        best_read = std::max(best_read, static_cast<double>(words * 8) / r / 1e9);
        best_copy = std::max(best_copy, static_cast<double>(words * 16) / c / 1e9);
    }
    // Keep the sums observable.
    volatile uint64_t sink = 0;
    for (uint64_t s : sums) sink = sink + s;
    (void)sink;
    return {threads, words * 8, best_read, best_copy};
}

namespace {

// The mean bytes of one expert (gate, up, down) in the form it is read in: packed on first use
// where its type is repacked. 0 without experts.
double mean_expert_bytes(const Model& model) {
    const LlamaHparams& hp = model.hparams();
    if (!hp.is_moe()) return 0;
    double all = 0;
    for (const Model::Layer& l : model.layers)
        for (const std::vector<MatrixView>* ex : {&l.gate_exps, &l.up_exps, &l.down_exps})
            for (const MatrixView& v : *ex)
                all += static_cast<double>(repacked_at_load(v.type, model.options())
                                               ? packed_bytes(v.type, v.rows, v.cols)
                                               : dtype_row_bytes(v.type, v.cols) * static_cast<size_t>(v.rows));
    return all / static_cast<double>(hp.n_layer * hp.n_expert);
}

} // namespace

int64_t weight_bytes_per_token(const Model& model) {
    const LlamaWeights& w = model.file().weights();
    auto bytes = [](const WeightRef& r) { return static_cast<int64_t>(r.n_bytes); };
    int64_t total = bytes(w.output_norm) + bytes(w.output);
    if (w.tok_embd.rows > 0) total += bytes(w.tok_embd) / w.tok_embd.rows; // one row, looked up
    for (const LlamaLayerWeights& l : w.layers)
        for (const WeightRef* r : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wqkv, &l.bq, &l.bk, &l.bv, &l.attn_q_norm,
                                   &l.attn_k_norm, &l.wo, &l.post_attn_norm, &l.ffn_norm, &l.ffn_gate, &l.ffn_down,
                                   &l.ffn_up, &l.post_ffn_norm, &l.ffn_gate_inp})
            total += bytes(*r);
    // The repacked matrices are read in their packed form: swap their file bytes for it.
    int64_t packed_file_bytes = 0;
    auto add_packed = [&](const MatrixView& v) {
        if (v.packed) packed_file_bytes += static_cast<int64_t>(dtype_row_bytes(v.type, v.cols)) * v.rows;
    };
    add_packed(model.output);
    for (const Model::Layer& l : model.layers)
        for (const MatrixView* v : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.ffn_gate, &l.ffn_down, &l.ffn_up, &l.ffn_gate_inp})
            add_packed(*v);
    const LlamaHparams& hp = model.hparams();
    if (hp.is_moe())
        total += static_cast<int64_t>(std::llround(mean_expert_bytes(model) * static_cast<double>(hp.n_expert_used * hp.n_layer)));
    return total - packed_file_bytes + static_cast<int64_t>(model.packed_bytes());
}

int64_t peak_resident_bytes() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::strtoll(line.c_str() + 6, nullptr, 10) * 1024; // "VmHWM:  N kB"
    return 0;
}

bool reset_peak_resident() {
    std::ofstream f("/proc/self/clear_refs");
    if (!f) return false;
    f << "5";
    f.flush();
    return static_cast<bool>(f);
}

ExpertBytes expert_bytes(const Model& model) {
    const LlamaHparams& hp = model.hparams();
    if (!hp.is_moe()) return {};
    ExpertBytes b;
    b.per_expert = mean_expert_bytes(model);
    b.dense = weight_bytes_per_token(model) -
              static_cast<int64_t>(std::llround(b.per_expert * static_cast<double>(hp.n_expert_used * hp.n_layer)));
    return b;
}

double bandwidth_fraction(int64_t bytes_per_token, double tokens_per_second, double read_gbps) {
    if (bytes_per_token <= 0 || !(tokens_per_second > 0) || !(read_gbps > 0)) return 0;
    return static_cast<double>(bytes_per_token) * tokens_per_second / (read_gbps * 1e9);
}

} // namespace rwd::bench
