// matmul_reference: every row dequantized to float, then one Eigen product.
#include "matmul_reference.h"

#include <Eigen/Core>
#include <cstddef>

#include "rewind/error.h"
#include "rewind/kernels/dtype.h"

namespace rwd {

void matmul_reference(const MatrixView& w, const float* x, int64_t n_tokens, float* y) {
    if (!w.data || !x || !y) throw Error("matmul_reference: null pointer");
    if (w.rows <= 0 || w.cols <= 0 || n_tokens <= 0) throw Error(ErrorCode::shape, "matmul_reference: non-positive size");
    const size_t row_bytes = dtype_row_bytes(w.type, w.cols);
    using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    RowMajor wf(w.rows, w.cols);
    for (int64_t r = 0; r < w.rows; ++r)
        dequantize_row(w.type, static_cast<const std::byte*>(w.data) + size_t(r) * row_bytes, w.cols, &wf(r, 0));
    Eigen::Map<const RowMajor> xm(x, n_tokens, w.cols);
    Eigen::Map<RowMajor> ym(y, n_tokens, w.rows);
    ym.noalias() = xm * wf.transpose();
}

} // namespace rwd
