//===- Calibrate.cpp - measure this machine into a cluster file -----------===//
#include "Calibrate.h"

#include "pipemesh/CostModel/CostModel.h"
#include "pipemesh/CostModel/Hardware.h"
#include "pipemesh/runtime/CpuKernels.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <vector>

using namespace pipemesh;
namespace json = llvm::json;
namespace cpu = pipemesh::rt::cpu;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// The median of repeated runs of `f` (after one warm-up), repeating until
/// `budget` seconds have passed (at least 5 runs). The median, not the
/// fastest: the runtime's kernels run among the same interruptions.
template <typename F> double timeMedian(F &&f, double budget) {
  f();
  std::vector<double> ts;
  double start = now();
  while (ts.size() < 5 || (now() - start < budget && ts.size() < 10000)) {
    double t0 = now();
    f();
    ts.push_back(now() - t0);
  }
  std::nth_element(ts.begin(), ts.begin() + ts.size() / 2, ts.end());
  return ts[ts.size() / 2];
}

/// Weighted least squares of t = c . features minimising relative errors,
/// every coefficient non-negative: the best fit over the subsets of the
/// features whose unconstrained solution is non-negative. Small systems
/// (up to 3 features), solved by Gaussian elimination.
std::vector<double> fitNonNegative(const std::vector<std::vector<double>> &features,
                                   const std::vector<double> &t) {
  const size_t n = features.front().size();
  std::vector<double> best(n, 0.0);
  double bestErr = INFINITY;
  for (unsigned mask = 1; mask < (1u << n); ++mask) {
    std::vector<size_t> cols;
    for (size_t j = 0; j < n; ++j)
      if (mask >> j & 1)
        cols.push_back(j);
    const size_t m = cols.size();
    if (m > t.size())
      continue;
    // Normal equations of rows features[i][cols] / t[i] against 1.
    std::vector<std::vector<double>> a(m, std::vector<double>(m + 1, 0.0));
    for (size_t i = 0; i < t.size(); ++i)
      for (size_t r = 0; r < m; ++r) {
        double xr = features[i][cols[r]] / t[i];
        for (size_t c = 0; c < m; ++c)
          a[r][c] += xr * features[i][cols[c]] / t[i];
        a[r][m] += xr;
      }
    bool singular = false;
    for (size_t c = 0; c < m && !singular; ++c) {
      size_t piv = c;
      for (size_t r = c + 1; r < m; ++r)
        if (std::abs(a[r][c]) > std::abs(a[piv][c]))
          piv = r;
      std::swap(a[c], a[piv]);
      if (std::abs(a[c][c]) < 1e-300) {
        singular = true;
        break;
      }
      for (size_t r = 0; r < m; ++r)
        if (r != c) {
          double f = a[r][c] / a[c][c];
          for (size_t k = c; k <= m; ++k)
            a[r][k] -= f * a[c][k];
        }
    }
    if (singular)
      continue;
    std::vector<double> coef(n, 0.0);
    bool negative = false;
    for (size_t r = 0; r < m; ++r) {
      coef[cols[r]] = a[r][m] / a[r][r];
      negative |= !(coef[cols[r]] >= 0);
    }
    if (negative)
      continue;
    double err = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      double model = 0;
      for (size_t j = 0; j < n; ++j)
        model += coef[j] * features[i][j];
      err += (model / t[i] - 1) * (model / t[i] - 1);
    }
    if (err < bestErr)
      bestErr = err, best = coef;
  }
  return best;
}

/// t = a x + b by fitNonNegative; when no positive slope fits (a flat or
/// falling series), the line through 0 and the largest point.
void fitLine(const std::vector<std::pair<double, double>> &xt, double &a, double &b) {
  std::vector<std::vector<double>> features;
  std::vector<double> t;
  for (auto [x, ti] : xt) {
    features.push_back({1.0, x});
    t.push_back(ti);
  }
  std::vector<double> c = fitNonNegative(features, t);
  b = c[0], a = c[1];
  if (a <= 0) {
    auto big = *std::max_element(xt.begin(), xt.end());
    a = big.second / big.first;
    b = 0;
  }
}

bool launchedByMpi() {
  for (const char *v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v))
      return true;
  return false;
}

struct Gemm {
  int64_t m, n, k;
};

/// One op's kernel timed at several sizes: x is what its row's rate divides
/// (the bytes the cost model counts, or the flops for attention), t the
/// median seconds; attention's query rows beside them.
struct KernelSamples {
  bool byFlops = false;
  std::vector<std::pair<double, double>> pts;
  std::vector<double> rows;
  json::Array raw;
};

/// Bytes a kernel's rotating operand sets span: this machine's last-level
/// cache (32 MiB).
constexpr double kColdBytes = 32.0 * 1024 * 1024;

/// Times the runtime's kernel of every op with a per-op row (Hardware.h
/// KernelClass) at GPT-like shapes around the small models' (rows = batch x
/// seq of 256 to 2048, width 128 to 512), at 2 (quick) or 3 sizes, and
/// attention at 3 or 6 (head sizes 32 to 128, 128 to 1024 tokens),
/// counting bytes and flops as CostModel.cpp does: every operand
/// read and every result written once, attention by attentionFlops /
/// attentionGradFlops.
///
/// Consecutive calls take their operands from different memory, rotating
/// over sets that span kColdBytes: in a training step an op's operands lie
/// spread over an arena larger than the caches (the tiny GPT's is 48 MiB), and
/// a kernel timed on the same few hot buffers looks up to 2-3x faster than it
/// runs there (a residual add: about 50 GB/s hot, 20-28 GB/s in a step).
std::map<std::string, KernelSamples> measureKernels(double budget, bool quick) {
  std::map<std::string, KernelSamples> out;
  // fn(p) runs the kernel on operands in p[0, floats); each call gets the
  // next of the rotating sets.
  // rows: attention's query rows (its row's third term), 0 for other ops.
  auto sample = [&](const char *op, double x, json::Object shape, int64_t floats, auto &&fn,
                    double rows = 0) {
    int64_t sets = std::clamp<int64_t>((int64_t)(kColdBytes / (4.0 * floats)), 1, 1024);
    std::vector<float> mem((size_t)(sets * floats), 0.25f);
    int64_t next = 0;
    double t = timeMedian([&] { fn(mem.data() + (next++ % sets) * floats); }, budget);
    KernelSamples &s = out[op];
    s.pts.push_back({x, t});
    if (rows > 0)
      s.rows.push_back(rows);
    shape[s.byFlops ? "flops" : "bytes"] = x;
    shape["seconds"] = t;
    s.raw.push_back(std::move(shape));
  };
  using RC = std::vector<std::pair<int64_t, int64_t>>;
  // --quick keeps the smallest and the largest of 3 sizes.
  auto pick = [&](std::vector<int64_t> v) {
    return quick ? std::vector<int64_t>{v.front(), v.back()} : v;
  };
  auto pick2 = [&](RC v) { return quick ? RC{v.front(), v.back()} : v; };
  const double F = sizeof(float);
  using Dims = cpu::Dims;

  // Elementwise [rows, 128]: 32K to 512K elements.
  for (int64_t n : pick({1 << 15, 1 << 17, 1 << 19})) {
    Dims shape = {n / 128, 128};
    json::Object sh{{"elements", n}};
    sample("gelu", 2 * F * n, sh, 2 * n, [&](float *p) { cpu::gelu<float>(p, p + n, n, true); });
    sample("gelu_grad", 3 * F * n, sh, 3 * n,
           [&](float *p) { cpu::geluGrad<float>(p, p + n, p + 2 * n, n, true); });
    for (auto [op, b] : {std::pair{"add", cpu::Binary::Add}, std::pair{"sub", cpu::Binary::Sub},
                         std::pair{"mul", cpu::Binary::Mul}})
      sample(op, 3 * F * n, sh, 3 * n, [&, b = b](float *p) {
        cpu::binary<float>(b, p, shape, p + n, shape, p + 2 * n, shape);
      });
  }
  // Head split / merge: [B, T, H, D] -> [B, H, T, D], T 128, 4 heads of 32.
  for (int64_t b : pick({2, 8, 32})) {
    Dims shape = {b, 128, 4, 32};
    int64_t n = b * 128 * 4 * 32;
    sample("transpose", 2 * F * n, json::Object{{"shape", json::Array{b, 128, 4, 32}}}, 2 * n,
           [&](float *p) { cpu::transpose<float>(p, shape, {0, 2, 1, 3}, p + n); });
  }
  // Rows x width: layer norms, bias gradients (reduce over batch and seq),
  // the fused QKV split and its concat.
  for (auto [r, c] : pick2({{256, 128}, {1024, 128}, {1024, 512}})) {
    int64_t n = r * c;
    json::Object sh{{"rows", r}, {"cols", c}};
    // x, g, b -> y
    sample("layer_norm", F * (2.0 * n + 2.0 * c), sh, 2 * n + 2 * c, [&](float *p) {
      cpu::layerNorm<float>(p, p + n, p + n + c, p + n + 2 * c, r, c, 1e-5f);
    });
    // dy, x, g -> dx, dg, db
    sample("layer_norm_grad", F * (3.0 * n + 3.0 * c), sh, 3 * n + 3 * c, [&](float *p) {
      cpu::layerNormGrad<float>(p, p + n, p + 2 * n, p + 2 * n + c, p + 3 * n + c,
                                p + 3 * n + 2 * c, r, c, 1e-5f);
    });
    Dims btc = {r / 128, 128, c};
    sample("reduce_sum", F * ((double)n + c), sh, n + c,
           [&](float *p) { cpu::reduce<float>(p, btc, {0, 1}, false, p + n); });
    // split [B, T, 3C'] along the last axis into three [B, T, C'] (C' = c / 3
    // rounded to 32), and back.
    int64_t part = std::max<int64_t>(32, c / 3 / 32 * 32), pn = r * part;
    Dims whole = {r / 128, 128, 3 * part}, piece = {r / 128, 128, part};
    json::Object ssh{{"shape", json::Array{r / 128, 128, 3 * part}}};
    sample("split", 2 * F * 3 * pn, ssh, 6 * pn, [&](float *p) {
      cpu::split<float>(p, whole, 2, {part, part, part},
                        {p + 3 * pn, p + 4 * pn, p + 5 * pn});
    });
    sample("concat", 2 * F * 3 * pn, ssh, 6 * pn, [&](float *p) {
      cpu::concat<float>({p, p + pn, p + 2 * pn}, {piece, piece, piece}, 2, p + 3 * pn);
    });
  }
  // Softmax over attention-score rows [BH * T, T] (unfused attention).
  for (auto [r, c] : pick2({{1024, 128}, {2048, 128}, {2048, 256}})) {
    int64_t n = r * c;
    json::Object sh{{"rows", r}, {"cols", c}};
    sample("softmax", 2 * F * n, sh, 2 * n,
           [&](float *p) { cpu::softmax<float>(p, p + n, r, c); });
    sample("softmax_grad", 3 * F * n, sh, 3 * n,
           [&](float *p) { cpu::softmaxGrad<float>(p, p + n, p + 2 * n, r, c); });
  }
  // The loss over logits [rows, vocab] (the targets stay put: 8 bytes a row).
  for (auto [r, v] : pick2({{256, 256}, {1024, 256}, {1024, 1024}})) {
    int64_t n = r * v;
    std::vector<int64_t> targets(r);
    for (int64_t i = 0; i < r; ++i)
      targets[i] = (i * 7) % v;
    json::Object sh{{"rows", r}, {"vocab", v}};
    sample("cross_entropy", cost::crossEntropyCost(r, v, 4, false).bytes, sh, n + r,
           [&](float *p) {
             cpu::crossEntropy<float>(p, targets.data(), p + n, r, v, -100);
           });
    sample("cross_entropy_grad", cost::crossEntropyCost(r, v, 4, true).bytes, sh, 2 * n,
           [&](float *p) {
             cpu::crossEntropyGrad<float>(p, targets.data(), nullptr, 1.0f / r, p + n, r, v,
                                          -100);
           });
  }
  // Token embedding: rows of a [256, 128] table gathered for n tokens, and its
  // gradient (zero the table, add every dy row into its table row).
  {
    const int64_t V = 256, C = 128;
    for (int64_t n : pick({256, 1024, 4096})) {
      std::vector<int64_t> ids(n);
      for (int64_t i = 0; i < n; ++i)
        ids[i] = (i * 31) % V;
      json::Object sh{{"tokens", n}, {"vocab", V}, {"cols", C}};
      sample("embedding", 8.0 * n + 2 * F * n * C, sh, V * C + n * C, [&](float *p) {
        cpu::embedding<float>(p, ids.data(), p + V * C, n, V, C);
      });
      sample("embedding_grad", F * V * C + 3 * F * n * C + 8.0 * n, sh, V * C + n * C,
             [&](float *p) { cpu::embeddingGrad<float>(p + V * C, ids.data(), p, n, V, C); });
    }
  }
  // Gradient accumulation (dst += src over a parameter's gradient: pipemesh-
  // run's accumulate is the axpy loop), from a bias to a weight matrix.
  for (int64_t n : pick({512, 1 << 14, 1 << 16}))
    sample("accumulate", 3 * F * n, json::Object{{"elements", n}}, 2 * n,
           [&](float *p) { cpu::axpy<float>(1.0f, p, p + n, n); });
  // The optimizer: AdamW over a rank's flat parameters plus the sum of squares
  // of the gradient norm, counted as plans count adamw (PlanLoader.cpp): 8
  // bytes per gradient byte (p, g, m, v read; p, m, v written; g read again).
  for (int64_t n : pick({1 << 14, 1 << 17, 1 << 20}))
    sample("adamw", 8 * F * n, json::Object{{"elements", n}}, 4 * n, [&](float *p) {
      volatile double norm = cpu::sumSquares<float>(p + n, n);
      (void)norm;
      cpu::adamw<float>(p, p + n, p + 2 * n, p + 3 * n, n, 1e-4, 0.9, 0.95, 1e-8, 0.1, 2, 1.0);
    });
  // Attention, forward and backward apart (their loops differ): causal,
  // timed by the flops the cost model counts and fitted with a time per
  // query row besides: their flop rate grows with the head size (about 1.3x
  // from 32 to 64) and the sequence (about 2x from 128 to 1024 tokens), as
  // each row's fixed work (the softmax's passes, its small GEMMs' set-up)
  // is spread over more flops. So the shapes vary the head size and the
  // sequence, from the small models' (T 128, head size 32) to 1024 x 128.
  out["attention"].byFlops = out["attention_grad"].byFlops = true;
  struct Att {
    int64_t bh, t, d;
  };
  for (Att a : quick ? std::vector<Att>{{8, 128, 32}, {16, 256, 64}, {2, 1024, 128}}
                     : std::vector<Att>{{8, 128, 32}, {32, 128, 32}, {16, 256, 32},
                                        {16, 256, 64}, {4, 512, 64}, {2, 1024, 128}}) {
    int64_t n = a.bh * a.t * a.d;
    const float scale = 1.0f / std::sqrt((float)a.d);
    json::Object sh{{"bh", a.bh}, {"t", a.t}, {"d", a.d}};
    // q, k, v -> o
    sample("attention", cost::attentionFlops(a.bh, a.t, a.t, a.d, a.d, true), sh, 4 * n,
           [&](float *p) {
             cpu::attention<float>(p, p + n, p + 2 * n, nullptr, 0, 0, 0, p + 3 * n, a.bh, a.t,
                                   a.t, a.d, a.d, scale, true);
           },
           (double)(a.bh * a.t));
    // dO, q, k, v -> dq, dk, dv
    sample("attention_grad", cost::attentionGradFlops(a.bh, a.t, a.t, a.d, a.d, true), sh,
           7 * n, [&](float *p) {
             cpu::attentionGrad<float>(p, p + n, p + 2 * n, p + 3 * n, nullptr, 0, 0, 0,
                                       p + 4 * n, p + 5 * n, p + 6 * n, a.bh, a.t, a.t, a.d, a.d,
                                       scale, true);
           },
           (double)(a.bh * a.t));
  }
  return out;
}

/// A row from samples: t = overhead + x / rate by relative least squares;
/// attention's t = overhead + flops / rate + rows * row_s.
cost::KernelFit fitKernel(const KernelSamples &s) {
  cost::KernelFit f;
  if (!s.rows.empty() && s.rows.size() == s.pts.size()) {
    std::vector<std::vector<double>> features;
    std::vector<double> t;
    for (size_t i = 0; i < s.pts.size(); ++i) {
      features.push_back({1.0, s.pts[i].first, s.rows[i]});
      t.push_back(s.pts[i].second);
    }
    std::vector<double> c = fitNonNegative(features, t);
    if (c[1] > 0) {
      f.overhead = c[0];
      f.flopRate = 1.0 / c[1];
      f.rowSeconds = c[2];
      return f;
    }
    // No fit with a positive flop term: the line below.
  }
  double a, b;
  fitLine(s.pts, a, b);
  (s.byFlops ? f.flopRate : f.bandwidth) = 1.0 / a;
  f.overhead = b;
  return f;
}

} // namespace

int pipemesh::sim::runCalibration(const std::string &outPath, bool quick) {
  int rank = 0, size = 1;
  bool mpi = launchedByMpi();
  if (mpi) {
    MPI_Init(nullptr, nullptr);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  auto barrier = [&] {
    if (mpi)
      MPI_Barrier(MPI_COMM_WORLD);
  };
  llvm::raw_ostream &os = llvm::outs();
  const double budget = quick ? 0.02 : 0.15;
  json::Object raw;

  // --- GEMMs: the runtime's matmul kernel (BLAS sgemm) ---------------------
  cost::Device dev = cost::Device::cpu();
  dev.name = "cpu-calibrated";
  std::vector<Gemm> shapes = {{32, 64, 64},    {32, 192, 64},    {32, 256, 64},
                              {128, 128, 128}, {256, 256, 256},  {512, 512, 512},
                              {1024, 768, 768}, {1024, 1024, 1024}};
  if (!quick)
    shapes.push_back({2048, 2048, 1024});
  std::vector<std::pair<double, double>> gemmPts;
  json::Array gemmRaw;
  barrier();
  // Three sweeps (one with --quick), each shape's time the median of its
  // sweeps' medians: on a VM the same shape ran at 85-167 GFLOP/s in
  // calibrations minutes apart, and a sweep's shapes share its moment.
  const int sweeps = quick ? 1 : 3;
  std::vector<std::vector<double>> times(shapes.size());
  for (int sweep = 0; sweep < sweeps; ++sweep)
    for (auto [i, g] : llvm::enumerate(shapes)) {
      std::vector<float> A(g.m * g.k, 0.5f), B(g.k * g.n, 0.25f), C(g.m * g.n);
      times[i].push_back(timeMedian(
          [&] {
            cpu::matmul<float>(A.data(), B.data(), nullptr, C.data(), 1, g.m, g.n, g.k, false,
                               false, 0, 0);
          },
          budget));
    }
  for (auto [i, g] : llvm::enumerate(shapes)) {
    std::vector<double> &ts = times[i];
    std::sort(ts.begin(), ts.end());
    double t = ts[ts.size() / 2];
    double flops = 2.0 * g.m * g.n * g.k;
    gemmPts.push_back({flops, t});
    gemmRaw.push_back(json::Object{{"m", g.m}, {"n", g.n}, {"k", g.k}, {"seconds", t},
                                   {"gflops", flops / t / 1e9},
                                   {"sweeps_gflops", json::Array(llvm::map_range(ts, [&](double x) {
                                      return flops / x / 1e9;
                                    }))}});
  }
  raw["gemm"] = std::move(gemmRaw);

  // --- Bandwidth: axpy (y += a x reads 2, writes 1 floats per element) -----
  std::vector<std::pair<double, double>> bwPts;
  json::Array bwRaw;
  std::vector<int64_t> lens = {1 << 10, 1 << 13, 1 << 16, 1 << 19, 1 << 22};
  if (!quick)
    lens.push_back(1 << 24);
  barrier();
  for (int64_t n : lens) {
    std::vector<float> x(n, 1.0f), y(n, 0.0f);
    double t = timeMedian([&] { cpu::axpy<float>(1e-7f, x.data(), y.data(), n); }, budget);
    double bytes = 12.0 * n;
    bwPts.push_back({bytes, t});
    bwRaw.push_back(json::Object{{"elements", n}, {"seconds", t}, {"gbps", bytes / t / 1e9}});
  }
  raw["axpy"] = std::move(bwRaw);

  // --- Vector throughput: gelu (15 flops an element in the cost model) ------
  double geluT, geluN = quick ? (1 << 20) : (1 << 22);
  double attentionRate = 0; // measured below, after the GEMM fit
  {
    std::vector<float> x((size_t)geluN, 0.3f), y((size_t)geluN);
    geluT = timeMedian([&] { cpu::gelu<float>(x.data(), y.data(), (int64_t)geluN, false); }, budget);
    raw["gelu"] = json::Object{{"elements", geluN}, {"seconds", geluT}};
  }

  // Fit the device.
  double bwA, bwB;
  fitLine(bwPts, bwA, bwB);
  dev.memBandwidth = 1.0 / bwA;
  dev.memEfficiency = 1.0;
  dev.kernelOverhead = bwB;
  // GEMM curve: the asymptotic rate is the median of the large shapes'
  // rates (their best was one lucky moment as often as not); each shape then
  // says where the curve f / (f + h) must pass, and the median of those h is
  // robust to a noisy (shared) machine.
  std::vector<double> largeRates;
  for (auto [f, t] : gemmPts)
    if (f >= 1e8)
      largeRates.push_back(f / t);
  if (largeRates.empty())
    for (auto [f, t] : gemmPts)
      largeRates.push_back(f / t);
  std::sort(largeRates.begin(), largeRates.end());
  double rate = largeRates[largeRates.size() / 2];
  std::vector<double> halves;
  for (auto [f, t] : gemmPts) {
    double eff = (f / std::max(t - dev.kernelOverhead, 1e-9)) / rate;
    halves.push_back(eff >= 1 ? 0.0 : f * (1.0 / eff - 1.0));
  }
  std::sort(halves.begin(), halves.end());
  if (rate > dev.peakFlopsFp32) {
    dev.peakFlopsFp32 = rate;
    dev.gemmEfficiency = 1.0;
  } else {
    dev.gemmEfficiency = rate / dev.peakFlopsFp32;
  }
  dev.gemmHalfFlops = halves[halves.size() / 2];
  double geluMem = 8.0 * geluN / dev.memBandwidth;
  double geluCompute = geluT - dev.kernelOverhead;
  if (geluCompute > geluMem)
    dev.vectorEfficiency =
        std::clamp(15.0 * geluN / geluCompute / dev.peakFlopsFp32, 1e-3, 1.0);

  // --- Per-op rows: every op with a KernelClass of its own -----------------
  // Two sweeps, a few seconds apart, each point the faster of its two
  // medians: a burst of other work on this 2-core machine (a build) that
  // slows one sweep's point does not become the row.
  barrier();
  std::map<std::string, KernelSamples> kernelSamples = measureKernels(budget, quick);
  if (!quick) {
    std::map<std::string, KernelSamples> again = measureKernels(budget, quick);
    for (auto &[op, samples] : kernelSamples)
      for (size_t i = 0; i < samples.pts.size(); ++i)
        if (again[op].pts[i].second < samples.pts[i].second) {
          samples.pts[i] = again[op].pts[i];
          samples.raw[i] = std::move(again[op].raw[i]);
        }
  }
  json::Object kernelRaw;
  for (auto &[op, samples] : kernelSamples) {
    dev.kernels[op] = fitKernel(samples);
    kernelRaw[op] = std::move(samples.raw);
  }
  raw["kernels"] = std::move(kernelRaw);
  // The class model's attention efficiency (devices read without the rows):
  // forward and backward together, at the largest shape timed.
  {
    const auto &fwd = kernelSamples["attention"].pts.back(),
               &bwd = kernelSamples["attention_grad"].pts.back();
    attentionRate = (fwd.first + bwd.first) / std::max(fwd.second + bwd.second, 1e-9);
  }
  if (attentionRate > 0)
    dev.attentionEfficiency = std::clamp(attentionRate / dev.peakFlops(), 1e-3, 1.0);

  // --- MPI: ping-pong and an all-reduce -------------------------------------
  cost::Link link = cost::Link::sharedMemory();
  link.name = "shm-calibrated";
  if (mpi && size >= 2) {
    auto pingpong = [&](int64_t bytes) {
      std::vector<char> buf(std::max<int64_t>(bytes, 1));
      int reps = quick ? 20 : 100;
      if (bytes > (1 << 20))
        reps = quick ? 4 : 20;
      double best = 1e30;
      for (int rep = 0; rep < reps; ++rep) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (rank == 0) {
          MPI_Send(buf.data(), (int)bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
          MPI_Recv(buf.data(), (int)bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
          MPI_Recv(buf.data(), (int)bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(buf.data(), (int)bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
        }
        best = std::min(best, (MPI_Wtime() - t0) / 2);
      }
      MPI_Bcast(&best, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      return best;
    };
    const int64_t small = 8, large = 8 << 20;
    double ts = pingpong(small), tl = pingpong(large);
    link.alpha = ts;
    link.bandwidth = tl > ts ? (double)(large - small) / (tl - ts) : link.bandwidth;
    raw["p2p"] = json::Object{{"bytes_small", small}, {"seconds_small", ts},
                              {"bytes_large", large}, {"seconds_large", tl}};
    // All-reduce over the world, against the ring formula with that link.
    int64_t n = 1 << 20; // floats
    std::vector<float> a(n, 1.0f), b(n);
    double best = 1e30;
    for (int rep = 0; rep < (quick ? 3 : 10); ++rep) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(a.data(), b.data(), (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      best = std::min(best, MPI_Wtime() - t0);
    }
    MPI_Bcast(&best, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    raw["allreduce"] = json::Object{
        {"ranks", size},
        {"bytes", 4.0 * n},
        {"seconds", best},
        {"ring_model_seconds", cost::ringAllReduceTime(size, 4.0 * n, link)}};
  }

  cost::Cluster c;
  c.name = "calibrated";
  c.device = dev;
  c.gpusPerNode = 0;
  c.nodes = 1;
  c.intraNode = link;
  c.interNode = link;
  c.description = "measured on this machine by pipemesh-sim --calibrate with " +
                  std::to_string(size) + " rank(s) running at once";

  int rc = 0;
  if (rank == 0) {
    json::Object out = *c.toJson().getAsObject();
    raw["ranks"] = size;
    out["calibration"] = std::move(raw);
    // Beside the path and renamed over it (llvm::writeToOutput): a cluster
    // file calibrated earlier survives a failed write.
    if (llvm::Error e = llvm::writeToOutput(outPath, [&](llvm::raw_ostream &f) {
          f << llvm::formatv("{0:2}", json::Value(std::move(out))) << "\n";
          return llvm::Error::success();
        })) {
      llvm::errs() << "pipemesh-sim: error: cannot write " << llvm::toString(std::move(e))
                   << "\n";
      rc = 1;
    }
    os << "pipemesh-sim --calibrate: " << size << " rank(s)\n"
       << llvm::format("  GEMM: %.1f GFLOP/s asymptotic (efficiency %.2f of %.0f), half at "
                       "%.3g flops\n",
                       rate / 1e9, dev.gemmEfficiency, dev.peakFlopsFp32 / 1e9, dev.gemmHalfFlops)
       << llvm::format("  memory: %.1f GB/s, %.2f us per kernel; vector efficiency %.3f\n",
                       dev.memBandwidth / 1e9, dev.kernelOverhead * 1e6, dev.vectorEfficiency);
    for (auto [f, t] : gemmPts)
      os << llvm::format("    gemm %.3g flops: measured %.1f us, model %.1f us\n", f, t * 1e6,
                         dev.time({f, 0}, cost::KernelClass::Gemm) * 1e6);
    for (auto [b, t] : bwPts)
      os << llvm::format("    axpy %.3g bytes: measured %.1f us, model %.1f us\n", b, t * 1e6,
                         dev.time({b / 12.0, b}, cost::KernelClass::Memory) * 1e6);
    os << "  per-op rows (t = overhead + bytes / bandwidth, attention: flops / rate + rows * "
          "row time):\n";
    for (const auto &[op, samples] : kernelSamples) {
      const cost::KernelFit &fit = dev.kernels[op];
      if (samples.byFlops)
        os << llvm::format("    %-18s %8.2f GFLOP/s  overhead %7.2f us  per row %.1f ns\n",
                           op.c_str(), fit.flopRate / 1e9, fit.overhead * 1e6,
                           fit.rowSeconds * 1e9);
      else
        os << llvm::format("    %-18s %8.2f GB/s     overhead %7.2f us\n", op.c_str(),
                           fit.bandwidth / 1e9, fit.overhead * 1e6);
      for (auto [i, p] : llvm::enumerate(samples.pts)) {
        auto [x, t] = p;
        double rows = i < samples.rows.size() ? samples.rows[i] : 0.0;
        double model =
            fit.time(samples.byFlops ? cost::OpCost{x, 0, rows} : cost::OpCost{0, x});
        os << llvm::format("      %9.3g %s: measured %9.1f us, model %9.1f us (%+.0f%%)\n", x,
                           (const char *)(samples.byFlops ? "flops" : "bytes"), t * 1e6, model * 1e6,
                           100.0 * (model / t - 1.0));
      }
    }
    if (mpi && size >= 2)
      os << llvm::format("  MPI: alpha %.2f us, %.2f GB/s\n", link.alpha * 1e6,
                         link.bandwidth / 1e9);
    else
      os << "  MPI: not measured (run under mpirun with 2 or more ranks); shared-memory preset "
            "kept\n";
    os << "  wrote " << outPath << "\n";
  }
  if (mpi) {
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
  }
  return rc;
}
