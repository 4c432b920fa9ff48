//===- CudaOps.cpp - the CUDA op table: one binder per op ------------------===//
//
// Every binder first runs the CPU binder of the same op on the same
// instruction (against the same buffer table): the checks, the defaults and
// the error messages are the CPU backend's, by construction. It then derives
// the launch arguments once and returns a thunk that only enqueues work on
// the backend's streams.
//
// Ops without a CUDA kernel (comparisons, where, cast, softmax, integer
// arithmetic: none of them in a GPT training step) run on the host: the
// thunk waits for the compute stream, copies the operands into the host
// arena, runs the CPU kernel and copies the results back. The banner lists
// them ("on the host: ...").
//
//===----------------------------------------------------------------------===//
#include "CudaBackend.h"

#include "../exec/OpContext.h"
#include "../exec/OpUtils.h"

#include "pipemesh/runtime/Communicator.h"
#include "pipemesh/runtime/Sampler.h"

#include <cuda_bf16.h>

#include <cmath>
#include <cstring>
#include <optional>

namespace pipemesh::rt::cuda {
namespace {

using CudaBinder = Thunk (*)(OpContext &, CudaBackend &);

CudaBackend &backendOf(OpContext &c) { return *static_cast<CudaBackend *>(c.env.backend); }

/// Runs the CPU binder for its checks (its thunk is dropped).
void validate(OpContext &c) {
  const OpTable &cpu = opTable();
  auto it = cpu.find(c.inst.op);
  if (it != cpu.end())
    (void)it->second(c);
}

/// An iteration space with merged dims: size-1 dims dropped, neighbours
/// merged where every operand walks them contiguously. nullopt past kMaxDims.
std::optional<Strided> makeStrided(const Dims &shape, std::initializer_list<Dims> strides) {
  std::vector<Dims> st(strides);
  const size_t N = st.size();
  Dims outShape;
  std::vector<Dims> outSt(N);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1)
      continue;
    bool merge = !outShape.empty();
    for (size_t k = 0; k < N && merge; ++k)
      merge = outSt[k].back() == st[k][i] * shape[i];
    if (merge) {
      outShape.back() *= shape[i];
      for (size_t k = 0; k < N; ++k)
        outSt[k].back() = st[k][i];
    } else {
      outShape.push_back(shape[i]);
      for (size_t k = 0; k < N; ++k)
        outSt[k].push_back(st[k][i]);
    }
  }
  if (outShape.empty()) {
    outShape.push_back(1);
    for (size_t k = 0; k < N; ++k)
      outSt[k].push_back(0);
  }
  if (outShape.size() > (size_t)kMaxDims)
    return std::nullopt;
  Strided s;
  s.rank = (int)outShape.size();
  for (int d = 0; d < s.rank; ++d) {
    s.shape[d] = outShape[d];
    for (size_t k = 0; k < N; ++k)
      s.stride[k][d] = outSt[k][d];
  }
  return s;
}

/// Wraps a bound thunk: the transfers due here first, --profile after.
Thunk wrap(CudaBackend &b, size_t index, Thunk inner) {
  CudaBackend *bp = &b;
  return [bp, index, inner = std::move(inner)] {
    bp->enter(index);
    inner();
    bp->leave();
  };
}

// --- the host fallback ------------------------------------------------------------

Thunk bindOnHost(OpContext &c, CudaBackend &b) {
  OpContext hc(*b.hostEnv, c.inst);
  const OpTable &cpu = opTable();
  Thunk cpuThunk = cpu.at(c.inst.op)(hc);
  c.noteAttributesAsked(hc);
  c.cls = hc.cls;
  c.activity = hc.activity;
  b.hostOps.insert(c.inst.op);
  std::vector<Range> in, out;
  for (int64_t id : c.inst.in)
    in.push_back(b.rangeOf(id));
  for (int64_t id : c.inst.out)
    out.push_back(b.rangeOf(id));
  CudaBackend *bp = &b;
  return [bp, in, out, cpuThunk] {
    uint8_t *dev = bp->arena().base(), *host = bp->hostArena.base();
    checkCuda(cudaStreamSynchronize(bp->compute), "the host fallback");
    for (const Range &r : in)
      checkCuda(cudaMemcpy(host + r.begin, dev + r.begin, r.end - r.begin, cudaMemcpyDeviceToHost),
                "cudaMemcpy (host fallback)");
    cpuThunk();
    for (const Range &r : out)
      checkCuda(cudaMemcpy(dev + r.begin, host + r.begin, r.end - r.begin, cudaMemcpyHostToDevice),
                "cudaMemcpy (host fallback)");
  };
}

bool overlap(CudaBackend &b, int64_t x, int64_t y) { return b.rangeOf(x).overlaps(b.rangeOf(y)); }

// --- matmul ------------------------------------------------------------------------

/// The next instruction, if it is a tanh GELU of `out` alone into a buffer
/// overlapping none of the GEMM's operands: it can be the GEMM's epilogue.
const Instruction *fusableGelu(OpContext &c, CudaBackend &b) {
  const auto &prog = b.rank.program;
  size_t i = c.inst.index + 1;
  if (!b.fuse || i >= prog.size())
    return nullptr;
  const Instruction &g = prog[i];
  if (g.op != "gelu" || g.in.size() != 1 || g.out.size() != 1 || g.in[0] != c.inst.out[0])
    return nullptr;
  if (!g.attrs.contains("approximate") || g.attrs["approximate"] != "tanh")
    return nullptr;
  for (int64_t id : c.inst.in)
    if (overlap(b, id, g.out[0]))
      return nullptr;
  if (overlap(b, c.inst.out[0], g.out[0]))
    return nullptr;
  return &g;
}

/// The next instruction, if it only adds this GEMM's output (exactly its
/// bytes, times its scale) into a float buffer of the same size that no
/// operand overlaps, and no later instruction reads the output before
/// rewriting it: the GEMM can add into that buffer itself (alpha = scale,
/// beta = 1; the gradient of a weight, accumulated over micro-batches).
/// Compiled plans lower such pairs as one accumulating matmul already; this
/// fuses hand-written or older plans.
const Instruction *fusableAccumulate(OpContext &c, CudaBackend &b) {
  const auto &prog = b.rank.program;
  const size_t i = c.inst.index + 1;
  if (!b.fuse || i >= prog.size())
    return nullptr;
  const Instruction &acc = prog[i];
  if (acc.op != "accumulate" || acc.in.size() != 1 || acc.out.size() != 1)
    return nullptr;
  auto scale = acc.json.find("scale");
  if (scale != acc.json.end() && !scale->is_number())
    return nullptr;
  const Range out = b.rangeOf(c.inst.out[0]), src = b.rangeOf(acc.in[0]);
  if (src.begin != out.begin || src.end != out.end)
    return nullptr;
  TensorRef dst = b.arena().tensor(acc.out[0]), o = c.out(0);
  if (dst.dtype != DType::F32 || o.dtype != DType::F32 || dst.numel != o.numel)
    return nullptr;
  for (int64_t id : c.inst.in)
    if (overlap(b, id, acc.out[0]))
      return nullptr;
  if (b.rangeOf(acc.out[0]).overlaps(out))
    return nullptr;
  // Nothing later may read the output's bytes before they are rewritten.
  return deadAfter(b.rank, i, out) ? &acc : nullptr;
}

Thunk bindMatmul(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef a = c.in(0), bm = c.in(1), o = c.out(0);
  bool transA = c.boolean("transpose_a", false), transB = c.boolean("transpose_b", false);
  int64_t M = a.shape[a.rank() - 2], K = a.shape[a.rank() - 1];
  if (transA)
    std::swap(M, K);
  int64_t N = bm.shape[bm.rank() - 1];
  if (transB)
    N = bm.shape[bm.rank() - 2];
  Dims aBatch(a.shape.begin(), a.shape.end() - 2), bBatch(bm.shape.begin(), bm.shape.end() - 2);
  Dims oBatch(o.shape.begin(), o.shape.end() - 2);
  const int64_t aCount = ops::product(aBatch, 0, aBatch.size());
  const int64_t bCount = ops::product(bBatch, 0, bBatch.size());
  const int64_t oCount = ops::product(oBatch, 0, oBatch.size());
  const float *bias = c.numIn() == 3 ? c.in(2).as<float>() : nullptr;
  // "accumulate": the output is a weight's gradient, to which the product
  // times "scale" is added (the compiler's lowering of a weight gradient and
  // its accumulation as one instruction).
  const bool intoGradient = c.flag("accumulate", false);
  if (intoGradient && (bias || o.dtype != DType::F32))
    c.error("accumulate needs an f32 result and no bias");

  // The calls: one GEMM (a's batch folded into M), one strided batch, or one
  // GEMM per output batch (broadcast batches).
  struct Call {
    int64_t aOff, bOff, cOff;
  };
  GemmDesc d;
  d.K = K;
  d.N = N;
  d.transA = transA;
  d.transB = transB;
  d.bf16 = b.bf16();
  std::vector<Call> calls;
  if (bCount == 1 && !transA) {
    d.M = aCount * M;
    calls.push_back({0, 0, 0});
  } else if (aCount == oCount && bCount == oCount) {
    d.M = M;
    d.batch = oCount;
    d.strideA = M * K;
    d.strideB = K * N;
    d.strideC = M * N;
    calls.push_back({0, 0, 0});
  } else {
    d.M = M;
    Dims sa = ops::broadcastStrides(aBatch, oBatch), sb = ops::broadcastStrides(bBatch, oBatch);
    ops::forEachIndex<2>(oBatch, {sa, sb}, [&](int64_t i, const std::array<int64_t, 2> &off) {
      calls.push_back({off[0] * M * K, off[1] * K * N, i * M * N});
    });
  }
  const size_t es = d.bf16 ? 2 : 4;
  const bool single = calls.size() == 1 && d.batch == 1;
  // bf16: the operands are cast into the scratch on every call anyway, so each
  // gets a row pitch that is a multiple of 8 elements: cuBLASLt's tensor-core
  // kernels want 16-byte-aligned rows. Batch strides and call offsets count
  // pitched rows. A single GEMM also gets K and N rounded up to multiples of 8,
  // the operands' extra rows and columns zero (they add nothing): cuBLASLt runs
  // an odd K or N several times slower (GPT-2's 50257-token head: 17.5 and
  // 11.6 ms per step for its forward and dX GEMMs on an H200, where 50304
  // takes 2.4 and 1.8). A padded N writes C into a padded scratch, copied out.
  auto round8 = [](int64_t n) { return (n + 7) / 8 * 8; };
  const int64_t aLast = a.shape.back(), bLast = bm.shape.back();
  const int64_t aRows = aLast ? a.numel / aLast : 0, bRows = bLast ? bm.numel / bLast : 0;
  int64_t aPitch = aLast, bPitch = bLast, aRowsP = aRows, bRowsP = bRows, Np = N;
  if (d.bf16 && aLast && bLast) {
    aPitch = round8(aLast);
    bPitch = round8(bLast);
    d.ldA = aPitch != aLast ? aPitch : 0;
    d.ldB = bPitch != bLast ? bPitch : 0;
    d.strideA = d.strideA / aLast * aPitch;
    d.strideB = d.strideB / bLast * bPitch;
    for (Call &cl : calls) {
      cl.aOff = cl.aOff / aLast * aPitch;
      cl.bOff = cl.bOff / bLast * bPitch;
    }
    if (single) {
      const int64_t Kp = round8(K);
      Np = intoGradient ? N : round8(N); // a padded C would not hold the gradient
      if (transA)
        aRowsP += Kp - K; // A is [K, M]
      bRowsP += transB ? Np - N : Kp - K; // B is [N, K] or [K, N]
      d.K = Kp;
      d.N = Np;
    }
  }
  // dY's bf16 copy from the GEMM just before (dX), when this one (dW) reads
  // the same bytes with the same layout: as B (a layer's dW = X^T dY), or as
  // A (the tied head's dW = dlogits^T X).
  const CudaBackend::Bf16Operand &prevA = b.lastGemmA;
  auto sameAsPrevA = [&](int64_t id, int64_t rows, int64_t last, int64_t pitch, int64_t padded) {
    const Range src = b.rangeOf(id);
    return d.bf16 && b.fuse && calls.size() == 1 && prevA.instruction + 1 == c.inst.index &&
           prevA.src.begin == src.begin && prevA.src.end == src.end && prevA.rows == rows &&
           prevA.last == last && prevA.pitch == pitch && prevA.paddedRows == padded;
  };
  const bool reuseB = sameAsPrevA(c.inst.in[1], bRows, bLast, bPitch, bRowsP);
  const bool reuseA = !reuseB && sameAsPrevA(c.inst.in[0], aRows, aLast, aPitch, aRowsP);
  // Fold a following `accumulate` of the output into the GEMM (beta = 1).
  const Instruction *acc = !intoGradient && calls.size() == 1 && d.batch == 1 && Np == N && !bias
                               ? fusableAccumulate(c, b)
                               : nullptr;
  float *accInto = intoGradient ? o.as<float>()
                   : acc        ? b.arena().tensor(acc->out[0]).as<float>()
                                : nullptr;
  const float alpha = intoGradient ? (float)c.field("scale", 1.0)
                      : acc        ? (float)acc->json.value("scale", 1.0)
                                   : 1.0f;
  // Alignment from the actual pointers (bf16 copies live in the scratch at
  // 256-byte aligned offsets; per-call offsets may lower it).
  auto lowest = [&](const void *base, int64_t elems, int64_t Call::*field) {
    uint32_t al = alignmentOf(base);
    for (const Call &cl : calls)
      al = std::min(al, alignmentOf(static_cast<const char *>(base) + cl.*field * elems));
    return al;
  };
  const void *aBase = d.bf16 ? nullptr : a.data, *bBase = d.bf16 ? nullptr : bm.data;
  d.alignA = lowest(aBase, (int64_t)es, &Call::aOff);
  d.alignB = lowest(bBase, (int64_t)es, &Call::bOff);
  d.alignC = lowest(accInto ? static_cast<void *>(accInto) : o.data, 4, &Call::cOff);
  d.alignBias = bias ? alignmentOf(bias) : 256;

  // GELU epilogue: C = gelu(A B + bias) into the gelu's output, the
  // pre-activation (which gelu_grad reads) into aux.
  const Instruction *g = calls.size() == 1 && d.batch == 1 && N % 8 == 0 && !accInto
                             ? fusableGelu(c, b)
                             : nullptr;
  std::shared_ptr<Lt::Gemm> gemm;
  float *geluOut = nullptr;
  if (g) {
    GemmDesc dg = d;
    dg.epilogue = bias ? Epilogue::GeluBias : Epilogue::Gelu;
    TensorRef y = b.arena().tensor(g->out[0]);
    dg.alignC = std::min(alignmentOf(y.data), alignmentOf(o.data));
    gemm = b.lt->prepare(dg);
    if (gemm) {
      geluOut = y.as<float>();
      b.fusedAway.insert(g->index);
      ++b.fusions["GELU epilogues"];
    }
  }
  const bool padC = Np != N; // only a single bf16 GEMM, never with the GELU epilogue
  const bool padBias = padC && bias;
  const int64_t gemmM = d.M;
  if (padC) {
    d.ldC = Np;
    d.alignC = 256;
    d.alignBias = 256;
  }
  if (!gemm) {
    d.epilogue = bias ? Epilogue::Bias : Epilogue::None;
    gemm = b.lt->prepare(d);
  }
  auto round256 = [](size_t n) { return (n + 255) / 256 * 256; };
  const size_t aBytes = d.bf16 ? round256((size_t)(aRowsP * aPitch) * 2) : 0;
  const size_t bBytes = d.bf16 ? round256((size_t)(bRowsP * bPitch) * 2) : 0;
  const size_t cBytes = padC ? round256((size_t)(gemmM * Np) * 4) : 0;
  const size_t biasBytes = padBias ? round256((size_t)Np * 4) : 0;
  // Scratch layout: A's copy at 0 and B's after it; a reused B stays where
  // the previous GEMM left it (at 0) and A goes after it.
  const size_t aAt = reuseB ? prevA.bytes : 0, bAt = reuseB ? 0 : aBytes;
  const size_t cAt = std::max(aAt + aBytes, bAt + bBytes), biasAt = cAt + cBytes;
  if (d.bf16)
    b.reserveScratch(biasAt + biasBytes);
  b.lastGemmA = {};
  if (d.bf16 && aAt == 0 && calls.size() == 1)
    b.lastGemmA = {c.inst.index, b.rangeOf(c.inst.in[0]), aRows, aLast, aPitch, aRowsP, aBytes};
  if (acc) {
    b.fusedAway.insert(acc->index);
    ++b.fusions["accumulates into GEMMs"];
  }
  if (reuseA || reuseB)
    ++b.fusions["bf16 operand casts reused"];
  const size_t accIndex = acc ? acc->index : 0;
  CudaBackend *bp = &b;
  const float *A = a.as<float>(), *B = bm.as<float>();
  float *C = accInto ? accInto : o.as<float>();
  const bool bf16 = d.bf16;
  return [=] {
    const void *Ad = A, *Bd = B;
    float *Cd = C;
    const float *biasD = bias;
    char *scratch = static_cast<char *>(bp->scratch());
    if (acc)
      bp->enter(accIndex); // the accumulate's waits: the GEMM now writes its bytes
    if (bf16) {
      auto *sa = reinterpret_cast<__nv_bfloat16 *>(scratch + aAt);
      auto *sb = reinterpret_cast<__nv_bfloat16 *>(scratch + bAt);
      bp->timed("matmul: bf16 operand casts", [&] {
        if (!reuseA)
          castToBf16Pitched(bp->compute, A, sa, aRows, aLast, aPitch);
        if (!reuseB)
          castToBf16Pitched(bp->compute, B, sb, bRows, bLast, bPitch);
        if (aRowsP > aRows && !reuseA)
          checkCuda(cudaMemsetAsync(sa + aRows * aPitch, 0,
                                    (size_t)((aRowsP - aRows) * aPitch) * 2, bp->compute),
                    "cudaMemsetAsync (padded GEMM operand)");
        if (bRowsP > bRows && !reuseB)
          checkCuda(cudaMemsetAsync(sb + bRows * bPitch, 0,
                                    (size_t)((bRowsP - bRows) * bPitch) * 2, bp->compute),
                    "cudaMemsetAsync (padded GEMM operand)");
      });
      Ad = sa;
      Bd = sb;
      if (padC)
        Cd = reinterpret_cast<float *>(scratch + cAt);
      if (padBias) {
        float *pb = reinterpret_cast<float *>(scratch + biasAt);
        checkCuda(cudaMemcpyAsync(pb, bias, (size_t)N * 4, cudaMemcpyDeviceToDevice, bp->compute),
                  "cudaMemcpyAsync (padded bias)");
        checkCuda(cudaMemsetAsync(pb + N, 0, (size_t)(Np - N) * 4, bp->compute),
                  "cudaMemsetAsync (padded bias)");
        biasD = pb;
      }
    }
    for (const auto &cl : calls) {
      const void *pa = static_cast<const char *>(Ad) + cl.aOff * es;
      const void *pb = static_cast<const char *>(Bd) + cl.bOff * es;
      if (geluOut)
        bp->lt->run(*gemm, bp->compute, pa, pb, geluOut, biasD, C);
      else
        bp->lt->run(*gemm, bp->compute, pa, pb, Cd + cl.cOff, biasD, nullptr, accInto != nullptr,
                    alpha);
    }
    if (padC)
      bp->timed("matmul: padded output copies", [&] { copyRowsF32(bp->compute, Cd, Np, C, gemmM, N); });
  };
}

// --- elementwise ---------------------------------------------------------------------

template <BinaryOp OP> Thunk bindBinary(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef x = c.in(0), y = c.in(1), o = c.out(0);
  if (x.dtype != DType::F32 || o.dtype != DType::F32)
    return bindOnHost(c, b);
  auto s = makeStrided(o.shape, {ops::contiguousStrides(o.shape),
                                 ops::broadcastStrides(x.shape, o.shape),
                                 ops::broadcastStrides(y.shape, o.shape)});
  if (!s)
    return bindOnHost(c, b);
  CudaBackend *bp = &b;
  Strided st = *s;
  const float *A = x.as<float>(), *B = y.as<float>();
  float *O = o.as<float>();
  return [bp, st, A, B, O] { binaryF32(bp->compute, OP, st, A, B, O); };
}

template <UnaryOp OP> Thunk bindUnary(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef x = c.in(0), y = c.out(0);
  if (x.dtype != DType::F32)
    return bindOnHost(c, b);
  CudaBackend *bp = &b;
  return [bp, x, y] { unaryF32(bp->compute, OP, x.as<float>(), y.as<float>(), x.numel); };
}

Thunk bindGelu(OpContext &c, CudaBackend &b) {
  validate(c);
  if (b.fusedAway.count(c.inst.index))
    return [] {}; // done by the GEMM's epilogue
  TensorRef x = c.in(0), y = c.out(0);
  bool t = c.str("approximate", "none") == "tanh";
  CudaBackend *bp = &b;
  return [bp, x, y, t] { gelu(bp->compute, x.as<float>(), y.as<float>(), x.numel, t); };
}

Thunk bindGeluGrad(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef dy = c.in(0), x = c.in(1), dx = c.out(0);
  bool t = c.str("approximate", "none") == "tanh";
  CudaBackend *bp = &b;
  return [bp, dy, x, dx, t] {
    geluGrad(bp->compute, dy.as<float>(), x.as<float>(), dx.as<float>(), x.numel, t);
  };
}

// --- reductions, norms -------------------------------------------------------------------

Thunk bindReduce(OpContext &c, CudaBackend &b, bool mean) {
  validate(c);
  TensorRef x = c.in(0), y = c.out(0);
  std::vector<bool> reduced(x.rank(), false);
  for (int64_t a : c.ints("axes"))
    reduced[c.axis(a, x.rank(), "reduction axis")] = true;
  Dims xs = ops::contiguousStrides(x.shape), kShape, kStr, rShape, rStr;
  for (int64_t d = 0; d < x.rank(); ++d) {
    (reduced[d] ? rShape : kShape).push_back(x.shape[d]);
    (reduced[d] ? rStr : kStr).push_back(xs[d]);
  }
  auto kept = makeStrided(kShape, {kStr}), red = makeStrided(rShape, {rStr});
  if (!kept || !red)
    return bindOnHost(c, b);
  b.reserveScratch(reduceScratchBytes(*kept, *red));
  CudaBackend *bp = &b;
  Strided ks = *kept, rs = *red;
  return [bp, x, y, ks, rs, mean] {
    reduceF32(bp->compute, x.as<float>(), ks, rs, mean, y.as<float>(), bp->scratch());
  };
}
Thunk bindReduceSum(OpContext &c, CudaBackend &b) { return bindReduce(c, b, false); }
Thunk bindReduceMean(OpContext &c, CudaBackend &b) { return bindReduce(c, b, true); }

std::pair<int64_t, int64_t> rowsCols(OpContext &c, const TensorRef &x) {
  int64_t axis = c.axis(c.i64("axis", -1), x.rank());
  return {ops::product(x.shape, 0, axis), ops::product(x.shape, axis, x.shape.size())};
}

Thunk bindLayerNorm(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef x = c.in(0), g = c.in(1), y = c.out(0);
  const float *bias = c.numIn() == 3 ? c.in(2).as<float>() : nullptr;
  auto [rows, cols] = rowsCols(c, x);
  float eps = (float)c.f64("epsilon", 1e-5);
  CudaBackend *bp = &b;
  return [bp, x, g, y, bias, rows = rows, cols = cols, eps] {
    layerNorm(bp->compute, x.as<float>(), g.as<float>(), bias, y.as<float>(), rows, cols, eps);
  };
}

Thunk bindLayerNormGrad(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef dy = c.in(0), x = c.in(1), g = c.in(2), dx = c.out(0), dg = c.out(1);
  float *db = c.numOut() == 3 ? c.out(2).as<float>() : nullptr;
  auto [rows, cols] = rowsCols(c, x);
  float eps = (float)c.f64("epsilon", 1e-5);
  b.reserveScratch(layerNormGradScratchBytes(rows, cols));
  CudaBackend *bp = &b;
  return [bp, dy, x, g, dx, dg, db, rows = rows, cols = cols, eps] {
    layerNormGrad(bp->compute, dy.as<float>(), x.as<float>(), g.as<float>(), dx.as<float>(),
                  dg.as<float>(), db, rows, cols, eps, bp->scratch());
  };
}

// --- attention -------------------------------------------------------------------------------

struct AttnDims {
  int64_t BH, Tq, Tk, D, Dv;
  Dims lead;
};

AttnDims attnDims(const TensorRef &q, const TensorRef &k, const TensorRef &v) {
  size_t r = q.shape.size();
  AttnDims s;
  s.lead.assign(q.shape.begin(), q.shape.end() - 2);
  s.Tq = q.shape[r - 2];
  s.D = q.shape[r - 1];
  s.Tk = k.shape[r - 2];
  s.Dv = v.shape[r - 1];
  s.BH = ops::product(s.lead, 0, s.lead.size());
  return s;
}

/// The mask through three strides, or nullopt when its leading dims
/// broadcast in a way one stride cannot express (the host runs those).
std::optional<MaskView> maskView(const TensorRef *m, const AttnDims &s) {
  MaskView mv;
  if (!m)
    return mv;
  Dims full = s.lead;
  full.push_back(s.Tq);
  full.push_back(s.Tk);
  Dims st = ops::broadcastStrides(m->shape, full);
  size_t L = s.lead.size();
  mv.data = m->as<float>();
  mv.sQ = st[L];
  mv.sK = st[L + 1];
  bool allZero = true, dense = true;
  for (size_t d = 0; d < L; ++d) {
    allZero &= st[d] == 0;
    if (st[d] == 0 || (d + 1 < L && st[d] != st[d + 1] * s.lead[d + 1]))
      dense = false;
  }
  if (L == 0 || allZero)
    return mv;
  if (dense) {
    mv.sBH = st[L - 1];
    return mv;
  }
  return std::nullopt;
}

/// The attention_grad that will read this attention's q, k and v: the first
/// later attention or attention_grad of the same three buffers, if it is the
/// gradient with the same attributes (a recomputed forward pairs itself).
const Instruction *pairedGrad(OpContext &c, CudaBackend &b) {
  const auto &prog = b.rank.program;
  const auto &in = c.inst.in;
  if (!b.fuse || in.size() != 3)
    return nullptr;
  for (size_t j = c.inst.index + 1; j < prog.size(); ++j) {
    const Instruction &g = prog[j];
    if (g.op == "attention" && g.in.size() >= 3 && g.in[0] == in[0] && g.in[1] == in[1] &&
        g.in[2] == in[2])
      return nullptr;
    if (g.op == "attention_grad" && g.in.size() == 4 && g.in[1] == in[0] && g.in[2] == in[1] &&
        g.in[3] == in[2])
      return g.attrs == c.inst.attrs ? &g : nullptr;
  }
  return nullptr;
}

/// Space for what the forward at `from` keeps for the gradient at `to`: a
/// slot whose last pair ended before `from`, or a new one.
FlashSaved savedSlot(CudaBackend &b, size_t from, size_t to, int64_t BH, int64_t Tq) {
  const size_t bytes = FlashSaved::bytes(BH, Tq);
  CudaBackend::AttentionSlot *slot = nullptr;
  for (auto &sl : b.attentionSlots)
    if (sl.freeAfter < from && sl.bytes >= bytes) {
      slot = &sl;
      break;
    }
  if (!slot) {
    b.attentionSlots.push_back({static_cast<float *>(b.bindAllocation(bytes)), bytes, 0});
    slot = &b.attentionSlots.back();
  }
  slot->freeAfter = to;
  FlashSaved saved;
  saved.o = slot->base;
  saved.lse2 = slot->base + BH * Tq * 64;
  return saved;
}

/// Grouped-query attention on the GPU. The kernels read one k and one v head
/// per query head, so a grouped k (v) is copied out to q's heads in scratch
/// for the call (the activation the plan stores stays grouped), and a
/// grouped dk (dv) is computed there and summed over its group into the
/// result. Scratch: [k copy][v copy] (forward), [k][v][dk][dv] (backward),
/// then the kernels' own scratch; each part 0 bytes when not grouped.
struct HeadGroups {
  size_t kBytes = 0, vBytes = 0; ///< one grouped operand's copy at q's heads
  std::optional<Strided> expandK, expandV, keptK, redK, keptV, redV;

  size_t prefix(bool grad) const { return (kBytes + vBytes) * (grad ? 2 : 1); }
};

/// The copy out to q's heads and the sum back of one operand of `slices`
/// heads of `row` elements each, `group` query heads per head.
void planGroup(int64_t BH, int64_t slices, int64_t row, size_t &bytes,
               std::optional<Strided> &expand, std::optional<Strided> &kept,
               std::optional<Strided> &red) {
  const int64_t group = slices > 0 ? BH / slices : 1;
  if (group <= 1)
    return;
  bytes = ((size_t)(BH * row) * sizeof(float) + 255) / 256 * 256;
  expand = makeStrided({slices, group, row}, {{group * row, row, 1}, {row, 0, 1}});
  kept = makeStrided({slices, row}, {{group * row, 1}});
  red = makeStrided({group}, {{row}});
}

HeadGroups headGroups(const AttnDims &s, const TensorRef &k, const TensorRef &v) {
  HeadGroups g;
  const size_t r = k.shape.size();
  planGroup(s.BH, ops::product(k.shape, 0, r - 2), s.Tk * s.D, g.kBytes, g.expandK, g.keptK,
            g.redK);
  planGroup(s.BH, ops::product(v.shape, 0, r - 2), s.Tk * s.Dv, g.vBytes, g.expandV, g.keptV,
            g.redV);
  return g;
}

/// Whether every copy and sum of `g` has a kernel launch shape.
bool groupsOnDevice(const HeadGroups &g) {
  return (!g.kBytes || (g.expandK && g.keptK && g.redK)) &&
         (!g.vBytes || (g.expandV && g.keptV && g.redV));
}

/// k and v at q's heads: the operands themselves, or their copies in scratch.
std::pair<const float *, const float *> expandedKV(cudaStream_t st, const HeadGroups &g,
                                                   const TensorRef &k, const TensorRef &v,
                                                   char *scratch) {
  const float *kk = k.as<float>(), *vv = v.as<float>();
  if (g.kBytes) {
    copyStrided(st, *g.expandK, sizeof(float), k.data, scratch);
    kk = reinterpret_cast<const float *>(scratch);
  }
  if (g.vBytes) {
    copyStrided(st, *g.expandV, sizeof(float), v.data, scratch + g.kBytes);
    vv = reinterpret_cast<const float *>(scratch + g.kBytes);
  }
  return {kk, vv};
}

/// Whether the GPU kernels compute this attention (or attention_grad): head
/// dims they tile, and neither a sliding window nor a soft cap, which they do
/// not have yet (the host's kernel runs those).
bool attentionOnDevice(const OpContext &c, const AttnDims &s) {
  return s.D <= kMaxHeadDim && s.Dv <= kMaxHeadDim && c.i64("window", 0) == 0 &&
         c.f64("softcap", 0.0) == 0.0;
}

Thunk bindAttention(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef q = c.in(0), k = c.in(1), v = c.in(2), o = c.out(0);
  AttnDims s = attnDims(q, k, v);
  std::optional<TensorRef> m;
  if (c.numIn() == 4)
    m = c.in(3);
  auto mv = maskView(m ? &*m : nullptr, s);
  const HeadGroups hg = headGroups(s, k, v);
  if (!mv || !attentionOnDevice(c, s) || !groupsOnDevice(hg))
    return bindOnHost(c, b);
  float scale = (float)c.f64("scale");
  bool causal = c.boolean("causal", true);
  CudaBackend *bp = &b;
  MaskView mask = *mv;
  const size_t pre = hg.prefix(false);
  b.reserveScratch(pre);
  if (b.bf16() && flashAttentionSupported(s.D, s.Dv, mask)) {
    const FlashOptions fo = b.flash;
    if (fo.staged)
      b.reserveScratch(pre + flashAttentionScratchBytes(s.BH, s.Tq, s.Tk));
    FlashSaved saved;
    if (const Instruction *g = pairedGrad(c, b)) {
      saved = savedSlot(b, c.inst.index, g->index, s.BH, s.Tq);
      b.attentionSaved[g->index] = saved;
      ++b.fusions["attention statistics kept for the backward"];
    }
    return [bp, q, k, v, o, s, scale, causal, fo, saved, hg, pre] {
      char *scratch = static_cast<char *>(bp->scratch());
      auto [kk, vv] = expandedKV(bp->compute, hg, k, v, scratch);
      flashAttention(bp->compute, q.as<float>(), kk, vv, o.as<float>(), s.BH, s.Tq, s.Tk, scale,
                     causal, scratch + pre, fo, saved);
    };
  }
  return [bp, q, k, v, o, s, mask, scale, causal, hg] {
    auto [kk, vv] = expandedKV(bp->compute, hg, k, v, static_cast<char *>(bp->scratch()));
    attention(bp->compute, q.as<float>(), kk, vv, mask, o.as<float>(), s.BH, s.Tq, s.Tk, s.D, s.Dv,
              scale, causal);
  };
}

Thunk bindAttentionGrad(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef dO = c.in(0), q = c.in(1), k = c.in(2), v = c.in(3);
  TensorRef dq = c.out(0), dk = c.out(1), dv = c.out(2);
  AttnDims s = attnDims(q, k, v);
  std::optional<TensorRef> m;
  if (c.numIn() == 5)
    m = c.in(4);
  auto mv = maskView(m ? &*m : nullptr, s);
  const HeadGroups hg = headGroups(s, k, v);
  if (!mv || !attentionOnDevice(c, s) || !groupsOnDevice(hg))
    return bindOnHost(c, b);
  float scale = (float)c.f64("scale");
  bool causal = c.boolean("causal", true);
  const size_t pre = hg.prefix(true);
  b.reserveScratch(pre + attentionGradScratchBytes(s.BH, s.Tq));
  if (hg.kBytes)
    b.reserveScratch(pre + reduceScratchBytes(*hg.keptK, *hg.redK));
  if (hg.vBytes)
    b.reserveScratch(pre + reduceScratchBytes(*hg.keptV, *hg.redV));
  CudaBackend *bp = &b;
  MaskView mask = *mv;
  const bool flash = b.bf16() && flashAttentionSupported(s.D, s.Dv, mask);
  const FlashOptions fo = b.flash;
  FlashSaved saved;
  if (flash) {
    if (fo.staged)
      b.reserveScratch(pre + flashAttentionGradScratchBytes(s.BH, s.Tq, s.Tk));
    auto kept = b.attentionSaved.find(c.inst.index);
    if (kept != b.attentionSaved.end())
      saved = kept->second;
  }
  return [bp, dO, q, k, v, dq, dk, dv, s, mask, scale, causal, flash, fo, saved, hg, pre] {
    char *scratch = static_cast<char *>(bp->scratch());
    auto [kk, vv] = expandedKV(bp->compute, hg, k, v, scratch);
    // A grouped gradient is computed at q's heads after the copies, then summed.
    char *grads = scratch + hg.kBytes + hg.vBytes;
    float *dkk = hg.kBytes ? reinterpret_cast<float *>(grads) : dk.as<float>();
    float *dvv = hg.vBytes ? reinterpret_cast<float *>(grads + hg.kBytes) : dv.as<float>();
    if (flash)
      flashAttentionGrad(bp->compute, dO.as<float>(), q.as<float>(), kk, vv, dq.as<float>(), dkk,
                         dvv, s.BH, s.Tq, s.Tk, scale, causal, scratch + pre, fo, saved);
    else
      attentionGrad(bp->compute, dO.as<float>(), q.as<float>(), kk, vv, mask, dq.as<float>(), dkk,
                    dvv, s.BH, s.Tq, s.Tk, s.D, s.Dv, scale, causal, scratch + pre);
    if (hg.kBytes)
      reduceF32(bp->compute, dkk, *hg.keptK, *hg.redK, false, dk.as<float>(), scratch + pre);
    if (hg.vBytes)
      reduceF32(bp->compute, dvv, *hg.keptV, *hg.redV, false, dv.as<float>(), scratch + pre);
  };
}

// --- embedding, loss ----------------------------------------------------------------------------

Thunk bindEmbedding(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef table = c.in(0), ids = c.in(1), y = c.out(0);
  int64_t V = table.shape[0], C = table.shape[1];
  CudaBackend *bp = &b;
  int index = (int)c.inst.index;
  return [bp, table, ids, y, V, C, index] {
    embedding(bp->compute, table.as<float>(), ids.data, ids.dtype == DType::I32, y.as<float>(),
              ids.numel, V, C, bp->devError, index);
  };
}

Thunk bindEmbeddingGrad(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef dy = c.in(0), ids = c.in(1), dt = c.out(0);
  int64_t V = dt.shape[0], C = dt.shape[1];
  b.reserveScratch(embeddingGradScratchBytes(ids.numel, V));
  // "accumulate": into a parameter's gradient, times "scale" (EmbeddingOps.cpp).
  const bool accumulate = c.flag("accumulate", false);
  const float scale = (float)c.field("scale", 1.0);
  CudaBackend *bp = &b;
  return [bp, dy, ids, dt, V, C, accumulate, scale] {
    embeddingGrad(bp->compute, dy.as<float>(), ids.data, ids.dtype == DType::I32, dt.as<float>(),
                  ids.numel, V, C, bp->scratch(), accumulate, scale);
  };
}

Reduction reductionOf(OpContext &c) {
  std::string r = c.str("reduction", "mean");
  return r == "sum" ? Reduction::Sum : r == "none" ? Reduction::None : Reduction::Mean;
}

/// A cross_entropy_grad of the same logits and targets that only `loss`
/// instructions separate from this cross_entropy, whose dloss is a constant
/// and whose dlogits overlaps nothing read or written in between but the
/// loss value itself: the forward kernel can write the gradient in the same
/// pass over the logits. (The arena often puts dlogits where the loss value
/// was, since only those `loss` instructions read it: then the fused kernel
/// writes the value to a scalar of its own that they read instead.)
const Instruction *fusableGrad(OpContext &c, CudaBackend &b) {
  const auto &prog = b.rank.program;
  if (!b.fuse)
    return nullptr;
  for (size_t i = c.inst.index + 1; i < prog.size() && i <= c.inst.index + 3; ++i) {
    const Instruction &g = prog[i];
    if (g.op == "loss")
      continue;
    if (g.op != "cross_entropy_grad" || g.in.size() != 3 || g.out.size() != 1)
      return nullptr;
    if (g.in[1] != c.inst.in[0] || g.in[2] != c.inst.in[1] || g.attrs != c.inst.attrs)
      return nullptr;
    if (b.rank.buffer(g.in[0]).kind != BufferKind::Constant)
      return nullptr;
    const int64_t dl = g.out[0];
    for (int64_t id : {c.inst.in[0], c.inst.in[1], g.in[0]})
      if (overlap(b, id, dl))
        return nullptr;
    const Range y = b.rangeOf(c.inst.out[0]);
    if (y.overlaps(b.rangeOf(dl)) && reductionOf(c) == Reduction::None)
      return nullptr; // per-row losses: no scalar to move
    for (size_t j = c.inst.index + 1; j < i; ++j)
      for (int64_t id : prog[j].in) {
        const Range r = b.rangeOf(id);
        if (r.overlaps(b.rangeOf(dl)) && !(r.begin == y.begin && r.end == y.end))
          return nullptr;
      }
    return &g;
  }
  return nullptr;
}

Thunk bindCrossEntropy(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef logits = c.in(0), t = c.in(1), y = c.out(0);
  const int64_t V = logits.shape.back(), rows = t.numel;
  const int64_t ignore = c.i64("ignore_index", -100);
  const Reduction red = reductionOf(c);
  float *dlogits = nullptr;
  const float *dloss = nullptr;
  float *out = y.as<float>();
  if (const Instruction *g = fusableGrad(c, b)) {
    dlogits = b.arena().tensor(g->out[0]).as<float>();
    dloss = b.arena().tensor(g->in[0]).as<float>();
    b.fusedAway.insert(g->index);
    ++b.fusions["cross-entropy gradients"];
    if (overlap(b, c.inst.out[0], g->out[0])) {
      out = static_cast<float *>(b.bindAllocation(sizeof(float)));
      const Range yr = b.rangeOf(c.inst.out[0]);
      for (size_t j = c.inst.index + 1; j < g->index; ++j) {
        const Instruction &l = b.rank.program[j];
        const Range r = l.in.empty() ? Range{0, 0} : b.rangeOf(l.in[0]);
        if (l.op == "loss" && r.begin == yr.begin && r.end == yr.end)
          b.lossFrom[j] = out;
      }
    }
  }
  b.reserveScratch(crossEntropyScratchBytes(rows));
  CudaBackend *bp = &b;
  int index = (int)c.inst.index;
  return [bp, logits, t, out, V, rows, ignore, red, dlogits, dloss, index] {
    crossEntropy(bp->compute, logits.as<float>(), t.data, t.dtype == DType::I32, rows, V, ignore,
                 red, out, dlogits, dloss, bp->scratch(), bp->devError, index);
  };
}

Thunk bindCrossEntropyGrad(OpContext &c, CudaBackend &b) {
  validate(c);
  if (b.fusedAway.count(c.inst.index))
    return [] {}; // written by the fused forward
  TensorRef dloss = c.in(0), logits = c.in(1), t = c.in(2), dl = c.out(0);
  const int64_t V = logits.shape.back(), rows = t.numel;
  const int64_t ignore = c.i64("ignore_index", -100);
  const Reduction red = reductionOf(c);
  b.reserveScratch(crossEntropyScratchBytes(rows));
  CudaBackend *bp = &b;
  int index = (int)c.inst.index;
  return [bp, dloss, logits, t, dl, V, rows, ignore, red, index] {
    crossEntropyGrad(bp->compute, dloss.as<float>(), logits.as<float>(), t.data,
                     t.dtype == DType::I32, rows, V, ignore, red, dl.as<float>(), bp->scratch(),
                     bp->devError, index);
  };
}

// --- movement ------------------------------------------------------------------------------------

Thunk copyThunk(CudaBackend &b, OpContext &c, const Dims &shape, const Dims &dst, const Dims &src,
                const void *from, void *to, size_t es) {
  auto s = makeStrided(shape, {dst, src});
  if (!s)
    return bindOnHost(c, b);
  CudaBackend *bp = &b;
  Strided st = *s;
  return [bp, st, from, to, es] { copyStrided(bp->compute, st, es, from, to); };
}

Thunk bindReshape(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef x = c.in(0), y = c.out(0);
  if (x.data == y.data)
    return [] {};
  CudaBackend *bp = &b;
  return [bp, x, y] {
    checkCuda(cudaMemcpyAsync(y.data, x.data, x.bytes(), cudaMemcpyDeviceToDevice, bp->compute),
              "reshape copy");
  };
}

Thunk bindTranspose(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef x = c.in(0), y = c.out(0);
  Dims perm = c.ints("perm"), xs = ops::contiguousStrides(x.shape), src;
  for (int64_t p : perm)
    src.push_back(xs[p]);
  return copyThunk(b, c, y.shape, ops::contiguousStrides(y.shape), src, x.data, y.data,
                   dtypeSize(x.dtype));
}

Thunk bindBroadcast(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef x = c.in(0), y = c.out(0);
  return copyThunk(b, c, y.shape, ops::contiguousStrides(y.shape),
                   ops::broadcastStrides(x.shape, y.shape), x.data, y.data, dtypeSize(x.dtype));
}

/// Chains thunks (a split or concat is one copy per part).
Thunk sequence(std::vector<Thunk> parts) {
  return [parts = std::move(parts)] {
    for (const Thunk &t : parts)
      t();
  };
}

Thunk bindSplit(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef x = c.in(0);
  int64_t axis = c.axis(c.i64("axis"), x.rank());
  Dims xs = ops::contiguousStrides(x.shape);
  size_t es = dtypeSize(x.dtype);
  std::vector<Thunk> parts;
  int64_t at = 0;
  for (size_t i = 0; i < c.numOut(); ++i) {
    TensorRef y = c.out(i);
    parts.push_back(copyThunk(b, c, y.shape, ops::contiguousStrides(y.shape), xs,
                              static_cast<const char *>(x.data) + at * xs[axis] * es, y.data, es));
    at += y.shape[axis];
  }
  return sequence(std::move(parts));
}

Thunk bindConcat(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef y = c.out(0);
  int64_t axis = c.axis(c.i64("axis"), y.rank());
  Dims ys = ops::contiguousStrides(y.shape);
  size_t es = dtypeSize(y.dtype);
  std::vector<Thunk> parts;
  int64_t at = 0;
  for (size_t i = 0; i < c.numIn(); ++i) {
    TensorRef x = c.in(i);
    parts.push_back(copyThunk(b, c, x.shape, ys, ops::contiguousStrides(x.shape), x.data,
                              static_cast<char *>(y.data) + at * ys[axis] * es, es));
    at += x.shape[axis];
  }
  return sequence(std::move(parts));
}

/// Normalized starts and strides of a slice (as ShapeOps.cpp; validated by it).
std::pair<Dims, Dims> sliceSpec(OpContext &c, const Dims &full) {
  Dims starts = c.ints("starts"), strides = c.ints("strides");
  for (size_t d = 0; d < full.size(); ++d) {
    int64_t n = full[d], v = starts[d];
    if (v < 0)
      v += n;
    starts[d] = v < 0 ? 0 : v > n ? n : v;
  }
  return {starts, strides};
}

Thunk bindSlice(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef x = c.in(0), y = c.out(0);
  auto [starts, strides] = sliceSpec(c, x.shape);
  Dims xs = ops::contiguousStrides(x.shape), src;
  int64_t base = 0;
  for (size_t d = 0; d < xs.size(); ++d) {
    base += starts[d] * xs[d];
    src.push_back(xs[d] * strides[d]);
  }
  size_t es = dtypeSize(x.dtype);
  return copyThunk(b, c, y.shape, ops::contiguousStrides(y.shape), src,
                   static_cast<const char *>(x.data) + base * es, y.data, es);
}

Thunk bindSliceGrad(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef dy = c.in(0), dx = c.out(0);
  auto [starts, strides] = sliceSpec(c, dx.shape);
  Dims xs = ops::contiguousStrides(dx.shape), dst;
  int64_t base = 0;
  for (size_t d = 0; d < xs.size(); ++d) {
    base += starts[d] * xs[d];
    dst.push_back(xs[d] * strides[d]);
  }
  size_t es = dtypeSize(dy.dtype);
  Thunk copy = copyThunk(b, c, dy.shape, dst, ops::contiguousStrides(dy.shape), dy.data,
                         static_cast<char *>(dx.data) + base * es, es);
  CudaBackend *bp = &b;
  return [bp, dx, copy] {
    checkCuda(cudaMemsetAsync(dx.data, 0, dx.bytes(), bp->compute), "slice_grad zero");
    copy();
  };
}

// --- control instructions ----------------------------------------------------------------------

Thunk bindLoadMicrobatch(OpContext &c, CudaBackend &b) {
  validate(c);
  const Plan &plan = c.env.plan;
  const int64_t j = (int64_t)c.field("index");
  const int64_t n = plan.model.batch * plan.model.seq;
  const nlohmann::json *whatField = c.fieldValue("what"); // validated by the CPU binder
  std::string what = whatField ? whatField->get<std::string>() : "both";
  std::vector<TensorRef> outs;
  for (size_t i = 0; i < c.numOut(); ++i)
    outs.push_back(c.out(i));
  const bool targetsOnly = what == "targets";
  // Pinned staging, one per instruction: the copy of step s has completed
  // (finishStep) before step s + 1 refills it.
  void *staging = nullptr;
  checkCuda(cudaMallocHost(&staging, (size_t)n * 8 * 2), "cudaMallocHost (micro-batch staging)");
  auto host = std::make_shared<std::vector<int64_t>>(2 * n);
  ExecEnv *env = &c.env;
  CudaBackend *bp = &b;
  const int64_t dpRank = c.env.rank.dpRank;
  std::shared_ptr<void> keep(staging, [](void *p) { cudaFreeHost(p); });
  return [env, bp, j, n, outs, targetsOnly, host, keep, dpRank] {
    if (!env->sampler)
      fail("no data loader is attached");
    int64_t *tok = host->data(), *tgt = host->data() + n;
    env->sampler->fill(env->state.step, j, dpRank, tok, tgt);
    if (env->observer)
      env->observer(env->state.step, j, dpRank, tok, tgt, n);
    char *st = static_cast<char *>(keep.get());
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorRef &t = outs[i];
      const int64_t *src = (targetsOnly || i == 1) ? tgt : tok;
      char *dst = st + i * n * 8;
      ops::convert(src, DType::I64, dst, t.dtype, n);
      checkCuda(cudaMemcpyAsync(t.data, dst, t.bytes(), cudaMemcpyHostToDevice, bp->compute),
                "cudaMemcpyAsync (micro-batch)");
    }
  };
}

Thunk bindZero(OpContext &c, CudaBackend &b) {
  validate(c);
  std::vector<TensorRef> ts;
  for (size_t i = 0; i < c.numOut(); ++i)
    ts.push_back(c.out(i));
  CudaBackend *bp = &b;
  return [bp, ts] {
    for (const TensorRef &t : ts)
      checkCuda(cudaMemsetAsync(t.data, 0, t.bytes(), bp->compute), "zero");
  };
}

Thunk bindAccumulate(OpContext &c, CudaBackend &b) {
  validate(c);
  if (b.fusedAway.count(c.inst.index))
    return [] {}; // the GEMM before it added into the destination (beta = 1)
  float scale = (float)c.field("scale", 1.0);
  std::vector<std::pair<TensorRef, TensorRef>> pairs;
  for (size_t i = 0; i < c.numIn(); ++i)
    pairs.emplace_back(c.in(i), c.out(i));
  CudaBackend *bp = &b;
  return [bp, pairs, scale] {
    for (const auto &[s, d] : pairs)
      axpy(bp->compute, scale, s.as<float>(), d.as<float>(), s.numel);
  };
}

Thunk bindLoss(OpContext &c, CudaBackend &b) {
  validate(c);
  TensorRef l = c.in(0);
  double scale = c.field("scale", 1.0);
  CudaBackend *bp = &b;
  auto moved = b.lossFrom.find(c.inst.index);
  const float *value = moved != b.lossFrom.end() ? moved->second : l.as<float>();
  return [bp, value, scale] { accumulateLoss(bp->compute, value, scale, bp->lossAcc); };
}

Thunk bindAdamW(OpContext &c, CudaBackend &b) {
  validate(c);
  std::vector<AdamEntry> entries;
  for (const auto &e : c.inst.json["params"]) {
    TensorRef p = c.env.arena.tensor(e["param"].get<int64_t>());
    AdamEntry a{};
    a.p = p.as<float>();
    a.g = c.env.arena.tensor(e["grad"].get<int64_t>()).as<float>();
    a.m = c.env.arena.tensor(e["m"].get<int64_t>()).as<float>();
    a.v = c.env.arena.tensor(e["v"].get<int64_t>()).as<float>();
    a.n = p.numel;
    bool decay;
    if (e.contains("decay"))
      decay = e["decay"].get<bool>();
    else if (const ParamInfo *pi = c.env.plan.findParam(p.info->param))
      decay = pi->decay;
    else
      decay = p.rank() >= 2;
    a.decay = decay ? 1 : 0;
    a.normWeight = e.contains("norm_weight") ? e["norm_weight"].get<double>() : 1.0;
    entries.push_back(a);
  }
  const int count = (int)entries.size();
  const int64_t blocks = adamAssignBlocks(entries.data(), count);
  AdamEntry *dev = nullptr;
  checkCuda(cudaMalloc(&dev, std::max<size_t>(1, entries.size()) * sizeof(AdamEntry)),
            "cudaMalloc (AdamW table)");
  checkCuda(cudaMemcpy(dev, entries.data(), entries.size() * sizeof(AdamEntry),
                       cudaMemcpyHostToDevice),
            "cudaMemcpy (AdamW table)");
  std::shared_ptr<AdamEntry> table(dev, [](AdamEntry *p) { cudaFree(p); });
  b.reserveScratch(gradNormScratchBytes(blocks));
  b.optimizerInPlan = true;
  ExecEnv *env = &c.env;
  CudaBackend *bp = &b;
  return [env, bp, table, count, blocks] {
    gradNormSq(bp->compute, table.get(), count, blocks, bp->normSq, bp->scratch());
    if (bp->ncclWorld)
      checkNccl(ncclAllReduce(bp->normSq, bp->normSq, 1, ncclFloat64, ncclSum, bp->ncclWorld,
                              bp->compute),
                "ncclAllReduce (squared gradient norm)");
    // The constants of this step, as cpu::adamw computes them.
    const OptimizerConfig &o = env->opt;
    const double lr = env->state.lr;
    const int64_t step = env->state.step + 1;
    const double bc1 = 1.0 - std::pow(o.beta1, double(step));
    const double bc2 = 1.0 - std::pow(o.beta2, double(step));
    AdamStep k;
    k.decay = (float)(1.0 - lr * o.weightDecay);
    k.b1 = (float)o.beta1;
    k.b2 = (float)o.beta2;
    k.a1 = (float)(1.0 - o.beta1);
    k.a2 = (float)(1.0 - o.beta2);
    k.stepSize = (float)(-(lr / bc1));
    k.bc2Sqrt = (float)std::sqrt(bc2);
    k.eps = (float)o.eps;
    k.clip = o.gradClip;
    if (o.weightDecay == 0.0)
      k.decay = 1.0f;
    adamw(bp->compute, table.get(), count, blocks, k, bp->normSq);
  };
}

// --- communication (NCCL) ---------------------------------------------------------------------

std::string describe(const TensorRef &t) {
  return concat("buffer ", t.info->id, t.info->name.empty() ? "" : " '" + t.info->name + "'", " (",
                t.bytes(), " bytes)");
}

void needNccl(OpContext &c, CudaBackend &) {
  if (c.env.plan.parallel.worldSize < 2)
    c.error("needs a multi-rank job");
}

/// Point-to-point: the direction picks the communicator and the stream.
Thunk bindSend(OpContext &c, CudaBackend &b) {
  c.cls = InstrClass::Comm;
  c.expectCounts(1, 1, 0, 0);
  needNccl(c, b);
  int peer = (int)c.field("peer"), tag = (int)c.field("tag");
  TensorRef t = c.in(0);
  c.activity = concat("send of buffer ", t.info->id, " to rank ", peer, ", tag ", tag);
  size_t ev = b.newCommEvent(c.inst.index, {b.rangeOf(t.info->id)}, true,
                             concat("send of ", describe(t), " to rank ", peer, ", tag ", tag));
  const bool upward = peer > b.rank.rank;
  CudaBackend *bp = &b;
  return [bp, t, peer, ev, upward] {
    auto &e = bp->commEvents[ev];
    cudaStream_t s = upward ? bp->up : bp->down;
    checkCuda(cudaEventRecord(e.ready, bp->compute), "cudaEventRecord");
    checkCuda(cudaStreamWaitEvent(s, e.ready, 0), "cudaStreamWaitEvent");
    checkNccl(ncclSend(t.data, t.bytes(), ncclUint8, peer, upward ? bp->ncclUp : bp->ncclDown, s),
              "ncclSend");
    checkCuda(cudaEventRecord(e.done, s), "cudaEventRecord");
    bp->sendsOutstanding.push_back(ev);
  };
}

Thunk bindRecv(OpContext &c, CudaBackend &b) {
  c.cls = InstrClass::Comm;
  c.expectCounts(0, 0, 1, 1);
  needNccl(c, b);
  int peer = (int)c.field("peer"), tag = (int)c.field("tag");
  TensorRef t = c.out(0);
  c.activity = concat("recv of buffer ", t.info->id, " from rank ", peer, ", tag ", tag);
  size_t ev = b.newCommEvent(c.inst.index, {b.rangeOf(t.info->id)}, false,
                             concat("receive of ", describe(t), " from rank ", peer, ", tag ", tag));
  const bool upward = peer < b.rank.rank; // the message travels up
  CudaBackend *bp = &b;
  return [bp, t, peer, ev, upward] {
    auto &e = bp->commEvents[ev];
    cudaStream_t s = upward ? bp->up : bp->down;
    checkCuda(cudaEventRecord(e.ready, bp->compute), "cudaEventRecord");
    checkCuda(cudaStreamWaitEvent(s, e.ready, 0), "cudaStreamWaitEvent");
    checkNccl(ncclRecv(t.data, t.bytes(), ncclUint8, peer, upward ? bp->ncclUp : bp->ncclDown, s),
              "ncclRecv");
    checkCuda(cudaEventRecord(e.done, s), "cudaEventRecord");
  };
}

Thunk bindWaitSends(OpContext &c, CudaBackend &b) {
  c.cls = InstrClass::Comm;
  c.expectCounts(0, 0, 0, 0);
  CudaBackend *bp = &b;
  size_t keep = (size_t)c.count("keep");
  return [bp, keep] { bp->waitSends(keep); };
}

/// wait_collectives: the compute stream waits for the dp and tied streams
/// (the async gradient reductions issued so far).
///
/// With "keep" > 0 (the compiler's wait for one of the previous step's
/// parameter gathers, a ZeRO-3 prefetch, or a ZeRO-2/3 run's reduction)
/// there is nothing to add: computeWaits already makes the first later
/// instruction touching a collective's bytes wait for it, and the end of
/// the step completes the rest, so the previous step's gathers do not yet
/// overlap the next step on this backend.
Thunk bindWaitCollectives(OpContext &c, CudaBackend &b) {
  c.cls = InstrClass::Comm;
  c.expectCounts(0, 0, 0, 0);
  if (c.count("keep") > 0)
    return [] {};
  CudaBackend *bp = &b;
  return [bp] { bp->waitCollectives(); };
}

Thunk bindFree(OpContext &c, CudaBackend &) {
  validate(c);
  return [] {};
}

struct Collective {
  cudaStream_t stream;
  ncclComm_t comm;
  int size, me;
  bool tied; ///< the tied-embedding group, not dp
};

/// A collective's stream and size by its "group". Every collective binder
/// asks it, so the fields every collective may carry are read here too:
/// "async" (this backend runs collectives on their own streams anyway) and a
/// reduction's "dtype", which must be "f32": this backend's NCCL sums are f32
/// (refuseBf16Storage turns away plans compiled with grad-reduce=bf16).
Collective collectiveOf(OpContext &c, CudaBackend &b, bool tiedAllowed) {
  (void)c.flag("async", false);
  if (const nlohmann::json *dtype = c.fieldValue("dtype"); dtype && *dtype != "f32")
    c.error("\"dtype\" ", dtype->dump(), " is not run by this backend, whose sums are f32");
  const nlohmann::json *group = c.fieldValue("group");
  std::string g = group && group->is_string() ? group->get<std::string>() : "";
  if (g == "dp")
    return {b.dpStream, nullptr, (int)b.rank.dpGroup.size(), 0, false};
  if (g == "tied" && tiedAllowed)
    return {b.tiedStream, nullptr, (int)b.rank.tiedGroup.size(), 0, true};
  c.error("\"group\" must be ", tiedAllowed ? "\"dp\" or \"tied\"" : "\"dp\"");
}

std::vector<TensorRef> bufList(OpContext &c) {
  const nlohmann::json *it = c.fieldValue("bufs");
  if (!it || !it->is_array() || it->empty())
    c.error("needs a non-empty \"bufs\" array of buffer ids");
  std::vector<TensorRef> out;
  for (const auto &id : *it) {
    if (!id.is_number_integer())
      c.error("\"bufs\" must hold buffer ids, got ", id.dump());
    out.push_back(c.env.arena.tensor(id.get<int64_t>()));
    c.expectFloat(out.back(), "bufs entry");
  }
  return out;
}

/// The stream of a collective waits for the compute stream, runs `body`,
/// records done; the compute stream waits where the bytes are next used.
Thunk collectiveThunk(CudaBackend &b, size_t ev, cudaStream_t s, std::function<void()> body) {
  CudaBackend *bp = &b;
  return [bp, ev, s, body = std::move(body)] {
    auto &e = bp->commEvents[ev];
    checkCuda(cudaEventRecord(e.ready, bp->compute), "cudaEventRecord");
    checkCuda(cudaStreamWaitEvent(s, e.ready, 0), "cudaStreamWaitEvent");
    body();
    checkCuda(cudaEventRecord(e.done, s), "cudaEventRecord");
  };
}

Thunk bindAllreduce(OpContext &c, CudaBackend &b) {
  c.cls = InstrClass::Comm;
  Collective col = collectiveOf(c, b, true);
  const bool tied = col.tied;
  if (col.size == 0)
    c.error("rank ", b.rank.rank, " is in no ", tied ? "tied" : "dp", " group");
  std::vector<TensorRef> bufs = bufList(c);
  float scale = (float)c.field("scale", 1.0);
  int64_t total = 0;
  std::vector<Range> bytes;
  for (const TensorRef &t : bufs) {
    total += t.numel;
    bytes.push_back(b.rangeOf(t.info->id));
  }
  c.activity = concat("all-reduce of ", bufs.size(), " buffer(s), ", total, " floats, on the ",
                      tied ? "tied" : "dp", " group");
  size_t ev = b.newCommEvent(c.inst.index, bytes, false, c.activity);
  CudaBackend *bp = &b;
  const int size = col.size;
  cudaStream_t s = col.stream;
  return collectiveThunk(b, ev, s, [bp, bufs, scale, size, s, tied] {
    if (size > 1) {
      ncclComm_t comm = tied ? bp->ncclTied : bp->ncclDp;
      // Several buffers: one NCCL group, no packing copies.
      checkNccl(ncclGroupStart(), "ncclGroupStart");
      for (const TensorRef &t : bufs)
        checkNccl(ncclAllReduce(t.data, t.data, t.numel, ncclFloat32, ncclSum, comm, s),
                  "ncclAllReduce");
      checkNccl(ncclGroupEnd(), "ncclGroupEnd");
    }
    if (scale != 1.0f)
      for (const TensorRef &t : bufs)
        scaleF32(s, t.as<float>(), t.numel, scale);
  });
}

struct ShardPair {
  TensorRef full, shard;
  int64_t offset;
};

std::vector<ShardPair> shardPairs(OpContext &c, const std::vector<int64_t> &fullIds,
                                  const std::vector<int64_t> &shardIds, int members,
                                  int64_t &block) {
  if (fullIds.empty() || fullIds.size() != shardIds.size())
    c.error("needs as many inputs as outputs (pairs of full buffer and shard)");
  std::vector<ShardPair> pairs;
  block = 0;
  for (size_t i = 0; i < fullIds.size(); ++i) {
    TensorRef full = c.env.arena.tensor(fullIds[i]), shard = c.env.arena.tensor(shardIds[i]);
    c.expectFloat(full, "full buffer");
    c.expectFloat(shard, "shard");
    if (shard.numel == 0 || full.numel > (int64_t)members * shard.numel)
      c.error("full ", describe(full), " does not split into ", members, " shards of ",
              describe(shard));
    pairs.push_back({full, shard, block});
    block += shard.numel;
  }
  return pairs;
}

Thunk bindReduceScatter(OpContext &c, CudaBackend &b) {
  c.cls = InstrClass::Comm;
  Collective col = collectiveOf(c, b, false);
  const int members = std::max(1, col.size);
  int64_t block = 0;
  std::vector<ShardPair> pairs = shardPairs(c, c.inst.in, c.inst.out, members, block);
  float scale = (float)c.field("scale", 1.0);
  std::vector<Range> bytes;
  for (const ShardPair &p : pairs) {
    bytes.push_back(b.rangeOf(p.full.info->id));
    bytes.push_back(b.rangeOf(p.shard.info->id));
  }
  c.activity = concat("reduce-scatter of ", pairs.size(), " buffer(s), ", block,
                      " floats per shard, on the dp group");
  size_t ev = b.newCommEvent(c.inst.index, bytes, false, c.activity);
  const bool direct = pairs.size() == 1 && pairs[0].full.numel == (int64_t)members * block;
  const size_t sendN = direct ? 0 : (size_t)members * block;
  b.reserveCommScratch((sendN + (pairs.size() == 1 ? 0 : block)) * sizeof(float));
  CudaBackend *bp = &b;
  cudaStream_t s = col.stream;
  return collectiveThunk(b, ev, s, [bp, pairs, block, members, scale, direct, sendN, s] {
    float *scratch = static_cast<float *>(bp->commScratch());
    const float *in = direct ? pairs[0].full.as<float>() : scratch;
    if (!direct)
      for (int d = 0; d < members; ++d)
        for (const ShardPair &p : pairs) {
          const int64_t S = p.shard.numel, first = d * S;
          const int64_t n = std::max<int64_t>(0, std::min(S, p.full.numel - first));
          float *dst = scratch + (int64_t)d * block + p.offset;
          if (n > 0)
            checkCuda(cudaMemcpyAsync(dst, p.full.as<float>() + first, n * sizeof(float),
                                      cudaMemcpyDeviceToDevice, s),
                      "pack");
          if (S > n)
            checkCuda(cudaMemsetAsync(dst + n, 0, (S - n) * sizeof(float), s), "pad");
        }
    float *out = pairs.size() == 1 ? pairs[0].shard.as<float>() : scratch + sendN;
    if (members > 1)
      checkNccl(ncclReduceScatter(in, out, block, ncclFloat32, ncclSum, bp->ncclDp, s),
                "ncclReduceScatter");
    else if (in != out)
      checkCuda(cudaMemcpyAsync(out, in, block * sizeof(float), cudaMemcpyDeviceToDevice, s),
                "copy");
    if (scale != 1.0f)
      scaleF32(s, out, block, scale);
    if (pairs.size() > 1)
      for (const ShardPair &p : pairs)
        checkCuda(cudaMemcpyAsync(p.shard.data, out + p.offset, p.shard.bytes(),
                                  cudaMemcpyDeviceToDevice, s),
                  "unpack");
  });
}

Thunk bindAllgather(OpContext &c, CudaBackend &b) {
  c.cls = InstrClass::Comm;
  Collective col = collectiveOf(c, b, false);
  const int members = std::max(1, col.size);
  int64_t block = 0;
  std::vector<ShardPair> pairs = shardPairs(c, c.inst.out, c.inst.in, members, block);
  std::vector<Range> bytes;
  for (const ShardPair &p : pairs) {
    bytes.push_back(b.rangeOf(p.full.info->id));
    bytes.push_back(b.rangeOf(p.shard.info->id));
  }
  c.activity = concat("all-gather of ", pairs.size(), " buffer(s), ", block,
                      " floats per shard, on the dp group");
  size_t ev = b.newCommEvent(c.inst.index, bytes, false, c.activity);
  const bool direct = pairs.size() == 1 && pairs[0].full.numel == (int64_t)members * block;
  const size_t sendN = pairs.size() == 1 ? 0 : block;
  b.reserveCommScratch((sendN + (direct ? 0 : (size_t)members * block)) * sizeof(float));
  CudaBackend *bp = &b;
  cudaStream_t s = col.stream;
  return collectiveThunk(b, ev, s, [bp, pairs, block, members, direct, sendN, s] {
    float *scratch = static_cast<float *>(bp->commScratch());
    const float *in = pairs[0].shard.as<float>();
    if (pairs.size() > 1) {
      for (const ShardPair &p : pairs)
        checkCuda(cudaMemcpyAsync(scratch + p.offset, p.shard.data, p.shard.bytes(),
                                  cudaMemcpyDeviceToDevice, s),
                  "pack");
      in = scratch;
    }
    float *out = direct ? pairs[0].full.as<float>() : scratch + sendN;
    if (members > 1)
      checkNccl(ncclAllGather(in, out, block, ncclFloat32, bp->ncclDp, s), "ncclAllGather");
    else if (in != out)
      checkCuda(cudaMemcpyAsync(out, in, block * sizeof(float), cudaMemcpyDeviceToDevice, s),
                "copy");
    if (!direct)
      for (int d = 0; d < members; ++d)
        for (const ShardPair &p : pairs) {
          const int64_t S = p.shard.numel, first = d * S;
          const int64_t n = std::max<int64_t>(0, std::min(S, p.full.numel - first));
          if (n > 0)
            checkCuda(cudaMemcpyAsync(p.full.as<float>() + first,
                                      out + (int64_t)d * block + p.offset, n * sizeof(float),
                                      cudaMemcpyDeviceToDevice, s),
                      "unpack");
        }
  });
}

// --- the table ----------------------------------------------------------------------------------

const std::map<std::string, CudaBinder> &nativeBinders() {
  static const std::map<std::string, CudaBinder> m = {
      {"matmul", bindMatmul},
      {"add", bindBinary<BinaryOp::Add>},
      {"sub", bindBinary<BinaryOp::Sub>},
      {"mul", bindBinary<BinaryOp::Mul>},
      {"div", bindBinary<BinaryOp::Div>},
      {"pow", bindBinary<BinaryOp::Pow>},
      {"max", bindBinary<BinaryOp::Max>},
      {"neg", bindUnary<UnaryOp::Neg>},
      {"sqrt", bindUnary<UnaryOp::Sqrt>},
      {"tanh", bindUnary<UnaryOp::Tanh>},
      {"erf", bindUnary<UnaryOp::Erf>},
      {"exp", bindUnary<UnaryOp::Exp>},
      {"log", bindUnary<UnaryOp::Log>},
      {"sigmoid", bindUnary<UnaryOp::Sigmoid>},
      {"gelu", bindGelu},
      {"gelu_grad", bindGeluGrad},
      {"reduce_sum", bindReduceSum},
      {"reduce_mean", bindReduceMean},
      {"layer_norm", bindLayerNorm},
      {"layer_norm_grad", bindLayerNormGrad},
      {"attention", bindAttention},
      {"attention_grad", bindAttentionGrad},
      {"embedding", bindEmbedding},
      {"embedding_grad", bindEmbeddingGrad},
      {"cross_entropy", bindCrossEntropy},
      {"cross_entropy_grad", bindCrossEntropyGrad},
      {"reshape", bindReshape},
      {"transpose", bindTranspose},
      {"broadcast", bindBroadcast},
      {"split", bindSplit},
      {"concat", bindConcat},
      {"slice", bindSlice},
      {"slice_grad", bindSliceGrad},
      {"load_microbatch", bindLoadMicrobatch},
      {"zero", bindZero},
      {"accumulate", bindAccumulate},
      {"loss", bindLoss},
      {"adamw", bindAdamW},
      {"send", bindSend},
      {"recv", bindRecv},
      {"wait_sends", bindWaitSends},
      {"wait_collectives", bindWaitCollectives},
      {"allreduce", bindAllreduce},
      {"reduce_scatter", bindReduceScatter},
      {"allgather", bindAllgather},
      {"free", bindFree},
  };
  return m;
}

/// The one binder of the CUDA table: the op's native binder, or the host.
Thunk bindAny(OpContext &c) {
  CudaBackend &b = backendOf(c);
  auto it = nativeBinders().find(c.inst.op);
  Thunk t = it != nativeBinders().end() ? it->second(c, b) : bindOnHost(c, b);
  return wrap(b, c.inst.index, std::move(t));
}

} // namespace

const OpTable &cudaOpTable() {
  static const OpTable table = [] {
    OpTable t;
    for (const auto &kv : opTable())
      t[kv.first] = bindAny;
    return t;
  }();
  return table;
}

} // namespace pipemesh::rt::cuda
