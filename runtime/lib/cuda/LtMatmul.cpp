//===- LtMatmul.cpp - row-major GEMMs on cuBLASLt ---------------------------===//
//
// cuBLASLt is column-major. A row-major C[M,N] = op(A) op(B) is the
// column-major C^T[N,M] = op(B)^T op(A)^T, and a row-major matrix read as
// column-major is its transpose. So Lt's first operand is our B, its second
// our A, and C keeps its memory:
//   Lt A = B: stored [K,N] row-major -> column-major N x K (ld N), op N;
//             transB: stored [N,K]   -> column-major K x N (ld K), op T;
//   Lt B = A: stored [M,K]           -> column-major K x M (ld K), op N;
//             transA: stored [K,M]   -> column-major M x K (ld M), op T;
//   D = C:    column-major N x M (ld N).
// The bias (one value per output column, length N) is Lt's per-row bias of
// D, broadcast over its M columns: exactly its BIAS epilogue.
//
//===----------------------------------------------------------------------===//
#include "CudaUtil.h"

#include <cuda_runtime.h>

namespace pipemesh::rt::cuda {

struct Lt::Gemm {
  GemmDesc d;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Gemm() {
    if (a)
      cublasLtMatrixLayoutDestroy(a);
    if (b)
      cublasLtMatrixLayoutDestroy(b);
    if (c)
      cublasLtMatrixLayoutDestroy(c);
    if (op)
      cublasLtMatmulDescDestroy(op);
  }
};

Lt::Lt(size_t workspaceBytes, bool deterministic)
    : wsBytes(workspaceBytes), deterministic(deterministic) {
  checkLt(cublasLtCreate(&handle), "cublasLtCreate");
  checkCuda(cudaMalloc(&workspace, wsBytes), "cudaMalloc (cuBLASLt workspace)");
}

Lt::~Lt() {
  if (workspace)
    cudaFree(workspace);
  if (handle)
    cublasLtDestroy(handle);
}

static cublasLtMatrixLayout_t layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld,
                                     int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  checkLt(cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, ld),
          "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    int32_t count = (int32_t)batch;
    checkLt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                             sizeof count),
            "batch count");
    checkLt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                             &stride, sizeof stride),
            "batch stride");
  }
  return l;
}

std::shared_ptr<Lt::Gemm> Lt::prepare(const GemmDesc &d) {
  auto g = std::make_shared<Gemm>();
  g->d = d;
  const cudaDataType_t in = d.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  // fp32 mode computes in strict fp32 (no TF32): it must match the CPU
  // within 1e-4. bf16 mode: bf16 products, fp32 accumulation.
  checkLt(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
          "cublasLtMatmulDescCreate");
  cublasOperation_t opA = d.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = d.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  checkLt(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA),
          "transa");
  checkLt(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB),
          "transb");
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  switch (d.epilogue) {
  case Epilogue::None:
    break;
  case Epilogue::Bias:
    epi = CUBLASLT_EPILOGUE_BIAS;
    break;
  case Epilogue::Gelu:
    epi = CUBLASLT_EPILOGUE_GELU_AUX;
    break;
  case Epilogue::GeluBias:
    epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    break;
  }
  checkLt(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
          "epilogue");
  if (d.epilogue == Epilogue::Bias || d.epilogue == Epilogue::GeluBias) {
    cudaDataType_t bt = CUDA_R_32F;
    checkLt(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                           sizeof bt),
            "bias type");
  }
  const int64_t ldA = d.ldA ? d.ldA : (d.transA ? d.M : d.K);
  const int64_t ldB = d.ldB ? d.ldB : (d.transB ? d.K : d.N);
  const int64_t ldC = d.ldC ? d.ldC : d.N;
  if (d.epilogue == Epilogue::Gelu || d.epilogue == Epilogue::GeluBias) {
    int64_t ld = ldC; // aux has D's layout
    checkLt(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                           sizeof ld),
            "aux ld");
  }
  if (!d.transB)
    g->a = layout(in, d.N, d.K, ldB, d.batch, d.strideB);
  else
    g->a = layout(in, d.K, d.N, ldB, d.batch, d.strideB);
  if (!d.transA)
    g->b = layout(in, d.K, d.M, ldA, d.batch, d.strideA);
  else
    g->b = layout(in, d.M, d.K, ldA, d.batch, d.strideA);
  g->c = layout(CUDA_R_32F, d.N, d.M, ldC, d.batch, d.strideC);

  auto key = d.key();
  auto it = algos.find(key);
  if (it != algos.end()) {
    g->algo = it->second;
    return g;
  }
  cublasLtMatmulPreference_t pref = nullptr;
  checkLt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  uint64_t ws = wsBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof ws);
  // Lt's Lt-A is our B and Lt-B our A.
  uint32_t alA = d.alignB, alB = d.alignA, alC = d.alignC;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alA,
                                       sizeof alA);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alB,
                                       sizeof alB);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alC,
                                       sizeof alC);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alC,
                                       sizeof alC);
  if (deterministic) {
    // Split-K reductions may add partial products in a varying order; with
    // none allowed, the same GEMM gives the same bits every time.
    uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask,
                                         sizeof mask);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle, g->op, g->a, g->b, g->c, g->c, pref,
                                                    1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
    if (d.epilogue == Epilogue::Gelu || d.epilogue == Epilogue::GeluBias)
      return nullptr; // the caller runs the GELU as its own kernel
    fail("cuBLASLt has no algorithm for a ", d.bf16 ? "bf16" : "fp32", " GEMM M=", d.M,
         " N=", d.N, " K=", d.K, d.transA ? " A^T" : "", d.transB ? " B^T" : "",
         " batch=", d.batch, " (status ", (int)s, ")");
  }
  algos.emplace(key, result.algo);
  g->algo = result.algo;
  return g;
}

void Lt::run(const Gemm &g, cudaStream_t st, const void *A, const void *B, float *C,
             const float *bias, float *aux, bool accumulate, float alpha) {
  const float beta = accumulate ? 1.0f : 0.0f;
  if (bias)
    checkLt(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                           sizeof bias),
            "bias pointer");
  if (aux)
    checkLt(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                           sizeof aux),
            "aux pointer");
  checkLt(cublasLtMatmul(handle, g.op, &alpha, B, g.a, A, g.b, &beta, C, g.c, C, g.c, &g.algo,
                         workspace, wsBytes, st),
          "cublasLtMatmul");
}

} // namespace pipemesh::rt::cuda
