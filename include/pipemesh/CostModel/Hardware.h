//===- Hardware.h - devices, links and clusters as time models --*- C++ -*-===//
//
// The hardware half of PipeMesh's one cost model: how long a kernel of known
// work (flops, bytes) takes on a device, and how long a message or a
// collective takes on a network. The partitioner, the schedule search and
// pipemesh-sim all read it, so a plan's predicted step time and the stage
// balance the compiler picked come from the same numbers.
//
// It is MLIR-free (LLVM Support only, for JSON): lib/Sim and pipemesh-sim
// load clusters from files without the compiler's IR.
//
// Device: a roofline with two kinds of kernels.
//   GEMM-like (matmul, attention): t = flops / (peak * eff(flops)) + overhead,
//     eff(f) = gemm_efficiency * f / (f + gemm_half_flops): a saturating
//     curve, small GEMMs reach little of the peak (tile quantisation, too
//     few blocks for the SMs or cores), large ones approach gemm_efficiency.
//     Memory traffic bounds it too: t >= bytes / (bandwidth * mem_efficiency).
//   Everything else is bound by memory:
//     t = max(bytes / (bandwidth * mem_efficiency),
//             flops / (fp32 peak * vector_efficiency)) + overhead.
//   The GEMM peak is the device's peak at its compute precision (bf16 dense
//   tensor cores on GPUs, fp32 on the CPU runtime).
//   A calibrated device may also carry a per-op table (Device::kernels,
//   written by `pipemesh-sim --calibrate`): an op with a row costs
//     t = overhead + max(bytes / bandwidth, flops / flop_rate) [+ rows * row_s]
//   (the last term for attention's query rows) with the row's own fitted
//   numbers, in place of its class's roofline and
//   the device's kernelOverhead; ops without a row (and every op on the
//   presets, which have no table) follow the class model above.
//
// Network: alpha-beta links (time = alpha + bytes / bandwidth); NVLink (or
// shared memory) within a node, Ethernet/InfiniBand classes between nodes.
// A collective over a group uses the slowest link its ring or tree crosses:
// the inter-node link as soon as the group spans two nodes. Collectives of
// different groups do not contend for a node's NIC in this model.
// Hierarchical collectives (dp-collectives=hierarchical) run within each node
// first, then between the nodes: the members that share a node share its one
// inter-node link (one NIC per node), which then carries (nodes - 1) / nodes
// of the buffer instead of a flat ring's (n - 1) / n.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_COSTMODEL_HARDWARE_H
#define PIPEMESH_COSTMODEL_HARDWARE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pipemesh::cost {

/// Work of one op (or a sum of ops).
struct OpCost {
  double flops = 0;
  double bytes = 0;
  /// Attention's query rows (batch x heads x query positions): a calibrated
  /// CPU row charges each its own time (KernelFit::rowSeconds); 0 elsewhere.
  double rows = 0;
  OpCost &operator+=(const OpCost &o) {
    flops += o.flops;
    bytes += o.bytes;
    rows += o.rows;
    return *this;
  }
  friend OpCost operator+(OpCost a, const OpCost &b) { return a += b; }
  friend OpCost operator*(OpCost a, double s) {
    a.flops *= s;
    a.bytes *= s;
    a.rows *= s;
    return a;
  }
};

/// The kernel an op runs. The first three are the rooflines of the class
/// model; the others name ops that a calibrated device can time with a row of
/// its own (Device::kernels) and that follow rooflineOf(k) on a device
/// without one. Only Device::time tells them apart, so readers that store a
/// KernelClass (sim::Instr) carry the op's identity along for free.
enum class KernelClass : uint8_t {
  Gemm,      // matmul and its gradients: tensor cores / BLAS
  Memory,    // elementwise, norms, reductions, data movement, optimizer
  Attention, // attention forward: flash-style kernels
  // Ops with a per-op row; the comment names their roofline.
  AttentionGrad,    // Attention
  Gelu,             // Memory, and every one below
  GeluGrad,
  LayerNorm,
  LayerNormGrad,
  Softmax,
  SoftmaxGrad,
  Transpose,
  Add,
  Sub,
  Mul,
  ReduceSum,
  Split,
  Concat,
  Embedding,
  EmbeddingGrad,
  CrossEntropy,
  CrossEntropyGrad,
  Accumulate,
  AdamW,
};

/// The roofline of the class model `k` follows: Gemm, Memory or Attention.
KernelClass rooflineOf(KernelClass k);
/// The op name of `k`'s row in Device::kernels: the plan's op name (`gelu`,
/// `attention_grad`); `matmul` for Gemm, `attention` for Attention, and ""
/// for Memory (generic memory-bound ops have no row).
llvm::StringRef kernelName(KernelClass k);

/// The kernel of a pmesh op by name, without the dialect prefix (`matmul`,
/// `attention_grad`): how plan readers without MLIR classify instructions.
/// Ops without a per-op kind of their own are Memory.
KernelClass kernelClassOfName(llvm::StringRef opName);

/// One op's fitted row of a calibrated device:
///   time = overhead + max(bytes / bandwidth, flops / flopRate)
///          + rows * rowSeconds,
/// a zero bandwidth or flopRate leaving that term out. `bytes` and `flops`
/// are what the cost model counts for the op (CostModel.h), so `bandwidth`
/// is an effective rate of those bytes, not a hardware number. `rows` counts
/// attention's query rows: the CPU kernels' per-row work (the softmax's
/// passes, a row's small GEMMs) makes their flop rate grow with the sequence
/// and the head size, which one rate per flop cannot follow.
struct KernelFit {
  double bandwidth = 0;  // bytes/s; 0: bytes do not bound it
  double flopRate = 0;   // flop/s; 0: flops do not bound it
  double overhead = 0;   // seconds per call
  double rowSeconds = 0; // seconds per attention query row
  double time(const OpCost &c) const;

  llvm::json::Value toJson() const;
  /// `{"bandwidth": B, "flop_rate": F, "overhead_s": S, "row_s": R}`, at
  /// least one of bandwidth and flop_rate positive, row_s optional. False
  /// with `why` (prefixed `where`).
  static bool fromJson(const llvm::json::Value &v, llvm::StringRef where, KernelFit &out,
                       std::string &why);
};

enum class Precision : uint8_t { FP32, BF16 };

llvm::StringRef precisionName(Precision p);
std::optional<Precision> parsePrecision(llvm::StringRef name);

/// A compute device.
struct Device {
  std::string name;
  double peakFlopsFp32 = 0;   // FLOP/s, fp32 (CUDA cores / AVX FMA)
  double peakFlopsBf16 = 0;   // FLOP/s, dense bf16 tensor cores (fp16 on V100)
  double memBandwidth = 0;    // bytes/s
  double memCapacity = 0;     // bytes
  Precision precision = Precision::FP32; // what GEMMs run in
  double gemmEfficiency = 1;  // the fraction of peak large GEMMs reach, (0, 1]
  double gemmHalfFlops = 0;   // flops of one GEMM reaching half of gemmEfficiency
  double memEfficiency = 1;   // fraction of memBandwidth streaming kernels reach
  double vectorEfficiency = 1; // fraction of the fp32 peak non-GEMM kernels reach
  double kernelOverhead = 0;  // seconds per kernel (launch, thread wake-up)
  /// Fraction of peakFlops() attention kernels reach (their own loops, not
  /// the GEMM library's); 0: they follow the GEMM curve.
  double attentionEfficiency = 0;
  /// Calibrated per-op rows by op name (kernelName); empty on the presets.
  /// Rows for names no KernelClass has are kept (a newer calibration read
  /// by an older simulator) and unused.
  std::map<std::string, KernelFit, std::less<>> kernels;

  /// The GEMM peak at `precision`.
  double peakFlops() const;
  /// eff(flops) of the curve above.
  double gemmEfficiencyAt(double flops) const;
  /// Time of one kernel doing `c`, in seconds: its row of `kernels` when
  /// the device has one, else the class model of rooflineOf(k).
  double time(const OpCost &c, KernelClass k = KernelClass::Memory) const;
  /// The row `k` is timed with, or null (the class model).
  const KernelFit *kernelFit(KernelClass k) const;

  /// Data-sheet presets. `cpu` is this development machine: 2 AMD EPYC cores
  /// with AVX2/FMA, OpenBLAS sgemm near 150 GFLOP/s, about 20 GB/s.
  static Device cpu();
  static Device v100();
  static Device a100_40gb();
  static Device a100_80gb();
  static Device h100();
  static Device h200();
  /// A preset by name: cpu, v100, a100-40gb, a100-80gb, h100, h200, and the
  /// alias a100 (= a100-40gb); nullopt for anything else.
  static std::optional<Device> byName(llvm::StringRef name);
  /// The names byName accepts, for error messages.
  static std::vector<std::string> presetNames();

  llvm::json::Value toJson() const;
  /// Reads a device object (see docs/pipemesh-sim.md) or a preset name;
  /// fields absent from an object keep the preset named by its "preset"
  /// field, else zero. False with `why`.
  static bool fromJson(const llvm::json::Value &v, Device &out, std::string &why);
};

/// A link class: time(bytes) = alpha + bytes / bandwidth.
struct Link {
  std::string name;
  double alpha = 0;     // seconds per message
  double bandwidth = 0; // bytes/s, one direction

  double time(double bytes) const;

  /// NVLink of the GPU generation (one direction, per GPU).
  static Link nvlink(llvm::StringRef device);
  /// Ethernet / InfiniBand between nodes at `gbps` Gbit/s.
  static Link ethernet(double gbps);
  /// MPI over shared memory on this machine.
  static Link sharedMemory();

  llvm::json::Value toJson() const;
  static bool fromJson(const llvm::json::Value &v, Link &out, std::string &why);
};

enum class Collective : uint8_t { AllReduce, ReduceScatter, AllGather };
llvm::StringRef collectiveName(Collective c);

enum class CollectiveAlgorithm : uint8_t { Ring, Tree, Auto };

// Closed forms over n ranks on one link class. `bytes` is the whole buffer
// (the reduce-scatter's input, the all-gather's output).
/// 2 (n-1)/n * bytes / bw + 2 (n-1) alpha.
double ringAllReduceTime(int64_t n, double bytes, const Link &link);
/// (n-1)/n * bytes / bw + (n-1) alpha (also the ring all-gather).
double ringReduceScatterTime(int64_t n, double bytes, const Link &link);
double ringAllGatherTime(int64_t n, double bytes, const Link &link);
/// Pipelined (double binary) tree all-reduce: 2 bytes / bw + 2 log2(n) alpha.
double treeAllReduceTime(int64_t n, double bytes, const Link &link);
/// Recursive halving / doubling: (n-1)/n * bytes / bw + log2(n) alpha.
double treeReduceScatterTime(int64_t n, double bytes, const Link &link);
double treeAllGatherTime(int64_t n, double bytes, const Link &link);

/// Devices in nodes, links within and between the nodes.
struct Cluster {
  std::string name;
  Device device;
  int64_t gpusPerNode = 8;
  /// Number of nodes; 0: as many as a plan's world size needs.
  int64_t nodes = 0;
  Link intraNode;
  Link interNode;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::Auto;
  std::string description;

  int64_t nodeOf(int64_t rank) const { return gpusPerNode > 0 ? rank / gpusPerNode : 0; }
  /// The link a message from `a` to `b` takes.
  const Link &linkBetween(int64_t a, int64_t b) const;
  /// The link that limits a collective over `members`: inter-node as soon as
  /// they span two nodes.
  const Link &groupLink(llvm::ArrayRef<int64_t> members) const;
  /// Point-to-point: alpha + bytes / bandwidth of the link between them.
  double p2pTime(int64_t src, int64_t dst, double bytes) const;
  /// A collective over `members` (its whole-buffer bytes), with the
  /// cluster's algorithm (Auto: the faster of ring and tree).
  double collectiveTime(Collective c, double bytes, llvm::ArrayRef<int64_t> members) const;
  double collectiveTime(Collective c, double bytes, int64_t n, const Link &link) const;
  /// How `members` lie on the nodes: `nodes` nodes, each holding `perNode`
  /// of them when `even`; `counts` (node, members on it) in node order.
  struct Spread {
    int64_t nodes = 1, perNode = 0;
    bool even = true;
    std::vector<std::pair<int64_t, int64_t>> counts;
    /// Whether a hierarchical collective differs from the flat one: several
    /// nodes with several members each, as many on every node.
    bool splits() const { return even && nodes > 1 && perNode > 1; }
    /// "3 on node 0, 1 on node 1".
    std::string describe() const;
  };
  Spread spreadOf(llvm::ArrayRef<int64_t> members) const;
  /// Why the dp group `members` (whose spread is `s`) cannot run hierarchical
  /// collectives here, or "" when it can: pipemesh-run refuses a group with
  /// different member counts on its nodes, and so do the compiler's searches
  /// and the simulator, in these words.
  std::string hierarchicalSpreadError(llvm::ArrayRef<int64_t> members, const Spread &s) const;
  /// A hierarchical collective over `members` (its whole-buffer bytes): a
  /// reduce-scatter within each node on the intra-node link, then one over
  /// the members in the same place on every node on the inter-node link,
  /// whose bandwidth the node's perNode concurrent transfers share; an
  /// all-gather the reverse; an all-reduce reduce-scatters within, all-reduces
  /// between and all-gathers within. Flat (collectiveTime) when the members
  /// are on one node, one per node, or spread unevenly.
  double hierarchicalCollectiveTime(Collective c, double bytes,
                                    llvm::ArrayRef<int64_t> members) const;
  /// The same with the members' spread already known (spreadOf(members)).
  double hierarchicalCollectiveTime(Collective c, double bytes, llvm::ArrayRef<int64_t> members,
                                    const Spread &spread) const;
  /// Error text when `worldSize` ranks do not fit, else empty.
  std::string checkFits(int64_t worldSize) const;

  llvm::json::Value toJson() const;
  static bool fromJson(const llvm::json::Value &v, Cluster &out, std::string &why);
  /// A preset name or a path to a cluster JSON file. False with `why`.
  static bool load(llvm::StringRef presetOrPath, Cluster &out, std::string &why);

  /// `<gpu>-<gbps>gbps` for the GPUs above (v100, a100-40g, a100-80g, h100,
  /// h200) and 10, 25, 100, 200 Gb/s between nodes of 8; `cpu` is this
  /// machine (2 cores, MPI over shared memory).
  static std::optional<Cluster> preset(llvm::StringRef name);
  static std::vector<std::string> presetNames();
};

} // namespace pipemesh::cost

#endif // PIPEMESH_COSTMODEL_HARDWARE_H
