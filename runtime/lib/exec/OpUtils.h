//===- OpUtils.h - shape arithmetic and dtype-generic helpers ----*- C++ -*-===//
//
// The CPU kernels are float-only; plans also move i64 ids, i32 ids and i1
// masks around (reshape, slice, concat, where, cast, comparisons). These
// helpers do that, element-size generic, with plain strided loops: such
// tensors are small (ids, masks), so simplicity wins over speed here.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_LIB_EXEC_OPUTILS_H
#define PIPEMESH_RUNTIME_LIB_EXEC_OPUTILS_H

#include "pipemesh/runtime/DType.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace pipemesh::rt::ops {

/// Row-major element strides of `shape`.
Dims contiguousStrides(const Dims &shape);
/// Element strides of `shape` (right-aligned, numpy rules) read as `out`:
/// 0 along dims that broadcast. The caller has checked it broadcasts.
Dims broadcastStrides(const Dims &shape, const Dims &out);
/// The numpy broadcast of two shapes; nullopt when they do not broadcast.
std::optional<Dims> broadcastShape(const Dims &a, const Dims &b);
/// True when `from` broadcasts to `to` (numpy rules).
bool broadcastsTo(const Dims &from, const Dims &to);
/// Product of dims [begin, end).
int64_t product(const Dims &shape, size_t begin, size_t end);

/// Copies `shape` elements of `elemSize` bytes from src (element strides
/// srcStrides) to dst (dstStrides).
void copyStrided(const Dims &shape, size_t elemSize, const void *src, const Dims &srcStrides,
                 void *dst, const Dims &dstStrides);

/// Converts n elements between plan element types (float -> int truncates,
/// anything -> i1 is "!= 0").
void convert(const void *src, DType from, void *dst, DType to, int64_t n);

/// Calls f(outLinear, offsets...) for every element of `out` in row-major
/// order, with each input's element offset from its strides.
template <size_t N, typename F>
void forEachIndex(const Dims &out, const std::array<Dims, N> &strides, F &&f) {
  const size_t rank = out.size();
  int64_t total = 1;
  for (int64_t d : out)
    total *= d;
  if (total == 0)
    return;
  std::vector<int64_t> idx(rank, 0);
  std::array<int64_t, N> off{};
  for (int64_t o = 0; o < total; ++o) {
    f(o, off);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < out[d]) {
        for (size_t k = 0; k < N; ++k)
          off[k] += strides[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k)
        off[k] -= strides[k][d] * (out[d] - 1);
      idx[d] = 0;
    }
  }
}

/// Reads element i of a buffer of type t as a double / int64.
double loadAsDouble(const void *p, DType t, int64_t i);
int64_t loadAsInt(const void *p, DType t, int64_t i);
void storeFromDouble(void *p, DType t, int64_t i, double v);
void storeFromInt(void *p, DType t, int64_t i, int64_t v);

} // namespace pipemesh::rt::ops

#endif // PIPEMESH_RUNTIME_LIB_EXEC_OPUTILS_H
