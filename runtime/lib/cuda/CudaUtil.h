//===- CudaUtil.h - error checks and the cuBLASLt wrapper (private) -*- C++ -*-===//
//
// Every CUDA, cuBLASLt and NCCL call goes through one of the check helpers,
// which turn a failure into an rt::Error naming the call and the library's
// own message: a CUDA error is a pipemesh-run error line, never an abort.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_LIB_CUDA_CUDAUTIL_H
#define PIPEMESH_RUNTIME_LIB_CUDA_CUDAUTIL_H

#include "pipemesh/runtime/Error.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

namespace pipemesh::rt::cuda {

inline void checkCuda(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    fail("CUDA: ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

inline void checkLt(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt: ", what, ": status ", (int)s);
}

/// What epilogue a GEMM applies to op(A) @ op(B).
enum class Epilogue { None, Bias, Gelu, GeluBias };

/// A row-major GEMM: C[b] = op(A[b]) @ op(B[b]) (+ bias, GELU), b < batch,
/// with element strides between batches (all non-zero when batch > 1).
struct GemmDesc {
  int64_t M = 0, N = 0, K = 0;
  bool transA = false, transB = false;
  int64_t batch = 1, strideA = 0, strideB = 0, strideC = 0;
  bool bf16 = false; ///< A and B in bf16 (C, bias, aux stay fp32)
  /// Row pitches (elements) of the row-major A, B and C; 0: packed (the
  /// contiguous dim: K or M for A, N or K for B, N for C).
  int64_t ldA = 0, ldB = 0, ldC = 0;
  Epilogue epilogue = Epilogue::None;
  /// Largest power-of-two alignments (bytes, up to 256) of the pointers.
  uint32_t alignA = 256, alignB = 256, alignC = 256, alignBias = 256;

  auto key() const {
    return std::make_tuple(M, N, K, transA, transB, batch, strideA, strideB, strideC, bf16,
                           ldA, ldB, ldC, (int)epilogue, alignA, alignB, alignC, alignBias);
  }
};

/// cuBLASLt with one workspace (32 MiB: what Hopper's kernels ask for) and
/// one algorithm chosen per distinct GEMM (the heuristic's first choice,
/// cached by shape, transposes, batch, types, epilogue and alignment).
class Lt {
public:
  Lt(size_t workspaceBytes, bool deterministic);
  ~Lt();
  Lt(const Lt &) = delete;
  Lt &operator=(const Lt &) = delete;

  /// One bound GEMM: its descriptors and algorithm.
  struct Gemm;
  /// Null when cuBLASLt has no algorithm for it (an epilogue it does not
  /// support with these types): the caller falls back to no epilogue.
  std::shared_ptr<Gemm> prepare(const GemmDesc &d);
  /// C = A @ B (+ bias) (GELU: C = gelu(.), aux = the pre-activation);
  /// accumulate: C += alpha * A @ B (cuBLASLt's beta = 1, C read in place).
  void run(const Gemm &g, cudaStream_t st, const void *A, const void *B, float *C,
           const float *bias, float *aux, bool accumulate = false, float alpha = 1.0f);
  size_t workspaceBytes() const { return wsBytes; }
  /// Distinct algorithms chosen so far (one per GEMM kind).
  size_t cachedAlgorithms() const { return algos.size(); }

private:
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  size_t wsBytes;
  bool deterministic;
  std::map<decltype(GemmDesc().key()), cublasLtMatmulAlgo_t> algos;
};

/// Largest power of two (<= 256) dividing the address.
inline uint32_t alignmentOf(const void *p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0)
    al >>= 1;
  return al;
}

} // namespace pipemesh::rt::cuda

#endif // PIPEMESH_RUNTIME_LIB_CUDA_CUDAUTIL_H
