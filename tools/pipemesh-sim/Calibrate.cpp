//===- Calibrate.cpp - measure this machine into a cluster file -----------===//
#include "Calibrate.h"

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

/// Weighted least squares of t = a x + b minimising relative errors.
void fitLine(const std::vector<std::pair<double, double>> &xt, double &a, double &b) {
  double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0;
  for (auto [x, t] : xt) {
    double w = 1.0 / (t * t);
    sw += w, sx += w * x, st += w * t, sxx += w * x * x, sxt += w * x * t;
  }
  double det = sw * sxx - sx * sx;
  a = det != 0 ? (sw * sxt - sx * st) / det : 0;
  b = det != 0 ? (sxx * st - sx * sxt) / det : 0;
  if (a <= 0) { // degenerate: through the largest point
    auto big = *std::max_element(xt.begin(), xt.end());
    a = big.second / big.first;
    b = 0;
  }
  b = std::max(0.0, b);
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
  for (const Gemm &g : shapes) {
    std::vector<float> A(g.m * g.k, 0.5f), B(g.k * g.n, 0.25f), C(g.m * g.n);
    double t = timeMedian(
        [&] {
          cpu::matmul<float>(A.data(), B.data(), nullptr, C.data(), 1, g.m, g.n, g.k, false, false,
                             0, 0);
        },
        budget);
    double flops = 2.0 * g.m * g.n * g.k;
    gemmPts.push_back({flops, t});
    gemmRaw.push_back(json::Object{{"m", g.m}, {"n", g.n}, {"k", g.k}, {"seconds", t},
                                   {"gflops", flops / t / 1e9}});
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
  // GEMM curve: the asymptotic rate is the best measured on the large
  // shapes; each shape then says where the curve f / (f + h) must pass, and
  // the median of those h is robust to a noisy (shared) machine.
  double rate = 0;
  for (auto [f, t] : gemmPts)
    if (f >= 1e8)
      rate = std::max(rate, f / t);
  if (rate <= 0)
    for (auto [f, t] : gemmPts)
      rate = std::max(rate, f / t);
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

  // --- Attention: the runtime's flash-style kernels, forward + backward ------
  // Causal, GPT-2-like head size. Flops as the cost model counts them
  // (CostModel.h): 2 * BH * visible * (D + Dv) forward and
  // 2 * BH * visible * (4 D + 3 Dv) backward, visible = T (T + 1) / 2.
  {
    const int64_t bh = 8, t = quick ? 128 : 256, d = 64;
    std::vector<float> q(bh * t * d, 0.01f), k(q), v(q), o(q.size()), dq(q.size()),
        dk(q.size()), dv(q.size());
    const float scale = 0.125f;
    double fwdT = timeMedian(
        [&] {
          cpu::attention<float>(q.data(), k.data(), v.data(), nullptr, 0, 0, 0, o.data(), bh, t,
                                t, d, d, scale, true);
        },
        budget);
    double bwdT = timeMedian(
        [&] {
          cpu::attentionGrad<float>(o.data(), q.data(), k.data(), v.data(), nullptr, 0, 0, 0,
                                    dq.data(), dk.data(), dv.data(), bh, t, t, d, d, scale, true);
        },
        budget);
    double visible = (double)t * (t + 1) / 2;
    double flops = 2.0 * bh * visible * (5.0 * d + 4.0 * d);
    attentionRate = flops / std::max(fwdT + bwdT, 1e-9);
    raw["attention"] = json::Object{{"bh", bh},       {"t", t},           {"d", d},
                                    {"fwd_seconds", fwdT}, {"bwd_seconds", bwdT},
                                    {"gflops", attentionRate / 1e9}};
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
    std::error_code ec;
    llvm::raw_fd_ostream f(outPath, ec, llvm::sys::fs::OF_Text);
    if (ec) {
      llvm::errs() << "pipemesh-sim: error: cannot write '" << outPath << "': " << ec.message()
                   << "\n";
      rc = 1;
    } else {
      f << llvm::formatv("{0:2}", json::Value(std::move(out))) << "\n";
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
