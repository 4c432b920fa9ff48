//===- CpuKernels.h - CPU kernels of the PipeMesh runtime -------*- C++ -*-===//
//
// One function per pmesh op and per gradient op, on contiguous row-major
// buffers. Templated on the element type: the runtime uses float; the
// finite-difference tests instantiate double as the reference.
// Shapes are passed as small vectors; broadcasting follows numpy.
// Multi-threaded with OpenMP where the work is large enough; matmuls go to
// BLAS (sgemm/dgemm). Reductions accumulate in double and add in an order that
// does not depend on the number of threads: every kernel gives the same bits
// however many threads run it (BLAS aside).
// Instantiated for float and double; the elementwise and data-movement
// kernels (binary, unary, where, transpose, slice, sliceGrad, concat, split,
// broadcastTo, reduce) also for int64_t, int32_t and uint8_t (i1).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_CPUKERNELS_H
#define PIPEMESH_RUNTIME_CPUKERNELS_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pipemesh::rt::cpu {

using Dims = std::vector<int64_t>;

enum class Binary { Add, Sub, Mul, Div, Pow, Max, Equal, Less, And };
enum class Unary { Neg, Sqrt, Tanh, Erf, Exp, Log, Sigmoid, Not };

// --- elementwise ------------------------------------------------------------
/// out[outShape] = a[aShape] (op) b[bShape] with numpy broadcasting. For
/// Equal/Less/And the result is 0/1 in T (the runtime stores i1 as uint8 and
/// converts at the boundary: see `castBuffer`).
template <typename T>
void binary(Binary op, const T *a, const Dims &aShape, const T *b, const Dims &bShape, T *out,
            const Dims &outShape);
/// Transcendentals use libm in T's precision.
template <typename T> void unary(Unary op, const T *x, T *y, int64_t n);
/// out = cond ? x : y, all three broadcast to outShape; cond is uint8.
template <typename T>
void where(const uint8_t *cond, const Dims &cShape, const T *x, const Dims &xShape, const T *y,
           const Dims &yShape, T *out, const Dims &outShape);
/// y = static_cast<To>(x); to uint8_t (the storage of i1) it is x != 0.
/// From/To: float, double, int64_t, int32_t, uint8_t.
template <typename From, typename To> void castBuffer(const From *x, To *y, int64_t n);
/// bf16 storage (activations=bf16; pipemesh/runtime/Bf16.h): widening is
/// exact, rounding is to nearest-even; both over OpenMP threads.
void widenBf16Buffer(const uint16_t *x, float *y, int64_t n);
void roundBf16Buffer(const float *x, uint16_t *y, int64_t n);
/// roundBf16Buffer of n floats stored at any alignment (a plan's mapped
/// weights: safetensors entries need not be 4-byte aligned).
void roundBf16Unaligned(const uint8_t *x, uint16_t *y, int64_t n);
/// y += alpha * x (gradient accumulation).
template <typename T> void axpy(T alpha, const T *x, T *y, int64_t n);

// --- data movement ------------------------------------------------------------
/// Result dim i is x's dim perm[i]: yShape[i] = xShape[perm[i]].
template <typename T>
void transpose(const T *x, const Dims &xShape, const std::vector<int64_t> &perm, T *y);
/// y[i] = x[starts + i * strides] (strides > 0) for every index i of yShape.
template <typename T>
void slice(const T *x, const Dims &xShape, const Dims &starts, const Dims &strides, T *y,
           const Dims &yShape);
/// Gradient of slice: dx = zeros(xShape); dx[slice] = dy.
template <typename T>
void sliceGrad(const T *dy, const Dims &yShape, const Dims &starts, const Dims &strides, T *dx,
               const Dims &xShape);
/// Concatenation along `axis` (negative counts from the end); shapes[k] is xs[k]'s.
template <typename T>
void concat(const std::vector<const T *> &xs, const std::vector<Dims> &shapes, int64_t axis,
            T *y);
/// Inverse of concat: ys[k] gets sizes[k] entries along `axis`.
template <typename T>
void split(const T *x, const Dims &xShape, int64_t axis, const std::vector<int64_t> &sizes,
           const std::vector<T *> &ys);
template <typename T> void broadcastTo(const T *x, const Dims &xShape, T *y, const Dims &yShape);
/// Sum (or mean) over `axes` (non-negative, sorted); y has the kept shape.
template <typename T>
void reduce(const T *x, const Dims &xShape, const std::vector<int64_t> &axes, bool mean, T *y);

// --- neural-network ops ---------------------------------------------------------
/// C[b] = op(A[b]) @ op(B[b]) (+ bias), for b in 0..batch; A is [batch, M, K]
/// (or [batch, K, M] when transA), B likewise with N. strideA / strideB are the
/// element strides between batches (0 broadcasts one matrix to every batch).
/// accumulate: C[b] += alpha * op(A[b]) @ op(B[b]) instead (no bias; a weight
/// gradient added into its accumulation by the GEMM itself, beta = 1).
template <typename T>
void matmul(const T *A, const T *B, const T *bias, T *C, int64_t batch, int64_t M, int64_t N,
            int64_t K, bool transA, bool transB, int64_t strideA, int64_t strideB,
            T alpha = T(1), bool accumulate = false);

/// Normalizes rows of `cols` elements: y = (x - mean) / sqrt(var + eps) * g + b
/// (biased variance; b may be null: no bias).
template <typename T>
void layerNorm(const T *x, const T *g, const T *b, T *y, int64_t rows, int64_t cols, T eps);
/// dx = d/dx, dg and db are OVERWRITTEN with the sums over rows (db may be null).
template <typename T>
void layerNormGrad(const T *dy, const T *x, const T *g, T *dx, T *dg, T *db, int64_t rows,
                   int64_t cols, T eps);

/// tanhApprox: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); else x Phi(x) (erf).
template <typename T> void gelu(const T *x, T *y, int64_t n, bool tanhApprox);
template <typename T> void geluGrad(const T *dy, const T *x, T *dx, int64_t n, bool tanhApprox);

/// Row-wise over `cols`. A row entirely -inf gives softmax 0 / log_softmax -inf.
/// The gradients take the saved forward output y.
template <typename T> void softmax(const T *x, T *y, int64_t rows, int64_t cols);
template <typename T> void softmaxGrad(const T *dy, const T *y, T *dx, int64_t rows, int64_t cols);
template <typename T> void logSoftmax(const T *x, T *y, int64_t rows, int64_t cols);
template <typename T>
void logSoftmaxGrad(const T *dy, const T *y, T *dx, int64_t rows, int64_t cols);

/// o = softmax(cap(scale * q @ k^T) + mask, causal) @ v per (batch*heads) slice,
/// cap(s) = softcap * tanh(s / softcap) when softcap > 0 (Gemma 2), else s.
/// q [BH, Tq, D], k [BH, Tk, D], v [BH, Tk, Dv], o [BH, Tq, Dv]. `mask`
/// (nullable) is additive, already broadcast to [BH, Tq, Tk] by the caller
/// through the strides maskStrideBH / maskStrideQ / maskStrideK (0 to
/// broadcast). causal hides key j > i + (Tk - Tq); window > 0 (with causal)
/// also hides j <= i + (Tk - Tq) - window (sliding-window attention, only the
/// band's keys are computed). Memory is O(Tq*Tk) per
/// thread at most; nothing of size BH*Tq*Tk is allocated. A query row that sees
/// no key (all masked with -inf, or causal with Tq > Tk) outputs 0.
/// Grouped-query attention: k holds BH / groupK slices and v BH / groupV;
/// query slice bh reads key slice bh / groupK and value slice bh / groupV.
template <typename T>
void attention(const T *q, const T *k, const T *v, const T *mask, int64_t maskStrideBH,
               int64_t maskStrideQ, int64_t maskStrideK, T *o, int64_t BH, int64_t Tq, int64_t Tk,
               int64_t D, int64_t Dv, T scale, bool causal, int64_t window = 0,
               T softcap = T(0), int64_t groupK = 1, int64_t groupV = 1);
/// Gradients of attention (the mask is not trained). Recomputes the
/// probabilities; dq, dk, dv are overwritten (dk and dv sum over the query
/// slices of their group).
template <typename T>
void attentionGrad(const T *dO, const T *q, const T *k, const T *v, const T *mask,
                   int64_t maskStrideBH, int64_t maskStrideQ, int64_t maskStrideK, T *dq, T *dk,
                   T *dv, int64_t BH, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv, T scale,
                   bool causal, int64_t window = 0, T softcap = T(0), int64_t groupK = 1,
                   int64_t groupV = 1);

/// y[i, :] = table[ids[i], :]; ids out of [0, V) is an error (returns false).
template <typename T>
bool embedding(const T *table, const int64_t *ids, T *y, int64_t n, int64_t V, int64_t C);
/// dtable is OVERWRITTEN: zeros, then dtable[ids[i]] += dy[i]. With
/// `accumulate`, dtable (a parameter's gradient) keeps what it holds and each
/// row some id names gets scale * (the sum of its dy rows); no other row is
/// touched. Deterministic.
template <typename T>
void embeddingGrad(const T *dy, const int64_t *ids, T *dtable, int64_t n, int64_t V, int64_t C,
                   bool accumulate = false, T scale = T(1));

/// Per-row cross-entropy of logits [rows, V] against targets; rows whose target
/// equals ignoreIndex contribute 0 and do not count. Writes per-row losses to
/// `losses` (nullable) and returns {sum of losses, number counted}. A target
/// outside [0, V) other than ignoreIndex makes its row's loss NaN (and counts).
template <typename T>
std::pair<double, int64_t> crossEntropy(const T *logits, const int64_t *targets, T *losses,
                                        int64_t rows, int64_t V, int64_t ignoreIndex);
/// dlogits[r] = dloss[r] * (softmax(logits[r]) - onehot(target[r])); with
/// `dlossPerRow` null every counted row uses the scalar `dlossScalar` (for a
/// "mean" reduction pass dloss / count). Ignored rows get zeros.
template <typename T>
void crossEntropyGrad(const T *logits, const int64_t *targets, const T *dlossPerRow,
                      T dlossScalar, T *dlogits, int64_t rows, int64_t V, int64_t ignoreIndex);

// --- optimizer ------------------------------------------------------------------
/// Sum of squares (in double) - the global gradient norm is its sqrt over all grads.
template <typename T> double sumSquares(const T *x, int64_t n);
/// One PyTorch AdamW step on a flat buffer: p -= lr*wd*p (when decay); then
/// m = b1 m + (1-b1) g', v = b2 v + (1-b2) g'^2 with g' = gradScale * g;
/// p -= lr * (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps). step is 1-based.
/// Evaluated in T with torch.optim.AdamW's (1.13) operation order:
/// p *= (1-lr*wd); m = m*b1 + (1-b1)*g'; v = v*b2 + (1-b2)*g'*g';
/// p += (-lr/(1-b1^step)) * m / (sqrt(v)/sqrt(1-b2^step) + eps);
/// pass weightDecay = 0 for parameters that do not decay. bf16Copy (f32 only;
/// params=bf16): also receives the updated p rounded to bf16, chunk by chunk
/// while it is in cache.
template <typename T>
void adamw(T *p, const T *g, T *m, T *v, int64_t n, double lr, double beta1, double beta2,
           double eps, double weightDecay, int64_t step, double gradScale,
           uint16_t *bf16Copy = nullptr);

/// OpenBLAS 0.3.21 picks its generic "Prescott" kernels on Xeons newer than it
/// knows, and reads OPENBLAS_CORETYPE only when the library loads; libgomp
/// reads how idle threads wait (OMP_WAIT_POLICY, GOMP_SPINCOUNT) only when it
/// loads. Call first thing in main(): when OPENBLAS_CORETYPE is unset (never
/// overriding a user's or the machine's setting), the detected core is generic
/// and the CPU has AVX-512 (or AVX2), it sets the matching core type; when
/// neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, it sets
/// OMP_WAIT_POLICY=passive (and OPENBLAS_THREAD_TIMEOUT=4 for OpenBLAS's
/// pthread build): see preferredThreadEnv; when mpirun's default bound the
/// only rank of a node to one core (widensDefaultBinding), it widens the
/// process's CPU affinity to every CPU it may use. If it changed anything it
/// re-executes the program (/proc/self/exe) once, so that libgomp and OpenBLAS
/// size their thread pools anew. Returns a line for the log describing the
/// BLAS core and threads in use. argv must be main's (argv[argc] == nullptr);
/// the environment marker PIPEMESH_BLAS_REEXEC prevents a second re-execution.
std::string configureBlas(int argc, char **argv);
/// The thread settings configureBlas adds, given the current values (null or
/// empty: unset) and openblas_get_parallel() (0 sequential, 1 pthread, 2
/// OpenMP build): idle threads that spin take the cores from the threads that
/// work whenever the cores are shared, so they sleep at once unless the user
/// chose a policy.
std::vector<std::pair<std::string, std::string>>
preferredThreadEnv(const char *ompWaitPolicy, const char *gompSpincount,
                   const char *openblasThreadTimeout, int openblasParallel);
/// Whether configureBlas widens this process's CPU binding, from the Open MPI
/// launch variables (null or empty: unset): mpirun bound the process
/// (OMPI_MCA_orte_bound_at_launch) by its own default, which for -np <= 2 is
/// one core per rank, although no binding, mapping or CPU set was asked for
/// (OMPI_MCA_hwloc_base_binding_policy, OMPI_MCA_rmaps_base_mapping_policy,
/// OMPI_MCA_hwloc_base_cpu_set) and the process is the only rank on its node
/// (OMPI_COMM_WORLD_LOCAL_SIZE 1). Its threads would then share one core: the
/// README's `mpirun -np 1 pipemesh-run ...` ran at half speed on two cores.
bool widensDefaultBinding(const char *localSize, const char *boundAtLaunch,
                          const char *bindingPolicy, const char *mappingPolicy,
                          const char *cpuSet);
/// The instruction set of the float kernels' hot loops: "avx2" (AVX2 + FMA,
/// chosen when the CPU has them, unless PIPEMESH_KERNEL_ISA=generic) or
/// "generic" (x86-64-v2). The two may differ in the last bits (FMA contraction).
std::string kernelIsa();
/// Selects "generic" or "avx2" (the latter only where the CPU runs it) for
/// every thread; returns false for an ISA this CPU or build cannot run. Tests.
bool setKernelIsa(const std::string &isa);
/// The decision configureBlas makes: the OPENBLAS_CORETYPE to request when
/// OpenBLAS chose `core` on a CPU with (or without) AVX-512 (F, CD, BW, DQ,
/// VL) and AVX2 + FMA, or "" when `core` already suits the CPU.
std::string preferredBlasCore(const std::string &core, bool avx512, bool avx2);

} // namespace pipemesh::rt::cpu

#endif // PIPEMESH_RUNTIME_CPUKERNELS_H
