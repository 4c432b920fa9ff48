//===- SimHardwareTest.cpp - devices, links, clusters ----------------------===//
#include "pipemesh/CostModel/Hardware.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace pipemesh::cost;

/// Cluster::fromJson of a JSON text.
static bool parse(const char *text, Cluster &c, std::string &why) {
  llvm::Expected<llvm::json::Value> v = llvm::json::parse(text);
  EXPECT_TRUE((bool)v);
  return v && Cluster::fromJson(*v, c, why);
}

/// `c` written as JSON text and read back into `back`.
static bool roundTrip(const Cluster &c, Cluster &back, std::string &why) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << c.toJson();
  return parse(s.c_str(), back, why);
}

TEST(SimHardware, RingAndTreeClosedForms) {
  Link l{"l", 1e-5, 1e9};
  for (int64_t n : {2, 4, 8, 16}) {
    double b = 1e8;
    EXPECT_DOUBLE_EQ(ringAllReduceTime(n, b, l),
                     2.0 * (n - 1) / n * b / 1e9 + 2.0 * (n - 1) * 1e-5);
    EXPECT_DOUBLE_EQ(ringReduceScatterTime(n, b, l), (n - 1.0) / n * b / 1e9 + (n - 1) * 1e-5);
    EXPECT_DOUBLE_EQ(ringAllGatherTime(n, b, l), ringReduceScatterTime(n, b, l));
    EXPECT_DOUBLE_EQ(treeAllReduceTime(n, b, l), 2.0 * b / 1e9 + 2.0 * std::log2(n) * 1e-5);
  }
  EXPECT_EQ(ringAllReduceTime(1, 1e9, l), 0.0);
}

TEST(SimHardware, GroupsSpanningNodesUseTheInterNodeLink) {
  Cluster c = *Cluster::preset("a100-40g-25gbps");
  EXPECT_EQ(c.gpusPerNode, 8);
  EXPECT_DOUBLE_EQ(c.interNode.bandwidth, 25e9 / 8);
  EXPECT_EQ(c.groupLink({0, 1, 2, 3}).name, c.intraNode.name);
  EXPECT_EQ(c.groupLink({0, 8}).name, c.interNode.name);
  double b = 1e9;
  // Auto picks the faster of ring and tree.
  double ring = ringAllReduceTime(2, b, c.interNode), tree = treeAllReduceTime(2, b, c.interNode);
  EXPECT_DOUBLE_EQ(c.collectiveTime(Collective::AllReduce, b, {0, 8}), std::min(ring, tree));
  c.algorithm = CollectiveAlgorithm::Ring;
  EXPECT_DOUBLE_EQ(c.collectiveTime(Collective::AllReduce, b, {0, 8}), ring);
  EXPECT_DOUBLE_EQ(c.p2pTime(0, 9, 1e6), c.interNode.alpha + 1e6 / c.interNode.bandwidth);
  EXPECT_DOUBLE_EQ(c.p2pTime(0, 7, 1e6), c.intraNode.alpha + 1e6 / c.intraNode.bandwidth);
  EXPECT_EQ(c.checkFits(1024), "");
  c.nodes = 2;
  EXPECT_NE(c.checkFits(17), "");
}

TEST(SimHardware, HierarchicalCollectivesShareTheNodesLink) {
  Cluster c = *Cluster::preset("a100-40g-25gbps");
  c.algorithm = CollectiveAlgorithm::Ring;
  const Link in = c.intraNode, out = c.interNode;
  Link shared = out;
  shared.bandwidth = out.bandwidth / 8; // the node's 8 members share its link
  std::vector<int64_t> twoNodes;
  for (int64_t r = 0; r < 16; ++r)
    twoNodes.push_back(r);
  const double b = 1.6e9;
  Cluster::Spread s = c.spreadOf(twoNodes);
  EXPECT_TRUE(s.even);
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.perNode, 8);
  // Within the node over 8, then between the 2 nodes on 1/8 of the buffer.
  EXPECT_DOUBLE_EQ(c.hierarchicalCollectiveTime(Collective::ReduceScatter, b, twoNodes),
                   ringReduceScatterTime(8, b, in) + ringReduceScatterTime(2, b / 8, shared));
  EXPECT_DOUBLE_EQ(c.hierarchicalCollectiveTime(Collective::AllGather, b, twoNodes),
                   ringAllGatherTime(8, b, in) + ringAllGatherTime(2, b / 8, shared));
  EXPECT_DOUBLE_EQ(c.hierarchicalCollectiveTime(Collective::AllReduce, b, twoNodes),
                   ringReduceScatterTime(8, b, in) + ringAllReduceTime(2, b / 8, shared) +
                       ringAllGatherTime(8, b, in));
  // The node's link carries half the buffer, a flat ring's 15/16 of it: the
  // hierarchical reduce-scatter is close to half as long.
  double flat = c.collectiveTime(Collective::ReduceScatter, b, twoNodes);
  EXPECT_DOUBLE_EQ(flat, ringReduceScatterTime(16, b, out));
  EXPECT_NEAR(c.hierarchicalCollectiveTime(Collective::ReduceScatter, b, twoNodes) / flat,
              (0.5 / out.bandwidth + 7.0 / 8 / in.bandwidth) / (15.0 / 16 / out.bandwidth), 0.01);
  // One node, one member per node, or uneven: flat.
  EXPECT_DOUBLE_EQ(c.hierarchicalCollectiveTime(Collective::AllGather, b, {0, 1, 2, 3}),
                   c.collectiveTime(Collective::AllGather, b, {0, 1, 2, 3}));
  EXPECT_DOUBLE_EQ(c.hierarchicalCollectiveTime(Collective::AllGather, b, {0, 8, 16}),
                   c.collectiveTime(Collective::AllGather, b, {0, 8, 16}));
  EXPECT_FALSE(c.spreadOf({0, 1, 2, 8}).even);
  EXPECT_DOUBLE_EQ(c.hierarchicalCollectiveTime(Collective::AllGather, b, {0, 1, 2, 8}),
                   c.collectiveTime(Collective::AllGather, b, {0, 1, 2, 8}));
}

TEST(SimHardware, GemmEfficiencySaturates) {
  Device d = Device::a100_40gb();
  EXPECT_EQ(d.peakFlops(), 312e12);
  EXPECT_LT(d.gemmEfficiencyAt(1e8), d.gemmEfficiencyAt(1e10));
  EXPECT_NEAR(d.gemmEfficiencyAt(1e14), d.gemmEfficiency, 1e-3);
  EXPECT_NEAR(d.gemmEfficiencyAt(d.gemmHalfFlops), d.gemmEfficiency / 2, 1e-12);
  // A big GEMM is compute bound, an elementwise op bandwidth bound.
  OpCost gemm{2.0 * 8192 * 8192 * 8192, 3.0 * 8192 * 8192 * 2};
  EXPECT_NEAR(d.time(gemm, KernelClass::Gemm),
              gemm.flops / (312e12 * d.gemmEfficiencyAt(gemm.flops)) + d.kernelOverhead, 1e-12);
  OpCost add{1e8, 1.2e9};
  EXPECT_NEAR(d.time(add), 1.2e9 / (d.memBandwidth * d.memEfficiency) + d.kernelOverhead, 1e-12);
  EXPECT_EQ(d.time(OpCost{}), 0.0);
}

TEST(SimHardware, PresetsExist) {
  for (const char *n : {"cpu", "v100", "a100", "a100-40gb", "a100-80gb", "h100", "h200"})
    EXPECT_TRUE(Device::byName(n).has_value()) << n;
  EXPECT_FALSE(Device::byName("tpu").has_value());
  // Capacities in GiB, the unit of mem-limit (a "40GB" A100 holds 40 GiB).
  EXPECT_EQ(Device::a100_40gb().memCapacity, 40.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(Device::h200().memCapacity, 139.0 * 1024 * 1024 * 1024);
  for (const std::string &n : Cluster::presetNames())
    EXPECT_TRUE(Cluster::preset(n).has_value()) << n;
  EXPECT_TRUE(Cluster::preset("a100-40g-100gbps").has_value());
  EXPECT_TRUE(Cluster::preset("cpu").has_value());
}

TEST(SimHardware, ClusterJsonRoundTrip) {
  for (const std::string &n : {std::string("a100-40g-25gbps"), std::string("cpu"),
                               std::string("h200-200gbps")}) {
    Cluster c = *Cluster::preset(n);
    c.algorithm = CollectiveAlgorithm::Tree;
    c.nodes = 3;
    Cluster back;
    std::string why;
    ASSERT_TRUE(roundTrip(c, back, why)) << why;
    EXPECT_EQ(back.name, c.name);
    EXPECT_EQ(back.device.name, c.device.name);
    EXPECT_EQ(back.device.peakFlopsFp32, c.device.peakFlopsFp32);
    EXPECT_EQ(back.device.peakFlopsBf16, c.device.peakFlopsBf16);
    EXPECT_EQ(back.device.memBandwidth, c.device.memBandwidth);
    EXPECT_EQ(back.device.memCapacity, c.device.memCapacity);
    EXPECT_EQ(back.device.precision, c.device.precision);
    EXPECT_EQ(back.device.gemmEfficiency, c.device.gemmEfficiency);
    EXPECT_EQ(back.device.gemmHalfFlops, c.device.gemmHalfFlops);
    EXPECT_EQ(back.device.memEfficiency, c.device.memEfficiency);
    EXPECT_EQ(back.device.vectorEfficiency, c.device.vectorEfficiency);
    EXPECT_EQ(back.device.kernelOverhead, c.device.kernelOverhead);
    EXPECT_EQ(back.gpusPerNode, c.gpusPerNode);
    EXPECT_EQ(back.nodes, 3);
    EXPECT_EQ(back.intraNode.alpha, c.intraNode.alpha);
    EXPECT_EQ(back.intraNode.bandwidth, c.intraNode.bandwidth);
    EXPECT_EQ(back.interNode.alpha, c.interNode.alpha);
    EXPECT_EQ(back.interNode.bandwidth, c.interNode.bandwidth);
    EXPECT_EQ(back.algorithm, CollectiveAlgorithm::Tree);
  }
}

TEST(SimHardware, ClusterJsonShortFormsAndErrors) {
  Cluster c;
  std::string why;
  ASSERT_TRUE(parse(R"({"name": "x", "device": "h100", "gpus_per_node": 4,
                        "intra_node": {"alpha_s": 1e-6, "bandwidth": 4e11},
                        "inter_node": {"gbps": 100}})",
                    c, why))
      << why;
  EXPECT_EQ(c.device.name, "h100");
  EXPECT_DOUBLE_EQ(c.interNode.bandwidth, 12.5e9);
  ASSERT_TRUE(parse(R"({"preset": "a100-40g-25gbps", "inter_node": {"gbps": 200}})", c, why));
  EXPECT_EQ(c.device.name, "a100-40gb");
  EXPECT_DOUBLE_EQ(c.interNode.bandwidth, 25e9);
  EXPECT_FALSE(parse(R"({"device": "tpu", "intra_node": {"gbps": 1}, "inter_node": {"gbps": 1}})",
                     c, why));
  EXPECT_NE(why.find("unknown preset 'tpu'"), std::string::npos) << why;
  EXPECT_FALSE(parse(R"({"device": {"peak_flops_fp32": -1}})", c, why));
  EXPECT_NE(why.find("device.peak_flops_fp32"), std::string::npos) << why;
  // Positive but absurd rates are unit mistakes that would cost work at
  // infinite times.
  EXPECT_FALSE(parse(R"({"device": {"preset": "a100-40gb", "peak_flops_bf16": 1e-300}})", c, why));
  EXPECT_NE(why.find("peak_flops_bf16 x gemm_efficiency is 8.000000e-301 per second"),
            std::string::npos)
      << why;
  EXPECT_FALSE(parse(R"({"device": {"preset": "cpu", "mem_efficiency": 1e-300}})", c, why));
  EXPECT_NE(why.find("mem_bandwidth x mem_efficiency"), std::string::npos) << why;
  EXPECT_FALSE(parse(R"({"preset": "a100-40g-25gbps", "inter_node": {"bandwidth": 1e-10}})", c,
                     why));
  EXPECT_NE(why.find("inter_node: link.bandwidth: below 1 byte per second"), std::string::npos)
      << why;
  EXPECT_FALSE(
      parse(R"({"device": {"preset": "cpu", "kernels": {"add": {"flop_rate": 1e-3}}}})", c, why));
  EXPECT_NE(why.find("device.kernels.add: bandwidth and flop_rate below 1"), std::string::npos)
      << why;
  EXPECT_TRUE(parse(R"({"preset": "cpu", "device": {"preset": "cpu", "peak_flops_fp32": 2}})", c,
                    why))
      << why;
  EXPECT_FALSE(Cluster::load("no-such-preset", c, why));
  EXPECT_NE(why.find("unknown cluster preset"), std::string::npos) << why;
  EXPECT_FALSE(Cluster::load("/nonexistent/c.json", c, why));
  EXPECT_NE(why.find("cannot read cluster file"), std::string::npos) << why;
}

//===----------------------------------------------------------------------===//
// Per-op rows (Device::kernels, written by pipemesh-sim --calibrate)
//===----------------------------------------------------------------------===//

TEST(SimHardware, KernelKindsNameTheirOpsAndRooflines) {
  EXPECT_EQ(kernelClassOfName("matmul"), KernelClass::Gemm);
  EXPECT_EQ(kernelClassOfName("attention"), KernelClass::Attention);
  EXPECT_EQ(kernelClassOfName("attention_grad"), KernelClass::AttentionGrad);
  EXPECT_EQ(kernelClassOfName("gelu_grad"), KernelClass::GeluGrad);
  EXPECT_EQ(kernelClassOfName("reduce_sum"), KernelClass::ReduceSum);
  // Ops without a kind of their own, and the empty name, are Memory.
  EXPECT_EQ(kernelClassOfName("no_such_op"), KernelClass::Memory);
  EXPECT_EQ(kernelClassOfName("zero"), KernelClass::Memory);
  EXPECT_EQ(kernelClassOfName("adamw"), KernelClass::AdamW);
  EXPECT_EQ(rooflineOf(KernelClass::AdamW), KernelClass::Memory);
  EXPECT_EQ(kernelClassOfName(""), KernelClass::Memory);
  EXPECT_EQ(rooflineOf(KernelClass::AttentionGrad), KernelClass::Attention);
  EXPECT_EQ(rooflineOf(KernelClass::Transpose), KernelClass::Memory);
  EXPECT_EQ(rooflineOf(KernelClass::Gemm), KernelClass::Gemm);
  EXPECT_EQ(kernelName(KernelClass::Memory), "");
  // Every kind's name maps back to it (the table is in enum order).
  for (int k = 0; k <= (int)KernelClass::AdamW; ++k) {
    KernelClass kind = (KernelClass)k;
    if (kind != KernelClass::Memory)
      EXPECT_EQ(kernelClassOfName(kernelName(kind)), kind) << kernelName(kind).str();
  }
}

TEST(SimHardware, KernelFitTime) {
  KernelFit bw{/*bandwidth*/ 1e9, /*flopRate*/ 0, /*overhead*/ 2e-6};
  EXPECT_DOUBLE_EQ(bw.time({1e12, 4e6}), 2e-6 + 4e-3); // flops ignored without a rate
  KernelFit fl{0, 1e10, 1e-4};
  EXPECT_DOUBLE_EQ(fl.time({3e8, 1e12}), 1e-4 + 3e-2); // bytes ignored without a bandwidth
  KernelFit both{1e9, 1e10, 0};
  EXPECT_DOUBLE_EQ(both.time({1e8, 1e6}), 1e-2); // the slower of the two
  EXPECT_DOUBLE_EQ(both.time({1e6, 1e8}), 1e-1);
  // Attention's query rows add their own time to the flops'; ops without
  // rows (rows = 0) and rows without row_s are unaffected.
  KernelFit att{0, 1e10, 1e-4, 2e-7};
  EXPECT_DOUBLE_EQ(att.time({1e8, 1e6, 1000}), 1e-4 + 1e-2 + 2e-4);
  EXPECT_DOUBLE_EQ(att.time({1e8, 1e6}), 1e-4 + 1e-2);
  EXPECT_DOUBLE_EQ(both.time({1e8, 1e6, 1000}), 1e-2);
}

TEST(SimHardware, DeviceTimeUsesItsRowElseTheClassModel) {
  Device plain = Device::cpu();
  plain.kernelOverhead = 3e-6;
  Device d = plain;
  d.kernels["gelu"] = {2e9, 0, 5e-6};
  d.kernels["attention_grad"] = {0, 4e10, 1e-4};
  OpCost c{1e6, 8e6};
  // With a row: the row's formula, not the roofline's (nor kernelOverhead).
  EXPECT_DOUBLE_EQ(d.time(c, KernelClass::Gelu), 5e-6 + 8e6 / 2e9);
  EXPECT_DOUBLE_EQ(d.time(c, KernelClass::AttentionGrad), 1e-4 + 1e6 / 4e10);
  EXPECT_NE(d.time(c, KernelClass::Gelu), plain.time(c, KernelClass::Gelu));
  ASSERT_NE(d.kernelFit(KernelClass::Gelu), nullptr);
  EXPECT_EQ(d.kernelFit(KernelClass::GeluGrad), nullptr);
  // Without one: exactly the class model of its roofline.
  EXPECT_DOUBLE_EQ(d.time(c, KernelClass::GeluGrad), plain.time(c, KernelClass::Memory));
  EXPECT_DOUBLE_EQ(d.time(c, KernelClass::Attention), plain.time(c, KernelClass::Attention));
  EXPECT_DOUBLE_EQ(d.time(c, KernelClass::Memory), 8e6 / (20e9 * 0.8) + 3e-6);
  // A no-op launches nothing, row or not.
  EXPECT_EQ(d.time(OpCost{}, KernelClass::Gelu), 0.0);
  // A row for Memory's empty name is never looked up.
  d.kernels[""] = {1, 0, 1};
  EXPECT_DOUBLE_EQ(d.time(c, KernelClass::Memory), plain.time(c, KernelClass::Memory));
}

TEST(SimHardware, PresetsHaveNoRowsAndTimeKindsByTheirRoofline) {
  OpCost c{2e9, 3e8};
  for (const std::string &n : Device::presetNames()) {
    Device d = *Device::byName(n);
    EXPECT_TRUE(d.kernels.empty()) << n;
    EXPECT_EQ(d.time(c, KernelClass::LayerNormGrad), d.time(c, KernelClass::Memory)) << n;
    EXPECT_EQ(d.time(c, KernelClass::AttentionGrad), d.time(c, KernelClass::Attention)) << n;
    // And a preset's JSON has no "kernels" section.
    EXPECT_EQ(d.toJson().getAsObject()->get("kernels"), nullptr) << n;
  }
}

TEST(SimHardware, ClusterJsonKernelRows) {
  Cluster c;
  std::string why;
  ASSERT_TRUE(parse(R"({"device": {"preset": "cpu", "kernels": {
                          "transpose": {"bandwidth": 9e9, "overhead_s": 2e-6},
                          "attention": {"flop_rate": 3e10, "overhead_s": 1e-4, "row_s": 1e-7},
                          "op_from_the_future": {"bandwidth": 1e9}}},
                        "intra_node": {"gbps": 1}, "inter_node": {"gbps": 1}})",
                    c, why))
      << why;
  ASSERT_EQ(c.device.kernels.size(), 3u);
  EXPECT_DOUBLE_EQ(c.device.kernels["transpose"].bandwidth, 9e9);
  EXPECT_DOUBLE_EQ(c.device.kernels["transpose"].overhead, 2e-6);
  EXPECT_DOUBLE_EQ(c.device.kernels["attention"].flopRate, 3e10);
  EXPECT_DOUBLE_EQ(c.device.time({0, 9e6}, KernelClass::Transpose), 2e-6 + 1e-3);
  EXPECT_DOUBLE_EQ(c.device.time({3e7, 0}, KernelClass::Attention), 1e-4 + 1e-3);
  EXPECT_DOUBLE_EQ(c.device.time({3e7, 0, 500}, KernelClass::Attention), 1e-4 + 1e-3 + 5e-5);
  EXPECT_EQ(c.device.kernels["transpose"].rowSeconds, 0.0);
  // Round trip: the rows, unknown names too, come back.
  Cluster back;
  ASSERT_TRUE(roundTrip(c, back, why)) << why;
  ASSERT_EQ(back.device.kernels.size(), 3u);
  EXPECT_EQ(back.device.kernels["transpose"].bandwidth, 9e9);
  EXPECT_EQ(back.device.kernels["transpose"].flopRate, 0.0);
  EXPECT_EQ(back.device.kernels["attention"].flopRate, 3e10);
  EXPECT_EQ(back.device.kernels["attention"].overhead, 1e-4);
  EXPECT_EQ(back.device.kernels["attention"].rowSeconds, 1e-7);
  EXPECT_EQ(back.device.kernels["op_from_the_future"].bandwidth, 1e9);

  EXPECT_FALSE(parse(R"({"device": {"preset": "cpu", "kernels": {
                          "attention": {"flop_rate": 3e10, "row_s": -1e-7}}}})",
                     c, why));
  EXPECT_NE(why.find("device.kernels.attention.row_s: expected a non-negative number"),
            std::string::npos)
      << why;
  EXPECT_FALSE(parse(R"({"device": {"preset": "cpu", "kernels": {
                          "gelu": {"bandwidth": 3e10, "row_s": 1e-7}}}})",
                     c, why));
  EXPECT_NE(why.find("device.kernels.gelu.row_s: only attention and attention_grad have query "
                     "rows"),
            std::string::npos)
      << why;
  EXPECT_FALSE(parse(R"({"device": {"preset": "cpu", "kernels": [1]}})", c, why));
  EXPECT_NE(why.find("device.kernels: expected an object"), std::string::npos) << why;
  EXPECT_FALSE(parse(R"({"device": {"preset": "cpu", "kernels": {"gelu": 3}}})", c, why));
  EXPECT_NE(why.find("device.kernels.gelu: expected an object"), std::string::npos) << why;
  EXPECT_FALSE(
      parse(R"({"device": {"preset": "cpu", "kernels": {"gelu": {"bandwidth": -1}}}})", c, why));
  EXPECT_NE(why.find("device.kernels.gelu.bandwidth"), std::string::npos) << why;
  EXPECT_FALSE(
      parse(R"({"device": {"preset": "cpu", "kernels": {"add": {"overhead_s": 1e-6}}}})", c, why));
  EXPECT_NE(why.find("device.kernels.add: needs a positive bandwidth or flop_rate"),
            std::string::npos)
      << why;
}
