// Micro-benchmark of rewind's matmul on pycode-4m's shapes (dim 192, KV 64, FFN 512, vocab 4096):
// ns per call for 1..17 tokens, F32 and Q8_0, 1 and 2 threads, plus a whole-model sequence of the
// 43 matmuls of one forward pass (distinct weights per layer, so caches behave as in a real pass).
// Usage: matmul_bench [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "rewind/kernels/matmul.h"

using namespace rwd;

namespace {

using Clock = std::chrono::steady_clock;

struct Mat {
    DType type;
    int64_t rows, cols;
    std::vector<std::byte> data;
    MatrixView view() const { return {type, data.data(), rows, cols}; }
};

Mat make(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 0.1f);
    Mat m{type, rows, cols, std::vector<std::byte>(dtype_row_bytes(type, cols) * size_t(rows))};
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (auto& v : row) v = nd(rng);
        std::byte* dst = m.data.data() + size_t(r) * dtype_row_bytes(type, cols);
        if (type == DType::Q8_0) quantize_row_q8_0(row.data(), cols, reinterpret_cast<BlockQ8_0*>(dst));
        else std::memcpy(dst, row.data(), row.size() * 4);
    }
    return m;
}

// Best (lowest) mean ns per call of fn over many short timed batches (about 1 ms each), within
// about `budget_ms` in all: the minimum filters out the machine's other work.
template <class F>
double time_ns(F&& fn, double budget_ms) {
    for (int i = 0; i < 3; ++i) fn();
    int64_t reps = 1;
    for (;;) {
        const auto t0 = Clock::now();
        for (int64_t i = 0; i < reps; ++i) fn();
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (ms > 0.5 || reps > (1 << 24)) break;
        reps *= 2;
    }
    double best = 1e30;
    const auto start = Clock::now();
    for (int b = 0; b < 3 || std::chrono::duration<double, std::milli>(Clock::now() - start).count() < budget_ms; ++b) {
        const auto t0 = Clock::now();
        for (int64_t i = 0; i < reps; ++i) fn();
        best = std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / double(reps));
    }
    return best;
}

} // namespace

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
    const double budget = quick ? 4.0 : 20.0;
    const int64_t shapes[][2] = {{192, 192}, {64, 192}, {512, 192}, {192, 512}, {4096, 192}};
    const int64_t ns[] = {1, 2, 4, 8, 9, 16, 17};
    std::mt19937 rng(42);
    std::printf("matmul_bench: SIMD level %s\n", simd_name(detect_simd()));
    std::vector<float> x(17 * 512), y(17 * 4096);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : x) v = nd(rng);
    std::vector<std::byte> scratch(matmul_scratch_bytes(DType::Q8_0, 17, 512));

    for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        for (DType type : {DType::F32, DType::Q8_0}) {
            std::printf("\n%s, %d thread%s: ns per call\n%-10s", dtype_name(type), threads, threads > 1 ? "s" : "", "rows x cols");
            for (int64_t n : ns) std::printf(" %8s%-2lld", "n=", static_cast<long long>(n));
            std::printf("  9/1\n");
            for (const auto& sh : shapes) {
                const Mat m = make(type, sh[0], sh[1], rng);
                std::printf("%4lld x %-4lld", static_cast<long long>(sh[0]), static_cast<long long>(sh[1]));
                double t1 = 0, t9 = 0;
                for (int64_t n : ns) {
                    const double t = time_ns([&] { matmul(m.view(), x.data(), n, y.data(), scratch, &pool); }, budget);
                    if (n == 1) t1 = t;
                    if (n == 9) t9 = t;
                    std::printf(" %10.0f", t);
                }
                std::printf("  %4.2fx\n", t9 / t1);
            }
        }
    }

    // One forward pass worth of matmuls: 6 layers x (q, k, v, o, gate, up, down) + output head.
    std::printf("\nWhole-model matmul sequence (pycode-4m shapes, 6 layers + head), us per pass\n");
    for (DType type : {DType::F32, DType::Q8_0}) {
        std::vector<Mat> mats;
        for (int l = 0; l < 6; ++l)
            for (const auto& sh : {std::pair<int64_t, int64_t>{192, 192}, {64, 192}, {64, 192}, {192, 192}, {512, 192},
                                   {512, 192}, {192, 512}})
                mats.push_back(make(type, sh.first, sh.second, rng));
        mats.push_back(make(type, 4096, 192, rng));
        for (int threads : {1, 2}) {
            ThreadPool pool(threads);
            std::printf("%-5s %d thread%s:", dtype_name(type), threads, threads > 1 ? "s" : " ");
            double t1 = 0;
            for (int64_t n : ns) {
                const double t = time_ns([&] {
                    for (const auto& m : mats) matmul(m.view(), x.data(), n, y.data(), scratch, &pool);
                }, budget * 2);
                if (n == 1) t1 = t;
                std::printf("  n=%-2lld %7.1f", static_cast<long long>(n), t / 1000.0);
                if (n == 9) std::printf(" (%.2fx)", t / t1);
            }
            std::printf("\n");
        }
    }
    return 0;
}
