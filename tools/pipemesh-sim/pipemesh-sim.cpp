//===- pipemesh-sim.cpp - simulate a plan on a described cluster ----------===//
//
//   pipemesh-sim PLAN [--cluster C.json|PRESET] [--trace T.json] [--json OUT]
//                     [--svg OUT.svg] [--rendezvous]
//   pipemesh-sim --list-clusters
//   [mpirun -np N] pipemesh-sim --calibrate -o C.json
//
// Simulates one training step of the plan's per-rank programs (lib/Sim) on
// the cluster (lib/CostModel/Hardware) and prints where the time goes.
// docs/pipemesh-sim.md describes the options, the cluster file and the
// outputs.
//
//===----------------------------------------------------------------------===//
#include "Calibrate.h"

#include "pipemesh/CostModel/Hardware.h"
#include "pipemesh/Sim/PlanLoader.h"
#include "pipemesh/Sim/Report.h"
#include "pipemesh/Sim/Simulator.h"
#include "pipemesh/Sim/Timeline.h"
#include "pipemesh/runtime/CpuKernels.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <cstring>

using namespace pipemesh;
namespace cl = llvm::cl;

// Only these in --help: the LLVM libraries register hundreds of their own.
static cl::OptionCategory simOptions("pipemesh-sim options");

static cl::opt<std::string> planPath(cl::Positional, cl::desc("<plan>"), cl::init(""),
                                     cl::cat(simOptions));
static cl::opt<std::string> clusterArg("cluster",
                                       cl::desc("Cluster preset name or JSON file (default cpu)"),
                                       cl::value_desc("C.json|preset"), cl::init("cpu"),
                                       cl::cat(simOptions));
static cl::opt<std::string> traceOut("trace", cl::desc("Write a Chrome/Perfetto trace"),
                                     cl::value_desc("T.json"), cl::init(""), cl::cat(simOptions));
static cl::opt<std::string> jsonOut("json", cl::desc("Write the summary as JSON"),
                                    cl::value_desc("OUT.json"), cl::init(""), cl::cat(simOptions));
static cl::opt<std::string> svgOut("svg", cl::desc("Draw the timeline as an SVG picture"),
                                   cl::value_desc("OUT.svg"), cl::init(""), cl::cat(simOptions));
static cl::opt<bool> rendezvous("rendezvous",
                                cl::desc("A message moves only once its receive is posted"),
                                cl::init(false), cl::cat(simOptions));
static cl::opt<bool> listClusters("list-clusters", cl::desc("List the cluster presets"),
                                  cl::init(false), cl::cat(simOptions));
static cl::opt<bool> printCluster("print-cluster", cl::desc("Print the cluster as JSON and exit"),
                                  cl::init(false), cl::cat(simOptions));
static cl::opt<bool> calibrate("calibrate",
                               cl::desc("Measure this machine and write a cluster file (-o)"),
                               cl::init(false), cl::cat(simOptions));
static cl::opt<bool> quick("quick", cl::desc("--calibrate: shorter measurements"), cl::init(false),
                           cl::cat(simOptions));
static cl::opt<std::string> outPath("o", cl::desc("--calibrate: output cluster file"),
                                    cl::value_desc("C.json"), cl::init(""), cl::cat(simOptions));
static cl::opt<int> perOpRank("per-op",
                              cl::desc("Print the simulated time per op name of this rank"),
                              cl::value_desc("rank"), cl::init(-1), cl::cat(simOptions));
static cl::opt<bool> quiet("quiet", cl::desc("No summary table on stdout"), cl::init(false),
                           cl::cat(simOptions));

static int error(const llvm::Twine &msg) {
  llvm::errs() << "pipemesh-sim: error: " << msg << "\n";
  return 1;
}

/// Into a temporary file beside `path`, renamed over it once complete
/// (llvm::writeToOutput; "-" is stdout): an interrupted or failed write
/// leaves what was there.
template <typename F> static bool writeFile(const std::string &path, F &&write) {
  if (llvm::Error e = llvm::writeToOutput(path, [&](llvm::raw_ostream &os) {
        write(os);
        return llvm::Error::success();
      })) {
    error("cannot write " + llvm::toString(std::move(e))); // names the path
    return false;
  }
  return true;
}

int main(int argc, char **argv) {
  // Calibration must time the kernels as pipemesh-run runs them: the BLAS
  // core type and thread settings are chosen before anything else (this may
  // re-execute the program once).
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--calibrate") || !std::strcmp(argv[i], "-calibrate")) {
      rt::cpu::configureBlas(argc, argv);
      break;
    }
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(simOptions);
  cl::ParseCommandLineOptions(argc, argv,
                              "pipemesh-sim: simulate a PipeMesh plan on a described cluster\n");

  if (listClusters) {
    llvm::outs() << "cluster presets (--cluster NAME):\n";
    for (const std::string &n : cost::Cluster::presetNames()) {
      cost::Cluster c = *cost::Cluster::preset(n);
      llvm::outs() << llvm::formatv("  {0,-18} {1}\n", n, c.description);
    }
    llvm::outs() << "GPU clusters have as many nodes as the plan's world size needs.\n";
    return 0;
  }
  if (calibrate) {
    if (outPath.empty())
      return error("--calibrate needs -o C.json");
    return sim::runCalibration(outPath, quick);
  }

  cost::Cluster cluster;
  std::string why;
  if (!cost::Cluster::load(clusterArg, cluster, why))
    return error(why);
  if (printCluster) {
    llvm::outs() << llvm::formatv("{0:2}", cluster.toJson()) << "\n";
    return 0;
  }
  if (planPath.empty())
    return error("no plan given (pipemesh-sim PLAN --cluster C; --help for more)");

  auto t0 = std::chrono::steady_clock::now();
  sim::LoadedPlan plan;
  if (!sim::loadPlanFile(planPath, plan, why))
    return error(why);
  std::string fits = cluster.checkFits((int64_t)plan.job.ranks.size());
  if (!fits.empty())
    return error(fits);
  // Per-op breakdown (before merging): what --profile of pipemesh-run
  // prints, to compare a calibration with measurements.
  std::vector<std::pair<std::string, double>> perOp;
  if (perOpRank >= 0) {
    if (perOpRank >= (int)plan.job.ranks.size())
      return error("--per-op " + std::to_string(perOpRank) + ": the plan has " +
                   std::to_string(plan.job.ranks.size()) + " ranks");
    std::map<std::string, double> byOp;
    const sim::Program &p = plan.job.ranks[perOpRank];
    for (size_t k = 0; k < p.instrs.size(); ++k)
      if (p.instrs[k].kind == sim::OpKind::Compute)
        byOp[plan.opNames[perOpRank][p.instrs[k].source]] +=
            p.instrs[k].seconds >= 0
                ? p.instrs[k].seconds
                : cluster.device.time(p.instrs[k].opCost(), p.instrs[k].kernelClass);
    perOp.assign(byOp.begin(), byOp.end());
    std::sort(perOp.begin(), perOp.end(),
              [](const auto &a, const auto &b) { return a.second > b.second; });
  }
  sim::mergeCompute(plan.job, cluster.device);
  auto t1 = std::chrono::steady_clock::now();

  sim::SimOptions opts;
  opts.rendezvous = rendezvous;
  opts.timeline = !traceOut.empty() || !svgOut.empty();
  sim::SimResult res = sim::simulate(plan.job, cluster, opts);
  auto t2 = std::chrono::steady_clock::now();
  if (!res.ok)
    return error("plan '" + planPath + "': " + res.error);

  if (!quiet) {
    sim::printSummary(llvm::outs(), plan.job, cluster, res);
    double load = std::chrono::duration<double>(t1 - t0).count();
    double simS = std::chrono::duration<double>(t2 - t1).count();
    sim::JobSize sz = sim::jobSize(plan.job);
    llvm::outs() << llvm::formatv("  (loaded in {0:f1} ms; simulated {1} instructions in {2:f2} "
                                  "ms)\n",
                                  load * 1e3, sz.instructions, simS * 1e3);
  }
  if (!perOp.empty() && !quiet) {
    double total = 0;
    for (auto &kv : perOp)
      total += kv.second;
    llvm::outs() << "  simulated time per op on rank " << perOpRank << " (one step, "
                 << llvm::formatv("{0:f3}", total * 1e3) << " ms):\n";
    for (auto &[name, t] : perOp)
      llvm::outs() << llvm::formatv("    {0,-22} {1,9:f3} ms {2,6:f1}%\n", name, t * 1e3,
                                    total > 0 ? 100 * t / total : 0.0);
  }
  if (!jsonOut.empty() && !writeFile(jsonOut, [&](llvm::raw_ostream &os) {
        llvm::json::Value v = sim::summaryJson(plan.job, cluster, res);
        if (!perOp.empty()) {
          llvm::json::Object ops;
          for (auto &[name, t] : perOp)
            ops[name] = t;
          v.getAsObject()->insert({"per_op_s", std::move(ops)});
          v.getAsObject()->insert({"per_op_rank", (int64_t)perOpRank});
        }
        os << llvm::formatv("{0:2}", v) << "\n";
      }))
    return 1;
  if (!traceOut.empty() && !writeFile(traceOut, [&](llvm::raw_ostream &os) {
        sim::writeChromeTrace(os, plan.job, res);
      }))
    return 1;
  if (!svgOut.empty() && !writeFile(svgOut, [&](llvm::raw_ostream &os) {
        sim::writeSvgTimeline(os, plan.job, res,
                              planPath + " on " + cluster.name + " (" + plan.job.description +
                                  ")");
      }))
    return 1;
  return 0;
}
