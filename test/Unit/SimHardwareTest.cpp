//===- SimHardwareTest.cpp - devices, links, clusters ----------------------===//
#include "pipemesh/CostModel/Hardware.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace pipemesh::cost;

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
    std::string s;
    llvm::raw_string_ostream os(s);
    os << c.toJson();
    llvm::Expected<llvm::json::Value> v = llvm::json::parse(s);
    ASSERT_TRUE((bool)v);
    Cluster back;
    std::string why;
    ASSERT_TRUE(Cluster::fromJson(*v, back, why)) << why;
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
  auto parse = [](const char *text, Cluster &c, std::string &why) {
    llvm::Expected<llvm::json::Value> v = llvm::json::parse(text);
    EXPECT_TRUE((bool)v);
    return Cluster::fromJson(*v, c, why);
  };
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
  EXPECT_FALSE(Cluster::load("no-such-preset", c, why));
  EXPECT_NE(why.find("unknown cluster preset"), std::string::npos) << why;
  EXPECT_FALSE(Cluster::load("/nonexistent/c.json", c, why));
  EXPECT_NE(why.find("cannot read cluster file"), std::string::npos) << why;
}
