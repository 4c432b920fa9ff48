//===- CudaKernels.h - the CUDA kernels of the PipeMesh runtime -*- C++ -*-===//
//
// Host-side launchers of the device kernels (runtime/lib/cuda/*.cu), on
// contiguous row-major device buffers, each enqueued on the given stream.
// They mirror the CPU kernels (pipemesh/runtime/CpuKernels.h): same
// arguments, same semantics, float32 data. Nothing here synchronizes.
//
// Determinism: no kernel uses floating-point atomics; every reduction adds in
// an order fixed by the shapes alone (per-block trees, then partials summed in
// index order), so the same inputs give the same bits on the same GPU.
//
// Scratch: launchers that need device workspace take it as an argument; the
// matching *ScratchBytes function says how much (the backend sizes one shared
// scratch region from them at bind time).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_CUDA_CUDAKERNELS_H
#define PIPEMESH_RUNTIME_CUDA_CUDAKERNELS_H

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

struct __nv_bfloat16;

namespace pipemesh::rt::cuda {

/// Index spaces of the generic kernels have at most this many dims (after
/// merging contiguous dims; GPT plans need 4).
constexpr int kMaxDims = 8;

/// An iteration space with up to three strided operands (element strides;
/// 0 broadcasts). Operand 0 is usually the output.
struct Strided {
  int rank = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[3][kMaxDims] = {};
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i)
      n *= shape[i];
    return n;
  }
};

/// Device-side error report (token or target id out of range): the first
/// offending position (smallest index) and its value; code 0 = no error.
struct DeviceError {
  int code;
  int instruction;
  long long position;
  long long value;
};
enum DeviceErrorCode { kErrNone = 0, kErrTokenId = 1, kErrTarget = 2 };

// --- movement and elementwise -------------------------------------------------
/// dst[s.stride[0] . i] = src[s.stride[1] . i] for every index i of s.shape;
/// elemSize 1, 2, 4 or 8 bytes.
void copyStrided(cudaStream_t st, const Strided &s, size_t elemSize, const void *src, void *dst);

enum class BinaryOp { Add, Sub, Mul, Div, Pow, Max };
/// out[s0 . i] = a[s1 . i] (op) b[s2 . i].
void binaryF32(cudaStream_t st, BinaryOp op, const Strided &s, const float *a, const float *b,
               float *out);
enum class UnaryOp { Neg, Sqrt, Tanh, Erf, Exp, Log, Sigmoid };
void unaryF32(cudaStream_t st, UnaryOp op, const float *x, float *y, int64_t n);
/// x *= s (collectives' scale).
void scaleF32(cudaStream_t st, float *x, int64_t n, float s);
/// y += alpha * x.
void axpy(cudaStream_t st, float alpha, const float *x, float *y, int64_t n);
/// After a launch: a launch error (a bad configuration) printed on the spot;
/// errors of the kernels themselves surface at the step's synchronization.
void reportLaunch(const char *what);
/// bf16 copies of matmul operands (round to nearest even).
void castToBf16(cudaStream_t st, const float *x, __nv_bfloat16 *y, int64_t n);
/// The same for a [rows, cols] matrix into rows of ld >= cols elements (the
/// padding zero): a bf16 leading dimension that is a multiple of 8 keeps
/// cuBLASLt on its 16-byte-aligned tensor-core kernels (GPT-2's vocabulary
/// of 50257 otherwise sends the head's GEMMs to slow ones).
void castToBf16Pitched(cudaStream_t st, const float *x, __nv_bfloat16 *y, int64_t rows,
                       int64_t cols, int64_t ld);

/// dst [rows, cols] = the first cols of every row of src [rows, srcPitch]
/// (a GEMM's result out of its padded scratch).
void copyRowsF32(cudaStream_t st, const float *src, int64_t srcPitch, float *dst, int64_t rows,
                 int64_t cols);

/// Sum (or mean) over a reduced index space: y[k] = sum_r x[kept(k) + red(r)].
/// kept: the output's dims with x's strides (stride[0]); red: the reduced
/// dims with x's strides (stride[0]). Deterministic two-pass.
size_t reduceScratchBytes(const Strided &kept, const Strided &red);
void reduceF32(cudaStream_t st, const float *x, const Strided &kept, const Strided &red, bool mean,
               float *y, void *scratch);

// --- neural-network ops ----------------------------------------------------------
void layerNorm(cudaStream_t st, const float *x, const float *g, const float *b, float *y,
               int64_t rows, int64_t cols, float eps);
size_t layerNormGradScratchBytes(int64_t rows, int64_t cols);
/// dx; dg and db (nullable) OVERWRITTEN with the column sums.
void layerNormGrad(cudaStream_t st, const float *dy, const float *x, const float *g, float *dx,
                   float *dg, float *db, int64_t rows, int64_t cols, float eps, void *scratch);

void gelu(cudaStream_t st, const float *x, float *y, int64_t n, bool tanhApprox);
void geluGrad(cudaStream_t st, const float *dy, const float *x, float *dx, int64_t n,
              bool tanhApprox);

/// y[i, :] = table[ids[i], :]; an id outside [0, V) sets *err (kErrTokenId).
void embedding(cudaStream_t st, const float *table, const void *ids, bool ids32, float *y,
               int64_t n, int64_t V, int64_t C, DeviceError *err, int instruction);
/// dtable OVERWRITTEN: per vocabulary row, the sum of its dy rows in position
/// order (a stable counting sort of the ids; no atomics on floats). With
/// `accumulate`, dtable is a gradient: rows no id names keep their values,
/// the others get scale * their sum added.
size_t embeddingGradScratchBytes(int64_t n, int64_t V);
void embeddingGrad(cudaStream_t st, const float *dy, const void *ids, bool ids32, float *dtable,
                   int64_t n, int64_t V, int64_t C, void *scratch,
                   bool accumulate = false, float scale = 1.f);

enum class Reduction { Mean, Sum, None };
size_t crossEntropyScratchBytes(int64_t rows);
/// Cross-entropy of logits [rows, V] against targets (ignoreIndex skipped).
/// out: the scalar (mean / sum; NaN mean when nothing counts) or [rows] (none).
/// With dlogits non-null it also writes the gradient (fused forward+backward:
/// one pass less over the logits), dloss read from device memory (a scalar
/// for mean / sum, [rows] for none).
void crossEntropy(cudaStream_t st, const float *logits, const void *targets, bool targets32,
                  int64_t rows, int64_t V, int64_t ignoreIndex, Reduction red, float *out,
                  float *dlogits, const float *dloss, void *scratch, DeviceError *err,
                  int instruction);
/// dlogits = dloss * (softmax(logits) - onehot(target)); mean divides by the
/// counted targets.
void crossEntropyGrad(cudaStream_t st, const float *dloss, const float *logits,
                      const void *targets, bool targets32, int64_t rows, int64_t V,
                      int64_t ignoreIndex, Reduction red, float *dlogits, void *scratch,
                      DeviceError *err, int instruction);

// --- attention (runtime/lib/cuda/Attention.cu) -----------------------------------
/// The additive mask, read through strides (0 broadcasts); data null: none.
struct MaskView {
  const float *data = nullptr;
  int64_t sBH = 0, sQ = 0, sK = 0;
};
/// Largest head dim the kernels take (q/k dim D and v dim Dv).
constexpr int kMaxHeadDim = 128;
/// o = softmax(scale q k^T + mask, causal) v, tiled (online softmax): memory
/// O(T * D), never O(T^2). Rows that see no key give 0.
void attention(cudaStream_t st, const float *q, const float *k, const float *v, MaskView mask,
               float *o, int64_t BH, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv, float scale,
               bool causal);
size_t attentionGradScratchBytes(int64_t BH, int64_t Tq);
/// dq, dk, dv overwritten; recomputes the probabilities (the plan saves no
/// statistics); deterministic (no atomics: dK/dV per key row, dQ per query row).
void attentionGrad(cudaStream_t st, const float *dO, const float *q, const float *k,
                   const float *v, MaskView mask, float *dq, float *dk, float *dv, int64_t BH,
                   int64_t Tq, int64_t Tk, int64_t D, int64_t Dv, float scale, bool causal,
                   void *scratch);
/// Raises the dynamic shared-memory limit of the attention kernels (once per
/// device, before the first launch).
void attentionInit();

// --- tensor-core attention (runtime/lib/cuda/FlashAttention.cu) ------------------------
/// The bf16 mode's attention: bf16 mma.sync operands, fp32 softmax and
/// accumulators; head dim 64 (q, k and v), no additive mask.
bool flashAttentionSupported(int64_t D, int64_t Dv, const MaskView &mask);
/// Scratch of the staged kernels: q, k, v (and dO) cast once to bf16 copies,
/// row-major and transposed, that every tile copies from.
size_t flashAttentionScratchBytes(int64_t BH, int64_t Tq, int64_t Tk);
size_t flashAttentionGradScratchBytes(int64_t BH, int64_t Tq, int64_t Tk);
/// How the tensor-core attention runs; every choice gives the same bits. The
/// defaults are the fastest measured on an H200 (B=16, 12 heads, T=1024:
/// forward 0.30 ms per tile with 64-row blocks, 0.49 staged, 0.57 staged
/// with 128-row blocks; the staging pass costs more than the tiles save).
struct FlashOptions {
  /// Operands staged once as bf16 copies in the scratch (tiles then are
  /// 16-byte copies); false: each tile is cast from the float32 tensors on
  /// its way into shared memory.
  bool staged = false;
  /// Rows a block owns: 64 (4 warps) or 128 (8 warps sharing each streamed
  /// tile: fewer tile loads, fewer blocks in flight).
  int blockRows = 64;
};
/// What a forward keeps for its backward: the base-2 log-sum-exp of each
/// query row [BH, Tq] and a copy of the output [BH, Tq, 64]. With them the
/// backward's first pass (the forward again) is one product per row
/// (delta = dO . O). Both null: nothing kept.
struct FlashSaved {
  float *lse2 = nullptr;
  float *o = nullptr;
  static size_t bytes(int64_t BH, int64_t Tq) { return (size_t)(BH * Tq * 65) * sizeof(float); }
};
/// Scratch: flashAttentionScratchBytes when staged, else none (may be null).
void flashAttention(cudaStream_t st, const float *q, const float *k, const float *v, float *o,
                    int64_t BH, int64_t Tq, int64_t Tk, float scale, bool causal, void *scratch,
                    FlashOptions opt = {}, FlashSaved saved = {});
/// Scratch: flashAttentionGradScratchBytes when staged, else
/// attentionGradScratchBytes(BH, Tq). saved: what the forward of the same q,
/// k, v kept. Deterministic (no atomics).
void flashAttentionGrad(cudaStream_t st, const float *dO, const float *q, const float *k,
                        const float *v, float *dq, float *dk, float *dv, int64_t BH, int64_t Tq,
                        int64_t Tk, float scale, bool causal, void *scratch,
                        FlashOptions opt = {}, FlashSaved saved = {});

// --- optimizer ---------------------------------------------------------------------
/// One tensor of the multi-tensor AdamW (device-resident table).
struct AdamEntry {
  float *p;
  const float *g;
  float *m;
  float *v;
  int64_t n;
  double normWeight; ///< weight of its squares in the global norm
  int decay;
  int64_t firstBlock; ///< of the launch grid (prefix sum of blocks per entry)
};
constexpr int kAdamBlockElems = 4096;
/// Blocks of the launch over `entries` (and their firstBlock, set here).
int64_t adamAssignBlocks(AdamEntry *entries, int count);
size_t gradNormScratchBytes(int64_t blocks);
/// *normSq = sum over entries of normWeight * ||g||^2 (double; deterministic).
void gradNormSq(cudaStream_t st, const AdamEntry *devEntries, int count, int64_t blocks,
                double *normSq, void *scratch);
/// Host-computed AdamW constants of one step (torch.optim.AdamW's order).
struct AdamStep {
  float decay;    ///< 1 - lr * wd
  float b1, b2, a1, a2, stepSize, bc2Sqrt, eps;
  double clip;    ///< 0: off
};
/// PyTorch AdamW with global-norm clipping read from *normSq on the device.
void adamw(cudaStream_t st, const AdamEntry *devEntries, int count, int64_t blocks,
           const AdamStep &k, const double *normSq);
/// *acc += scale * (double)*x (the step's loss, in double like the CPU).
void accumulateLoss(cudaStream_t st, const float *x, double scale, double *acc);

/// The name of the compiled device architecture ("sm_90").
const char *compiledArch();

} // namespace pipemesh::rt::cuda

#endif // PIPEMESH_RUNTIME_CUDA_CUDAKERNELS_H
