//===- Hardware.cpp - devices, links and clusters as time models ----------===//
#include "pipemesh/CostModel/Hardware.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

using namespace pipemesh::cost;
namespace json = llvm::json;

//===----------------------------------------------------------------------===//
// Precision, collectives
//===----------------------------------------------------------------------===//

namespace {
/// Every KernelClass with its op name and roofline, in enum order.
struct KernelInfo {
  KernelClass kind;
  const char *name;
  KernelClass roofline;
};
constexpr KernelInfo kKernels[] = {
    {KernelClass::Gemm, "matmul", KernelClass::Gemm},
    {KernelClass::Memory, "", KernelClass::Memory},
    {KernelClass::Attention, "attention", KernelClass::Attention},
    {KernelClass::AttentionGrad, "attention_grad", KernelClass::Attention},
    {KernelClass::Gelu, "gelu", KernelClass::Memory},
    {KernelClass::GeluGrad, "gelu_grad", KernelClass::Memory},
    {KernelClass::LayerNorm, "layer_norm", KernelClass::Memory},
    {KernelClass::LayerNormGrad, "layer_norm_grad", KernelClass::Memory},
    {KernelClass::Softmax, "softmax", KernelClass::Memory},
    {KernelClass::SoftmaxGrad, "softmax_grad", KernelClass::Memory},
    {KernelClass::Transpose, "transpose", KernelClass::Memory},
    {KernelClass::Add, "add", KernelClass::Memory},
    {KernelClass::Sub, "sub", KernelClass::Memory},
    {KernelClass::Mul, "mul", KernelClass::Memory},
    {KernelClass::ReduceSum, "reduce_sum", KernelClass::Memory},
    {KernelClass::Split, "split", KernelClass::Memory},
    {KernelClass::Concat, "concat", KernelClass::Memory},
    {KernelClass::Embedding, "embedding", KernelClass::Memory},
    {KernelClass::EmbeddingGrad, "embedding_grad", KernelClass::Memory},
    {KernelClass::CrossEntropy, "cross_entropy", KernelClass::Memory},
    {KernelClass::CrossEntropyGrad, "cross_entropy_grad", KernelClass::Memory},
    {KernelClass::Accumulate, "accumulate", KernelClass::Memory},
    {KernelClass::AdamW, "adamw", KernelClass::Memory},
};
constexpr size_t kNumKernels = sizeof(kKernels) / sizeof(kKernels[0]);
static_assert(kKernels[kNumKernels - 1].kind == KernelClass::AdamW,
              "kKernels lists every KernelClass in enum order");

const KernelInfo &infoOf(KernelClass k) {
  size_t i = (size_t)k;
  return kKernels[i < kNumKernels ? i : (size_t)KernelClass::Memory];
}
} // namespace

KernelClass pipemesh::cost::rooflineOf(KernelClass k) { return infoOf(k).roofline; }

llvm::StringRef pipemesh::cost::kernelName(KernelClass k) { return infoOf(k).name; }

KernelClass pipemesh::cost::kernelClassOfName(llvm::StringRef op) {
  if (!op.empty())
    for (const KernelInfo &i : kKernels)
      if (op == i.name)
        return i.kind;
  return KernelClass::Memory;
}

llvm::StringRef pipemesh::cost::precisionName(Precision p) {
  return p == Precision::BF16 ? "bf16" : "fp32";
}

std::optional<Precision> pipemesh::cost::parsePrecision(llvm::StringRef name) {
  if (name == "fp32" || name == "f32")
    return Precision::FP32;
  if (name == "bf16" || name == "fp16" || name == "f16")
    return Precision::BF16;
  return std::nullopt;
}

llvm::StringRef pipemesh::cost::collectiveName(Collective c) {
  switch (c) {
  case Collective::AllReduce:
    return "allreduce";
  case Collective::ReduceScatter:
    return "reduce_scatter";
  case Collective::AllGather:
    return "allgather";
  }
  return "?";
}

//===----------------------------------------------------------------------===//
// Device
//===----------------------------------------------------------------------===//

double Device::peakFlops() const {
  return precision == Precision::BF16 && peakFlopsBf16 > 0 ? peakFlopsBf16 : peakFlopsFp32;
}

double Device::gemmEfficiencyAt(double flops) const {
  if (flops <= 0)
    return gemmEfficiency;
  return gemmEfficiency * flops / (flops + std::max(0.0, gemmHalfFlops));
}

double KernelFit::time(const OpCost &c) const {
  double memTime = bandwidth > 0 ? c.bytes / bandwidth : 0.0;
  double flopTime = flopRate > 0 ? c.flops / flopRate : 0.0;
  return overhead + std::max(memTime, flopTime) + c.rows * rowSeconds;
}

json::Value KernelFit::toJson() const {
  json::Object o{{"overhead_s", overhead}};
  if (bandwidth > 0)
    o["bandwidth"] = bandwidth;
  if (flopRate > 0)
    o["flop_rate"] = flopRate;
  if (rowSeconds > 0)
    o["row_s"] = rowSeconds;
  return o;
}

const KernelFit *Device::kernelFit(KernelClass k) const {
  if (kernels.empty())
    return nullptr;
  llvm::StringRef name = kernelName(k);
  if (name.empty())
    return nullptr;
  auto it = kernels.find(name);
  return it == kernels.end() ? nullptr : &it->second;
}

double Device::time(const OpCost &c, KernelClass k) const {
  if (c.flops <= 0 && c.bytes <= 0)
    return 0.0; // a no-op (free, a view) launches nothing
  if (const KernelFit *fit = kernelFit(k))
    return fit->time(c);
  k = rooflineOf(k);
  double bw = memBandwidth * (memEfficiency > 0 ? memEfficiency : 1.0);
  double memTime = bw > 0 ? c.bytes / bw : 0.0;
  double flopTime = 0;
  if (k == KernelClass::Attention && attentionEfficiency > 0) {
    double rate = peakFlops() * attentionEfficiency;
    flopTime = rate > 0 ? c.flops / rate : 0.0;
  } else if (k == KernelClass::Gemm || k == KernelClass::Attention) {
    double rate = peakFlops() * gemmEfficiencyAt(c.flops);
    flopTime = rate > 0 ? c.flops / rate : 0.0;
  } else {
    double rate = peakFlopsFp32 * (vectorEfficiency > 0 ? vectorEfficiency : 1.0);
    flopTime = rate > 0 ? c.flops / rate : 0.0;
  }
  return std::max(flopTime, memTime) + kernelOverhead;
}

// Data-sheet numbers. Efficiencies are typical of tuned libraries (cuBLASLt,
// OpenBLAS) on large problems; --calibrate replaces them with measurements.
//
// The cpu preset is a plain roofline (no small-GEMM penalty, no per-kernel
// overhead, 0.8 of both peaks): the partitioner's balance on the tiny test
// models is defined against it. `pipemesh-sim --calibrate` measures this
// machine's curve and overheads.
Device Device::cpu() {
  Device d;
  d.name = "cpu";
  d.peakFlopsFp32 = 150e9; // 2 cores x AVX2 FMA, what sgemm reaches at best
  d.peakFlopsBf16 = 0;
  d.memBandwidth = 20e9;
  d.memCapacity = 16e9;
  d.precision = Precision::FP32;
  d.gemmEfficiency = 0.8;
  d.gemmHalfFlops = 0;
  d.memEfficiency = 0.8;
  d.vectorEfficiency = 0.8;
  d.kernelOverhead = 0;
  return d;
}

static Device gpu(const char *name, double fp32, double bf16, double bw, double cap,
                  double gemmEff, double half) {
  Device d;
  d.name = name;
  d.peakFlopsFp32 = fp32;
  d.peakFlopsBf16 = bf16;
  d.memBandwidth = bw;
  d.memCapacity = cap;
  d.precision = Precision::BF16;
  d.gemmEfficiency = gemmEff;
  d.gemmHalfFlops = half;
  d.memEfficiency = 0.8;
  d.vectorEfficiency = 0.5;
  d.kernelOverhead = 4e-6;
  return d;
}

// V100 SXM2 32GB: 15.7 TF fp32, 125 TF fp16 tensor cores (no bf16), 900 GB/s.
// Memory capacities in GiB, as the cards report them (a "40GB" A100 holds
// 40 GiB): the unit of mem-limit=40GiB.
constexpr double kGiB = 1024.0 * 1024 * 1024;
Device Device::v100() { return gpu("v100", 15.7e12, 125e12, 900e9, 32 * kGiB, 0.75, 3e8); }
// A100 SXM: 19.5 TF fp32, 312 TF bf16 dense; 1555 GB/s (40GB), 2039 GB/s (80GB).
Device Device::a100_40gb() { return gpu("a100-40gb", 19.5e12, 312e12, 1555e9, 40 * kGiB, 0.8, 1e9); }
Device Device::a100_80gb() { return gpu("a100-80gb", 19.5e12, 312e12, 2039e9, 80 * kGiB, 0.8, 1e9); }
// H100 SXM: 67 TF fp32, 989 TF bf16 dense, 3.35 TB/s, 80 GB.
Device Device::h100() { return gpu("h100", 67e12, 989e12, 3350e9, 80 * kGiB, 0.75, 3e9); }
// H200 SXM: the H100's compute, 4.8 TB/s, 141 GB (about 139 GiB usable).
Device Device::h200() { return gpu("h200", 67e12, 989e12, 4800e9, 139 * kGiB, 0.75, 3e9); }

std::optional<Device> Device::byName(llvm::StringRef name) {
  std::string n = name.lower();
  if (n == "cpu")
    return cpu();
  if (n == "v100")
    return v100();
  if (n == "a100" || n == "a100-40gb" || n == "a100-40g")
    return a100_40gb();
  if (n == "a100-80gb" || n == "a100-80g")
    return a100_80gb();
  if (n == "h100")
    return h100();
  if (n == "h200")
    return h200();
  return std::nullopt;
}

std::vector<std::string> Device::presetNames() {
  return {"cpu", "v100", "a100", "a100-40gb", "a100-80gb", "h100", "h200"};
}

json::Value Device::toJson() const {
  json::Object o{{"name", name},
                 {"peak_flops_fp32", peakFlopsFp32},
                 {"peak_flops_bf16", peakFlopsBf16},
                 {"mem_bandwidth", memBandwidth},
                 {"mem_capacity", memCapacity},
                 {"precision", precisionName(precision)},
                 {"gemm_efficiency", gemmEfficiency},
                 {"gemm_half_flops", gemmHalfFlops},
                 {"mem_efficiency", memEfficiency},
                 {"vector_efficiency", vectorEfficiency},
                 {"kernel_overhead_s", kernelOverhead},
                 {"attention_efficiency", attentionEfficiency}};
  if (!kernels.empty()) {
    json::Object rows;
    for (const auto &[op, fit] : kernels)
      rows[op] = fit.toJson();
    o["kernels"] = std::move(rows);
  }
  return o;
}

/// The least flop or byte rate a cluster file may give (after efficiencies):
/// anything slower is a unit mistake, and would cost work at infinite times.
static constexpr double kMinRate = 1.0;

namespace {
/// Reads optional numeric fields; remembers the first bad one.
struct FieldReader {
  const json::Object &o;
  std::string prefix;
  std::string &why;
  bool ok = true;
  void num(llvm::StringRef key, double &out, bool positive = false) {
    const json::Value *v = o.get(key);
    if (!v || !ok)
      return;
    std::optional<double> d = v->getAsNumber();
    if (!d || !std::isfinite(*d) || *d < 0 || (positive && *d == 0)) {
      why = prefix + "." + key.str() + ": expected a " +
            (positive ? "positive" : "non-negative") + " number";
      ok = false;
      return;
    }
    out = *d;
  }
  void integer(llvm::StringRef key, int64_t &out) {
    const json::Value *v = o.get(key);
    if (!v || !ok)
      return;
    std::optional<int64_t> i = v->getAsInteger();
    if (!i || *i < 0) {
      why = prefix + "." + key.str() + ": expected a non-negative integer";
      ok = false;
      return;
    }
    out = *i;
  }
  void str(llvm::StringRef key, std::string &out) {
    const json::Value *v = o.get(key);
    if (!v || !ok)
      return;
    std::optional<llvm::StringRef> s = v->getAsString();
    if (!s) {
      why = prefix + "." + key.str() + ": expected a string";
      ok = false;
      return;
    }
    out = s->str();
  }
};
} // namespace

bool KernelFit::fromJson(const json::Value &v, llvm::StringRef where, KernelFit &out,
                         std::string &why) {
  const json::Object *o = v.getAsObject();
  if (!o) {
    why = where.str() + ": expected an object {\"bandwidth\": bytes/s, \"flop_rate\": "
                        "flop/s, \"overhead_s\": s}";
    return false;
  }
  KernelFit f;
  FieldReader r{*o, where.str(), why};
  r.num("bandwidth", f.bandwidth);
  r.num("flop_rate", f.flopRate);
  r.num("overhead_s", f.overhead);
  r.num("row_s", f.rowSeconds);
  if (!r.ok)
    return false;
  if ((f.bandwidth > 0 && f.bandwidth < kMinRate) || (f.flopRate > 0 && f.flopRate < kMinRate)) {
    why = where.str() + ": bandwidth and flop_rate below 1 per second are taken for a unit "
                        "mistake";
    return false;
  }
  if (f.bandwidth <= 0 && f.flopRate <= 0) {
    why = where.str() + ": needs a positive bandwidth or flop_rate";
    return false;
  }
  out = f;
  return true;
}

bool Device::fromJson(const json::Value &v, Device &out, std::string &why) {
  if (std::optional<llvm::StringRef> s = v.getAsString()) {
    std::optional<Device> d = byName(*s);
    if (!d) {
      why = "device: unknown preset '" + s->str() + "' (known: " +
            llvm::join(presetNames(), ", ") + ")";
      return false;
    }
    out = *d;
    return true;
  }
  const json::Object *o = v.getAsObject();
  if (!o) {
    why = "device: expected an object or a preset name";
    return false;
  }
  Device d;
  if (std::optional<llvm::StringRef> p = o->getString("preset")) {
    std::optional<Device> base = byName(*p);
    if (!base) {
      why = "device.preset: unknown preset '" + p->str() + "' (known: " +
            llvm::join(presetNames(), ", ") + ")";
      return false;
    }
    d = *base;
  }
  FieldReader r{*o, "device", why};
  r.str("name", d.name);
  r.num("peak_flops_fp32", d.peakFlopsFp32, true);
  r.num("peak_flops_bf16", d.peakFlopsBf16);
  r.num("mem_bandwidth", d.memBandwidth, true);
  r.num("mem_capacity", d.memCapacity);
  r.num("gemm_efficiency", d.gemmEfficiency, true);
  r.num("gemm_half_flops", d.gemmHalfFlops);
  r.num("mem_efficiency", d.memEfficiency, true);
  r.num("vector_efficiency", d.vectorEfficiency, true);
  r.num("kernel_overhead_s", d.kernelOverhead);
  r.num("attention_efficiency", d.attentionEfficiency);
  if (!r.ok)
    return false;
  if (std::optional<llvm::StringRef> p = o->getString("precision")) {
    std::optional<Precision> pr = parsePrecision(*p);
    if (!pr) {
      why = "device.precision: expected \"fp32\" or \"bf16\", got '" + p->str() + "'";
      return false;
    }
    d.precision = *pr;
  }
  if (const json::Value *kv = o->get("kernels")) {
    const json::Object *rows = kv->getAsObject();
    if (!rows) {
      why = "device.kernels: expected an object of op name -> {bandwidth, flop_rate, "
            "overhead_s}";
      return false;
    }
    for (const auto &[op, row] : *rows) {
      KernelFit fit;
      if (!KernelFit::fromJson(row, "device.kernels." + op.str(), fit, why))
        return false;
      // Only attention has query rows; on another known op a row time
      // would be read and never charged (unknown names are Memory).
      KernelClass k = kernelClassOfName(op);
      if (fit.rowSeconds > 0 && k != KernelClass::Memory && k != KernelClass::Attention &&
          k != KernelClass::AttentionGrad) {
        why = "device.kernels." + op.str() +
              ".row_s: only attention and attention_grad have query rows";
        return false;
      }
      d.kernels[op.str()] = fit;
    }
  }
  if (d.peakFlopsFp32 <= 0 || d.memBandwidth <= 0) {
    why = "device: peak_flops_fp32 and mem_bandwidth are required (or a \"preset\")";
    return false;
  }
  if (d.gemmEfficiency > 1 || d.memEfficiency > 1 || d.vectorEfficiency > 1 ||
      d.attentionEfficiency > 1 || d.attentionEfficiency < 0) {
    why = "device: efficiencies must lie in (0, 1]";
    return false;
  }
  // Positive but absurd figures (1e-300 flop/s, or an efficiency of 1e-300)
  // are unit mistakes that would cost every kernel at an infinite time.
  struct Effective {
    const char *what;
    double rate;
  };
  for (Effective e : {Effective{"peak_flops_fp32 x gemm_efficiency",
                                d.peakFlopsFp32 * d.gemmEfficiency},
                      Effective{"peak_flops_bf16 x gemm_efficiency",
                                d.peakFlopsBf16 > 0 ? d.peakFlopsBf16 * d.gemmEfficiency : 1},
                      Effective{"peak_flops x attention_efficiency",
                                d.attentionEfficiency > 0 ? d.peakFlops() * d.attentionEfficiency
                                                          : 1},
                      Effective{"peak_flops_fp32 x vector_efficiency",
                                d.peakFlopsFp32 * d.vectorEfficiency},
                      Effective{"mem_bandwidth x mem_efficiency",
                                d.memBandwidth * d.memEfficiency}})
    if (!(e.rate >= kMinRate)) {
      why = std::string("device: ") + e.what + " is " + llvm::formatv("{0:e}", e.rate).str() +
            " per second: rates below 1 per second are taken for a unit mistake";
      return false;
    }
  out = std::move(d);
  return true;
}

//===----------------------------------------------------------------------===//
// Link
//===----------------------------------------------------------------------===//

double Link::time(double bytes) const {
  return alpha + (bandwidth > 0 ? bytes / bandwidth : 0.0);
}

// NVLink per GPU, one direction: V100 (NVLink 2) 150 GB/s, A100 (3) 300 GB/s,
// H100/H200 (4) 450 GB/s. About 5 us of NCCL latency per step.
Link Link::nvlink(llvm::StringRef device) {
  std::string d = device.lower();
  if (llvm::StringRef(d).starts_with("v100"))
    return {"nvlink2", 5e-6, 150e9};
  if (llvm::StringRef(d).starts_with("h1") || llvm::StringRef(d).starts_with("h2"))
    return {"nvlink4", 5e-6, 450e9};
  return {"nvlink3", 5e-6, 300e9};
}

// The line rate; TCP-class latency at 10/25 Gb/s, RDMA-class above.
Link Link::ethernet(double gbps) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "net-%ggbps", gbps);
  std::string name = buf;
  return {name, gbps >= 100 ? 10e-6 : 30e-6, gbps * 1e9 / 8.0};
}

// Open MPI's shared-memory transport on this machine (vader): a couple of
// microseconds, a few GB/s for large copies. --calibrate measures it.
Link Link::sharedMemory() { return {"shm", 2e-6, 5e9}; }

json::Value Link::toJson() const {
  return json::Object{{"name", name}, {"alpha_s", alpha}, {"bandwidth", bandwidth}};
}

bool Link::fromJson(const json::Value &v, Link &out, std::string &why) {
  const json::Object *o = v.getAsObject();
  if (!o) {
    why = "link: expected an object {\"alpha_s\": s, \"bandwidth\": bytes/s} or "
          "{\"gbps\": n}";
    return false;
  }
  Link l = out;
  if (const json::Value *g = o->get("gbps")) {
    std::optional<double> d = g->getAsNumber();
    if (!d || *d <= 0) {
      why = "link.gbps: expected a positive number";
      return false;
    }
    l = ethernet(*d);
  }
  FieldReader r{*o, "link", why};
  r.str("name", l.name);
  r.num("alpha_s", l.alpha);
  r.num("bandwidth", l.bandwidth, true);
  if (!r.ok)
    return false;
  if (l.bandwidth <= 0) {
    why = "link: bandwidth (bytes/s) or gbps is required";
    return false;
  }
  if (l.bandwidth < kMinRate) {
    why = "link.bandwidth: below 1 byte per second is taken for a unit mistake";
    return false;
  }
  out = std::move(l);
  return true;
}

//===----------------------------------------------------------------------===//
// Collective closed forms
//===----------------------------------------------------------------------===//

static double log2n(int64_t n) { return std::ceil(std::log2((double)std::max<int64_t>(n, 1))); }

double pipemesh::cost::ringAllReduceTime(int64_t n, double bytes, const Link &l) {
  if (n <= 1)
    return 0.0;
  return 2.0 * (n - 1) / n * bytes / l.bandwidth + 2.0 * (n - 1) * l.alpha;
}
double pipemesh::cost::ringReduceScatterTime(int64_t n, double bytes, const Link &l) {
  if (n <= 1)
    return 0.0;
  return (double)(n - 1) / n * bytes / l.bandwidth + (n - 1) * l.alpha;
}
double pipemesh::cost::ringAllGatherTime(int64_t n, double bytes, const Link &l) {
  return ringReduceScatterTime(n, bytes, l);
}
double pipemesh::cost::treeAllReduceTime(int64_t n, double bytes, const Link &l) {
  if (n <= 1)
    return 0.0;
  return 2.0 * bytes / l.bandwidth + 2.0 * log2n(n) * l.alpha;
}
double pipemesh::cost::treeReduceScatterTime(int64_t n, double bytes, const Link &l) {
  if (n <= 1)
    return 0.0;
  return (double)(n - 1) / n * bytes / l.bandwidth + log2n(n) * l.alpha;
}
double pipemesh::cost::treeAllGatherTime(int64_t n, double bytes, const Link &l) {
  return treeReduceScatterTime(n, bytes, l);
}

//===----------------------------------------------------------------------===//
// Cluster
//===----------------------------------------------------------------------===//

const Link &Cluster::linkBetween(int64_t a, int64_t b) const {
  return nodeOf(a) == nodeOf(b) ? intraNode : interNode;
}

const Link &Cluster::groupLink(llvm::ArrayRef<int64_t> members) const {
  for (int64_t m : members)
    if (nodeOf(m) != nodeOf(members.front()))
      return interNode;
  return intraNode;
}

double Cluster::p2pTime(int64_t src, int64_t dst, double bytes) const {
  return linkBetween(src, dst).time(bytes);
}

double Cluster::collectiveTime(Collective c, double bytes, int64_t n, const Link &link) const {
  double ring = 0, tree = 0;
  switch (c) {
  case Collective::AllReduce:
    ring = ringAllReduceTime(n, bytes, link);
    tree = treeAllReduceTime(n, bytes, link);
    break;
  case Collective::ReduceScatter:
    ring = ringReduceScatterTime(n, bytes, link);
    tree = treeReduceScatterTime(n, bytes, link);
    break;
  case Collective::AllGather:
    ring = ringAllGatherTime(n, bytes, link);
    tree = treeAllGatherTime(n, bytes, link);
    break;
  }
  switch (algorithm) {
  case CollectiveAlgorithm::Ring:
    return ring;
  case CollectiveAlgorithm::Tree:
    return tree;
  case CollectiveAlgorithm::Auto:
    return std::min(ring, tree);
  }
  return ring;
}

double Cluster::collectiveTime(Collective c, double bytes,
                               llvm::ArrayRef<int64_t> members) const {
  if (members.size() <= 1)
    return 0.0;
  return collectiveTime(c, bytes, (int64_t)members.size(), groupLink(members));
}

Cluster::Spread Cluster::spreadOf(llvm::ArrayRef<int64_t> members) const {
  std::map<int64_t, int64_t> perNode;
  for (int64_t m : members)
    ++perNode[nodeOf(m)];
  Spread s;
  s.nodes = (int64_t)perNode.size();
  s.perNode = perNode.empty() ? 0 : perNode.begin()->second;
  s.counts.assign(perNode.begin(), perNode.end());
  for (const auto &node : perNode)
    s.even &= node.second == s.perNode;
  return s;
}

std::string Cluster::Spread::describe() const {
  std::string text;
  for (auto [node, n] : counts)
    text += (text.empty() ? "" : ", ") + std::to_string(n) + " on node " + std::to_string(node);
  return text;
}

std::string Cluster::hierarchicalSpreadError(llvm::ArrayRef<int64_t> members,
                                             const Spread &s) const {
  if (s.even)
    return "";
  return "dp-collectives=hierarchical needs the same number of the dp group's ranks on "
         "every node; the group of ranks " +
         std::to_string(members.front()) + ".." + std::to_string(members.back()) + " has " +
         s.describe() + " (cluster '" + name + "', " + std::to_string(gpusPerNode) +
         " GPUs per node)";
}

double Cluster::hierarchicalCollectiveTime(Collective c, double bytes,
                                           llvm::ArrayRef<int64_t> members) const {
  return hierarchicalCollectiveTime(c, bytes, members, spreadOf(members));
}

double Cluster::hierarchicalCollectiveTime(Collective c, double bytes,
                                           llvm::ArrayRef<int64_t> members,
                                           const Spread &s) const {
  if (!s.splits())
    return collectiveTime(c, bytes, members);
  const int64_t g = s.perNode, k = s.nodes;
  Link shared = interNode;
  shared.bandwidth /= (double)g;
  // Each member's part between the nodes is 1/g of the buffer.
  if (c == Collective::AllReduce)
    return collectiveTime(Collective::ReduceScatter, bytes, g, intraNode) +
           collectiveTime(Collective::AllReduce, bytes / g, k, shared) +
           collectiveTime(Collective::AllGather, bytes, g, intraNode);
  return collectiveTime(c, bytes, g, intraNode) + collectiveTime(c, bytes / g, k, shared);
}

std::string Cluster::checkFits(int64_t worldSize) const {
  if (nodes > 0 && gpusPerNode > 0 && worldSize > nodes * gpusPerNode)
    return "the plan needs " + std::to_string(worldSize) + " devices but cluster '" + name +
           "' has " + std::to_string(nodes * gpusPerNode) + " (" + std::to_string(nodes) +
           " nodes of " + std::to_string(gpusPerNode) + ")";
  return "";
}

static llvm::StringRef algorithmName(CollectiveAlgorithm a) {
  switch (a) {
  case CollectiveAlgorithm::Ring:
    return "ring";
  case CollectiveAlgorithm::Tree:
    return "tree";
  case CollectiveAlgorithm::Auto:
    return "auto";
  }
  return "auto";
}

json::Value Cluster::toJson() const {
  json::Object o{{"name", name},
                 {"device", device.toJson()},
                 {"gpus_per_node", gpusPerNode},
                 {"nodes", nodes},
                 {"intra_node", intraNode.toJson()},
                 {"inter_node", interNode.toJson()},
                 {"collective_algorithm", algorithmName(algorithm)}};
  if (!description.empty())
    o["description"] = description;
  return o;
}

bool Cluster::fromJson(const json::Value &v, Cluster &out, std::string &why) {
  const json::Object *o = v.getAsObject();
  if (!o) {
    why = "cluster: expected a JSON object";
    return false;
  }
  Cluster c;
  if (std::optional<llvm::StringRef> p = o->getString("preset")) {
    std::optional<Cluster> base = preset(*p);
    if (!base) {
      why = "cluster.preset: unknown preset '" + p->str() + "' (pipemesh-sim --list-clusters)";
      return false;
    }
    c = *base;
  }
  FieldReader r{*o, "cluster", why};
  r.str("name", c.name);
  r.str("description", c.description);
  r.integer("gpus_per_node", c.gpusPerNode);
  r.integer("nodes", c.nodes);
  if (!r.ok)
    return false;
  if (const json::Value *d = o->get("device")) {
    if (!Device::fromJson(*d, c.device, why))
      return false;
  } else if (c.device.peakFlopsFp32 <= 0) {
    why = "cluster.device: required";
    return false;
  }
  auto link = [&](llvm::StringRef key, Link &l) {
    const json::Value *lv = o->get(key);
    if (!lv) {
      if (l.bandwidth > 0)
        return true;
      why = "cluster." + key.str() + ": required";
      return false;
    }
    if (!Link::fromJson(*lv, l, why)) {
      why = "cluster." + key.str() + ": " + why;
      return false;
    }
    return true;
  };
  if (!link("intra_node", c.intraNode) || !link("inter_node", c.interNode))
    return false;
  if (std::optional<llvm::StringRef> a = o->getString("collective_algorithm")) {
    if (*a == "ring")
      c.algorithm = CollectiveAlgorithm::Ring;
    else if (*a == "tree")
      c.algorithm = CollectiveAlgorithm::Tree;
    else if (*a == "auto")
      c.algorithm = CollectiveAlgorithm::Auto;
    else {
      why = "cluster.collective_algorithm: expected ring, tree or auto, got '" + a->str() + "'";
      return false;
    }
  }
  if (c.name.empty())
    c.name = "custom";
  out = std::move(c);
  return true;
}

bool Cluster::load(llvm::StringRef presetOrPath, Cluster &out, std::string &why) {
  if (std::optional<Cluster> p = preset(presetOrPath)) {
    out = *p;
    return true;
  }
  auto buf = llvm::MemoryBuffer::getFile(presetOrPath);
  if (!buf) {
    if (!presetOrPath.ends_with(".json") && !presetOrPath.contains('/'))
      why = "unknown cluster preset '" + presetOrPath.str() +
            "' (pipemesh-sim --list-clusters lists them; or give a cluster JSON file)";
    else
      why = "cannot read cluster file '" + presetOrPath.str() +
            "': " + buf.getError().message();
    return false;
  }
  llvm::Expected<json::Value> v = json::parse((*buf)->getBuffer());
  if (!v) {
    why = "cluster file '" + presetOrPath.str() + "': invalid JSON: " + toString(v.takeError());
    return false;
  }
  if (!fromJson(*v, out, why)) {
    why = "cluster file '" + presetOrPath.str() + "': " + why;
    return false;
  }
  return true;
}

namespace {
struct GpuPreset {
  const char *prefix;
  Device (*device)();
};
const GpuPreset kGpus[] = {{"v100", Device::v100},
                           {"a100-40g", Device::a100_40gb},
                           {"a100-80g", Device::a100_80gb},
                           {"h100", Device::h100},
                           {"h200", Device::h200}};
const int kGbps[] = {10, 25, 100, 200};
} // namespace

std::optional<Cluster> Cluster::preset(llvm::StringRef name) {
  if (name == "cpu") {
    Cluster c;
    c.name = "cpu";
    c.device = Device::cpu();
    c.gpusPerNode = 0; // every rank on this one machine
    c.nodes = 1;
    c.intraNode = Link::sharedMemory();
    c.interNode = Link::sharedMemory();
    c.description = "this machine: 2 AMD EPYC cores (AVX2/FMA), MPI over shared memory";
    return c;
  }
  for (const GpuPreset &g : kGpus)
    for (int gbps : kGbps) {
      std::string n = std::string(g.prefix) + "-" + std::to_string(gbps) + "gbps";
      if (name != n)
        continue;
      Cluster c;
      c.name = n;
      c.device = g.device();
      c.gpusPerNode = 8;
      c.nodes = 0;
      c.intraNode = Link::nvlink(g.prefix);
      c.interNode = Link::ethernet(gbps);
      c.description = "nodes of 8 " + c.device.name + ", " + c.intraNode.name + " within, " +
                      std::to_string(gbps) + " Gb/s between";
      return c;
    }
  return std::nullopt;
}

std::vector<std::string> Cluster::presetNames() {
  std::vector<std::string> out;
  for (const GpuPreset &g : kGpus)
    for (int gbps : kGbps)
      out.push_back(std::string(g.prefix) + "-" + std::to_string(gbps) + "gbps");
  out.push_back("cpu");
  return out;
}
