// The packed-weight interface (packed.h) as Model::load uses it: a matrix repacked in slices of
// whole row groups gives the bytes of the whole matrix's repacking, so the loader can repack a
// large matrix slice by slice and drop each slice's file pages as it goes.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "kernel_test_util.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kernels/packed.h"

using namespace rwd;

namespace {

struct Aligned {
    std::unique_ptr<std::byte[]> mem;
    std::byte* p = nullptr;
    explicit Aligned(size_t n) : mem(new std::byte[n + 64]) {
        p = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(mem.get()) + 63) & ~uintptr_t(63));
        std::memset(p, 0xAB, n); // not zero: a slice must write every byte it owns
    }
};

// Quantized rows of type t: [rows, cols], cols a multiple of 256 (every packable block size).
std::vector<std::byte> quantized(DType t, int64_t rows, int64_t cols, uint32_t seed) {
    const std::vector<float> w = test::randn(size_t(rows * cols), seed, 0.5f);
    const size_t rb = dtype_row_bytes(t, cols);
    std::vector<std::byte> out(rb * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) quantize_row(t, w.data() + r * cols, cols, out.data() + size_t(r) * rb);
    return out;
}

} // namespace

TEST(Packed, RowSlicesOfWholeGroupsPackToTheWholeMatrixBytes) {
    // 2,600 rows: two slices of 1,024 and a last one of 552 rows, whose last group is padded.
    const int64_t rows = 2600, cols = 256, slice = 1024;
    for (DType t : {DType::Q8_0, DType::Q5_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
        SCOPED_TRACE(dtype_name(t));
        ASSERT_TRUE(packable(t));
        const std::vector<std::byte> q = quantized(t, rows, cols, 7);
        const size_t rb = dtype_row_bytes(t, cols);
        const size_t total = packed_bytes(t, rows, cols);
        Aligned whole(total), sliced(total);
        repack(MatrixView{t, q.data(), rows, cols}, {whole.p, total});
        size_t off = 0;
        for (int64_t r = 0; r < rows; r += slice) {
            const int64_t n = std::min(slice, rows - r);
            const size_t bytes = packed_bytes(t, n, cols);
            ASSERT_EQ(off % 64, 0u) << "slice at row " << r << " would break the destination alignment";
            repack(MatrixView{t, q.data() + size_t(r) * rb, n, cols}, {sliced.p + off, bytes});
            off += bytes;
        }
        ASSERT_EQ(off, total);
        EXPECT_EQ(std::memcmp(whole.p, sliced.p, total), 0);
    }
}
