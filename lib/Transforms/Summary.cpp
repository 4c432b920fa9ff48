//===- Summary.cpp - a human summary of a pmesh module ---------------------===//
#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"
#include "pipemesh/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace pipemesh {
#define GEN_PASS_DEF_PMESHSUMMARY
#include "pipemesh/Transforms/Passes.h.inc"
} // namespace pipemesh

using namespace mlir;
using namespace pipemesh;

namespace {
std::string typeString(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

struct PMeshSummaryPass : pipemesh::impl::PMeshSummaryBase<PMeshSummaryPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::raw_ostream &os = llvm::outs();
    if (auto src = module->getAttrOfType<StringAttr>("pmesh.source"))
      os << "model: " << src.getValue() << "\n";

    int64_t count = 0, elements = 0;
    llvm::StringSet<> sources;
    for (auto p : module.getOps<pmesh::ParamOp>()) {
      ++count;
      elements += shapes::numElements(cast<RankedTensorType>(p.getType()).getShape());
      if (p.getSource())
        sources.insert(*p.getSource());
    }
    os << "parameters: " << count << " tensors, " << elements << " elements ("
       << llvm::format("%.2f", elements * 4.0 / (1 << 20)) << " MiB fp32)";
    if (sources.size() < (size_t)count)
      os << ", " << count - (int64_t)sources.size()
         << " start from another parameter's initial values";
    os << "\n";

    for (auto func : module.getOps<func::FuncOp>()) {
      os << "function @" << func.getSymName() << "\n";
      for (auto [k, t] : llvm::enumerate(func.getArgumentTypes())) {
        auto name = func.getArgAttrOfType<StringAttr>(k, "pmesh.name");
        os << "  input  " << (name ? name.getValue() : "?") << ": " << typeString(t) << "\n";
      }
      for (auto [k, t] : llvm::enumerate(func.getResultTypes())) {
        auto name = func.getResultAttrOfType<StringAttr>(k, "pmesh.name");
        os << "  output " << (name ? name.getValue() : "?") << ": " << typeString(t) << "\n";
      }
      llvm::MapVector<StringRef, int64_t> histogram;
      func.walk([&](Operation *op) {
        if (op != func.getOperation())
          histogram[op->getName().getStringRef()]++;
      });
      std::vector<std::pair<StringRef, int64_t>> rows(histogram.begin(), histogram.end());
      std::stable_sort(rows.begin(), rows.end(),
                       [](auto &a, auto &b) { return a.second > b.second; });
      os << "  ops:\n";
      for (auto &[name, n] : rows)
        os << llvm::format("    %-28s %6lld\n", name.str().c_str(), (long long)n);
    }
    markAllAnalysesPreserved();
  }
};
} // namespace
