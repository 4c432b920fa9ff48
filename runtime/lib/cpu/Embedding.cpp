//===- Embedding.cpp - table lookup and its (deterministic) gradient --------===//
//
// Forward: y[i, :] = table[ids[i], :], rows in parallel, after checking every id.
// Backward: dtable[v, :] = sum over i with ids[i] == v of dy[i, :], summed in
// increasing i. A counting sort groups the positions by id first, then every
// table row is written by exactly one thread (zero when no position uses it),
// so the result is bit-identical whatever the number of threads, with no
// atomics.
//
//===----------------------------------------------------------------------===//

#include "KernelUtil.h"

#include <vector>

namespace pipemesh::rt::cpu {
using namespace detail;

template <typename T>
bool embedding(const T *table, const int64_t *ids, T *y, int64_t n, int64_t V, int64_t C) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= V)
      return false;
#pragma omp parallel for schedule(static) if (n * C > kCopyGrain)
  for (int64_t i = 0; i < n; ++i)
    std::copy(table + ids[i] * C, table + (ids[i] + 1) * C, y + i * C);
  return true;
}

template <typename T>
void embeddingGrad(const T *dy, const int64_t *ids, T *dtable, int64_t n, int64_t V, int64_t C,
                   bool accumulate, T scale) {
  // start[v] .. start[v + 1]: the positions i (increasing) with ids[i] == v.
  // Ids out of range (rejected by the forward) are skipped.
  std::vector<int64_t> start(V + 1, 0), order(n);
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] >= 0 && ids[i] < V)
      ++start[ids[i] + 1];
  for (int64_t v = 0; v < V; ++v)
    start[v + 1] += start[v];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] >= 0 && ids[i] < V)
      order[fill[ids[i]]++] = i;

#pragma omp parallel for schedule(static) if (V * C > kParallelGrain)
  for (int64_t v = 0; v < V; ++v) {
    T *row = dtable + v * C;
    if (!accumulate) {
      std::fill(row, row + C, T(0));
      for (int64_t k = start[v]; k < start[v + 1]; ++k) {
        const T *src = dy + order[k] * C;
        for (int64_t j = 0; j < C; ++j)
          row[j] += src[j];
      }
      continue;
    }
    if (start[v] == start[v + 1])
      continue; // no token of this row: the gradient keeps what it holds
    // Each element's sum first, then scaled into the gradient: the same
    // rounding as an embedding_grad into zeros followed by an accumulate.
    for (int64_t j = 0; j < C; ++j) {
      T sum = T(0);
      for (int64_t k = start[v]; k < start[v + 1]; ++k)
        sum += dy[order[k] * C + j];
      row[j] += scale * sum;
    }
  }
}

template bool embedding<float>(const float *, const int64_t *, float *, int64_t, int64_t, int64_t);
template bool embedding<double>(const double *, const int64_t *, double *, int64_t, int64_t,
                                int64_t);
template void embeddingGrad<float>(const float *, const int64_t *, float *, int64_t, int64_t,
                                   int64_t, bool, float);
template void embeddingGrad<double>(const double *, const int64_t *, double *, int64_t, int64_t,
                                    int64_t, bool, double);

} // namespace pipemesh::rt::cpu
