// See tensor_map.h.
#include "ops/cuda/tensor_map.h"

#include "ops/cuda/cuda_check.h"

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace detfuzz::cuda_kernels {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void *f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    DETFUZZ_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !f)
      throw std::runtime_error("the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

namespace {

MatrixMap encode_matrix_map(const char *who, CUtensorMapDataType type, const void *base, int64_t cols, int64_t rows,
                            int64_t ld, int64_t batch, int64_t batch_stride, int box_cols, int box_rows,
                            CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2_fill) {
  const cuuint64_t elem_bytes = type == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ? 4
                                : type == CU_TENSOR_MAP_DATA_TYPE_UINT8 ? 1
                                                                        : 2;
  MatrixMap m{};
  const bool r3 = batch > 1 && batch_stride != 0;
  m.rank3 = r3 ? 1 : 0;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(ld) * elem_bytes,
                                 static_cast<cuuint64_t>(batch_stride) * elem_bytes};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUresult r = encode_tiled()(&m.map, type, r3 ? 3 : 2, const_cast<void *>(base), dims, strides, box, elem,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, l2_fill, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error(std::string(who) + ": cuTensorMapEncodeTiled failed (CUresult " +
                             std::to_string(static_cast<int>(r)) + ") for a " + std::to_string(rows) + " x " +
                             std::to_string(cols) + " operand, ld " + std::to_string(ld));
  return m;
}

}  // namespace

MatrixMap matrix_map(const char *who, CUtensorMapDataType type, const void *base, int64_t cols, int64_t rows,
                     int64_t ld, int64_t batch, int64_t batch_stride, int box_cols, int box_rows,
                     CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2_fill) {
  struct Key {
    CUtensorMapDataType type;
    const void *base;
    int64_t cols, rows, ld, batch, batch_stride;
    int box_cols, box_rows;
    CUtensorMapSwizzle swizzle;
    CUtensorMapL2promotion l2_fill;
    bool operator==(const Key &o) const {
      return type == o.type && base == o.base && cols == o.cols && rows == o.rows && ld == o.ld && batch == o.batch &&
             batch_stride == o.batch_stride && box_cols == o.box_cols && box_rows == o.box_rows &&
             swizzle == o.swizzle && l2_fill == o.l2_fill;
    }
  };
  struct Entry {
    Key key;
    MatrixMap map;
    bool used;
  };
  constexpr int kEntries = 64;
  thread_local Entry cache[kEntries] = {};
  thread_local int next = 0;
  const Key key{type, base, cols, rows, ld, batch, batch_stride, box_cols, box_rows, swizzle, l2_fill};
  for (const Entry &e : cache)
    if (e.used && e.key == key) return e.map;
  const MatrixMap m =
      encode_matrix_map(who, type, base, cols, rows, ld, batch, batch_stride, box_cols, box_rows, swizzle, l2_fill);
  cache[next] = Entry{key, m, true};
  next = (next + 1) % kEntries;
  return m;
}

}  // namespace detfuzz::cuda_kernels
