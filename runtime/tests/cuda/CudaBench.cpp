//===- CudaBench.cpp - GEMM and attention throughput at GPT-2 shapes --------===//
//
//   pipemesh-cuda-bench [--json FILE] [--peak-bf16 TFLOPS] [--peak-fp32 TFLOPS]
//
// Times the backend's own cuBLASLt path (the same wrapper, algorithm choice
// and 32 MiB workspace the runtime uses) on the GEMMs of a GPT-2 124M and
// 350M training step at B=16, T=1024 (forward, data and weight gradients),
// in bf16 and fp32, and the attention kernels; prints a table and writes
// JSON. Timing: CUDA events around 20 launches after 5 warm-ups, median of 5
// repetitions; inputs random (never zeros). Peak rates default to the H100 /
// H200 SXM datasheet (989 bf16 dense, 67 fp32 TFLOP/s): pass the measured
// ones when known. Exits 77 without a device.
//
//===----------------------------------------------------------------------===//
#include "../../lib/cuda/CudaUtil.h"

#include "pipemesh/runtime/cuda/CudaBackend.h"
#include "pipemesh/runtime/cuda/CudaKernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

using namespace pipemesh::rt;
using namespace pipemesh::rt::cuda;

namespace {

struct Shape {
  const char *name;
  int64_t M, N, K;
  bool transA, transB;
};

/// The GEMMs of one transformer layer and the head, tokens = B*T.
std::vector<Shape> gptShapes(int64_t tokens, int64_t C, int64_t V) {
  return {
      {"qkv fwd", tokens, 3 * C, C, false, false},     {"attn proj fwd", tokens, C, C, false, false},
      {"fc fwd", tokens, 4 * C, C, false, false},      {"fc proj fwd", tokens, C, 4 * C, false, false},
      {"fc dX", tokens, C, 4 * C, false, true},        {"fc dW", C, 4 * C, tokens, true, false},
      {"lm head fwd", tokens, V, C, false, true},      {"lm head dX", tokens, C, V, false, false},
      {"lm head dW", V, C, tokens, true, false},
  };
}

/// n uniform values in [-1, 1): a block of 2^20 drawn on the host, repeated
/// on the device (drawing the 0.8 G values of a head GEMM's operand on the
/// host took most of the benchmark's time).
float *randomDevice(size_t n, uint64_t seed) {
  const size_t block = std::min<size_t>(n, 1u << 20);
  std::vector<float> h(block);
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (float &x : h)
    x = d(g);
  float *p = nullptr;
  checkCuda(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)), "cudaMalloc");
  checkCuda(cudaMemcpy(p, h.data(), block * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  for (size_t filled = block; filled < n;) {
    const size_t m = std::min(filled, n - filled);
    checkCuda(cudaMemcpy(p + filled, p, m * sizeof(float), cudaMemcpyDeviceToDevice),
              "cudaMemcpy");
    filled += m;
  }
  return p;
}

/// The median over 5 timed batches, each of as many launches (1 to 20) as
/// fit in about 50 ms, after two warm-up launches.
template <typename F> double medianMs(F &&launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  launch();
  cudaEventRecord(a);
  launch();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float once = 0;
  cudaEventElapsedTime(&once, a, b);
  const int reps = std::max(1, std::min(20, (int)(50.0 / std::max(once, 1e-3f))));
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    cudaEventRecord(a);
    for (int i = 0; i < reps; ++i)
      launch();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms / reps);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  std::string reason, json = "cuda-bench.json";
  double peakBf16 = 989, peakFp32 = 67;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--json"))
      json = argv[i + 1];
    else if (!std::strcmp(argv[i], "--peak-bf16"))
      peakBf16 = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--peak-fp32"))
      peakFp32 = std::atof(argv[i + 1]);
  }
  if (deviceCount(reason) == 0) {
    std::printf("SKIPPED: no CUDA device (%s)\n", reason.c_str());
    return 77;
  }
  try {
    checkCuda(cudaSetDevice(0), "cudaSetDevice");
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    attentionInit();
    Lt lt(32u << 20, true);
    std::ofstream out(json);
    out << "{\"device\": \"" << prop.name << "\", \"peak_bf16_tflops\": " << peakBf16
        << ", \"peak_fp32_tflops\": " << peakFp32 << ", \"gemms\": [";
    std::printf("%-10s %-14s %6s %6s %6s %5s %9s %8s %7s\n", "model", "gemm", "M", "N", "K",
                "type", "ms", "TFLOP/s", "% peak");
    bool first = true;
    struct Model {
      const char *name;
      int64_t C;
    };
    for (Model m : {Model{"gpt2-124M", 768}, Model{"gpt2-350M", 1024}}) {
      for (const Shape &s : gptShapes(16 * 1024, m.C, 50304)) {
        float *A = randomDevice((size_t)(s.M * s.K), 1), *B = randomDevice((size_t)(s.K * s.N), 2);
        float *C = nullptr;
        checkCuda(cudaMalloc(&C, (size_t)(s.M * s.N) * sizeof(float)), "cudaMalloc");
        __nv_bfloat16 *Ah = nullptr, *Bh = nullptr;
        checkCuda(cudaMalloc(&Ah, (size_t)(s.M * s.K) * 2), "cudaMalloc");
        checkCuda(cudaMalloc(&Bh, (size_t)(s.K * s.N) * 2), "cudaMalloc");
        castToBf16(nullptr, A, Ah, s.M * s.K);
        castToBf16(nullptr, B, Bh, s.K * s.N);
        for (bool bf16 : {true, false}) {
          GemmDesc d;
          d.M = s.M;
          d.N = s.N;
          d.K = s.K;
          d.transA = s.transA;
          d.transB = s.transB;
          d.bf16 = bf16;
          auto g = lt.prepare(d);
          const void *pa = bf16 ? (const void *)Ah : A, *pb = bf16 ? (const void *)Bh : B;
          double ms = medianMs([&] { lt.run(*g, nullptr, pa, pb, C, nullptr, nullptr); });
          checkCuda(cudaGetLastError(), "gemm");
          double tf = 2.0 * s.M * s.N * s.K / (ms * 1e-3) / 1e12;
          double pct = 100.0 * tf / (bf16 ? peakBf16 : peakFp32);
          std::printf("%-10s %-14s %6lld %6lld %6lld %5s %9.3f %8.1f %6.1f%%\n", m.name, s.name,
                      (long long)s.M, (long long)s.N, (long long)s.K, bf16 ? "bf16" : "fp32", ms,
                      tf, pct);
          out << (first ? "" : ", ") << "{\"model\": \"" << m.name << "\", \"gemm\": \"" << s.name
              << "\", \"M\": " << s.M << ", \"N\": " << s.N << ", \"K\": " << s.K
              << ", \"type\": \"" << (bf16 ? "bf16" : "fp32") << "\", \"ms\": " << ms
              << ", \"tflops\": " << tf << ", \"percent_of_peak\": " << pct << "}";
          first = false;
        }
        cudaFree(A);
        cudaFree(B);
        cudaFree(C);
        cudaFree(Ah);
        cudaFree(Bh);
      }
    }
    out << "], \"attention\": [";
    // Attention: B=16, 12 or 16 heads of 64, T=1024, causal; the fp32 CUDA-core
    // kernels (fp32 mode) and the tensor-core ones (bf16 mode).
    first = true;
    // kind 0: fp32 CUDA cores; then the tensor-core kernels: 1 tiles cast per
    // tile, 64-row blocks (FlashOptions' defaults), 2 staged operands, 3 staged
    // with 128-row blocks, 4 the defaults with the forward keeping its
    // statistics for the backward (what the runtime runs in a plan).
    for (int kindNo : {0, 1, 2, 3, 4})
      for (int64_t H : {12, 16}) {
        const bool tc = kindNo > 0;
        const FlashOptions fo{kindNo == 2 || kindNo == 3, kindNo == 3 ? 128 : 64};
        const int64_t BH = 16 * H, T = 1024, D = 64;
        float *q = randomDevice(BH * T * D, 3), *k = randomDevice(BH * T * D, 4),
              *v = randomDevice(BH * T * D, 5), *o = randomDevice(BH * T * D, 6),
              *dq = randomDevice(BH * T * D, 7), *dk = randomDevice(BH * T * D, 8),
              *dv = randomDevice(BH * T * D, 9);
        void *scratch = nullptr;
        checkCuda(cudaMalloc(&scratch, std::max(attentionGradScratchBytes(BH, T),
                                                flashAttentionGradScratchBytes(BH, T, T))),
                  "cudaMalloc");
        FlashSaved saved;
        if (kindNo == 4) {
          checkCuda(cudaMalloc(&saved.o, FlashSaved::bytes(BH, T)), "cudaMalloc");
          saved.lse2 = saved.o + BH * T * D;
        }
        double fwd = medianMs([&] {
          if (tc)
            flashAttention(nullptr, q, k, v, o, BH, T, T, 0.125f, true, scratch, fo, saved);
          else
            attention(nullptr, q, k, v, {}, o, BH, T, T, D, D, 0.125f, true);
        });
        double bwd = medianMs([&] {
          if (tc)
            flashAttentionGrad(nullptr, o, q, k, v, dq, dk, dv, BH, T, T, 0.125f, true, scratch,
                               fo, saved);
          else
            attentionGrad(nullptr, o, q, k, v, {}, dq, dk, dv, BH, T, T, D, D, 0.125f, true,
                          scratch);
        });
        checkCuda(cudaGetLastError(), "attention");
        // Causal: half of the 4 BH T^2 D multiply-adds of the forward (x2 flops);
        // the backward does 2.5x the forward's products (5 GEMMs against 2), plus
        // a recomputed forward where the forward kept no statistics: 3.5x.
        double fl = 2.0 * BH * T * T * D; // = 4 * BH * T^2 * D / 2
        const double bwdFactor = kindNo == 4 ? 2.5 : 3.5;
        const char *kinds[] = {"fp32 CUDA cores", "bf16 tc per tile 64", "bf16 tc staged 64",
                               "bf16 tc staged 128", "bf16 tc 64 kept stats"};
        const char *kind = kinds[kindNo];
        std::printf("attention  H=%-3lld %-22s fwd %8.3f ms (%6.1f TFLOP/s)  bwd %8.3f ms "
                    "(%6.1f TFLOP/s)\n",
                    (long long)H, kind, fwd, fl / (fwd * 1e-3) / 1e12, bwd,
                    bwdFactor * fl / (bwd * 1e-3) / 1e12);
        out << (first ? "" : ", ") << "{\"heads\": " << H << ", \"kernels\": \"" << kind
            << "\", \"fwd_ms\": " << fwd << ", \"bwd_ms\": " << bwd
            << ", \"fwd_tflops\": " << fl / (fwd * 1e-3) / 1e12
            << ", \"bwd_tflops\": " << bwdFactor * fl / (bwd * 1e-3) / 1e12 << "}";
        first = false;
        for (float *p : {q, k, v, o, dq, dk, dv})
          cudaFree(p);
        cudaFree(saved.o);
        cudaFree(scratch);
      }
    out << "]}\n";
    std::printf("wrote %s\n", json.c_str());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pipemesh-cuda-bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
