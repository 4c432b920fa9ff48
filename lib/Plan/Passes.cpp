//===- Passes.cpp - --pmesh-shard and --pmesh-schedule ---------------------===//
#include "pipemesh/Plan/Passes.h"

#include "RankPrograms.h"
#include "StagedStep.h"

#include "pipemesh/Plan/Plan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace pipemesh::plan {
namespace {

/// Options shared by both passes, spelled as in --pipemesh-compile.
template <typename Derived>
struct PlanPassBase : public PassWrapper<Derived, OperationPass<ModuleOp>> {
  PlanPassBase() = default;
  PlanPassBase(const PlanPassBase &other) : PassWrapper<Derived, OperationPass<ModuleOp>>(other) {}

  Pass::Option<int64_t> pp{*this, "pp", llvm::cl::desc("pipeline ranks"), llvm::cl::init(1)};
  Pass::Option<int64_t> vpp{*this, "vpp", llvm::cl::desc("chunks per pipeline rank"),
                            llvm::cl::init(1)};
  Pass::Option<int64_t> dp{*this, "dp", llvm::cl::desc("data-parallel replicas"),
                           llvm::cl::init(1)};

  /// The options as --pipemesh-compile would read them (batch and seq do not
  /// matter here), and the analysis of @train_step.
  FailureOr<detail::StagedStep> setUp(const std::string &extra, CompileOptions &opts) {
    ModuleOp module = this->getOperation();
    std::string text = "batch=1 seq=1 pp=" + std::to_string(pp) + " vpp=" + std::to_string(vpp) +
                       " dp=" + std::to_string(dp) + " " + extra;
    std::string why;
    if (!parseCompileOptions(text, opts, why)) {
      module.emitError() << "--" << this->getArgument() << ": " << why;
      return failure();
    }
    auto train = module.lookupSymbol<func::FuncOp>("train_step");
    if (!train) {
      module.emitError() << "--" << this->getArgument()
                         << " needs @train_step: run --pmesh-autodiff first";
      return failure();
    }
    return detail::analyzeTrainStep(train, opts.pp, opts.pp * opts.vpp);
  }
};

struct ShardPass : public PlanPassBase<ShardPass> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ShardPass)
  ShardPass() = default;
  ShardPass(const ShardPass &other) : PlanPassBase(other) {}
  StringRef getArgument() const final { return "pmesh-shard"; }
  StringRef getDescription() const final {
    return "Set the ZeRO level of every parameter over the data-parallel replicas";
  }
  Pass::Option<std::string> zero{*this, "zero",
                                 llvm::cl::desc("0..3, or one level per chunk (a,b,...)"),
                                 llvm::cl::init("0")};

  void runOnOperation() override {
    CompileOptions opts;
    auto step = setUp("zero=" + zero, opts);
    if (failed(step))
      return signalPassFailure();
    std::vector<int64_t> levels = opts.zeroChunks;
    if (levels.empty())
      levels.assign(opts.pp * opts.vpp, opts.zero);
    detail::annotateSharding(getOperation(), *step, levels, opts.dp);
  }
};

struct SchedulePass : public PlanPassBase<SchedulePass> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(SchedulePass)
  SchedulePass() = default;
  SchedulePass(const SchedulePass &other) : PlanPassBase(other) {}
  StringRef getArgument() const final { return "pmesh-schedule"; }
  StringRef getDescription() const final {
    return "Add one pmesh.rank_program per pipeline rank: the schedule with its sends, "
           "receives and data-parallel collectives";
  }
  Pass::Option<int64_t> microbatches{*this, "microbatches", llvm::cl::init(1)};
  Pass::Option<std::string> schedule{*this, "schedule", llvm::cl::init("1f1b")};
  Pass::Option<int64_t> group{*this, "group", llvm::cl::init(0)};
  Pass::Option<std::string> fwdGroups{*this, "fwd-groups", llvm::cl::init("")};
  Pass::Option<std::string> bwdGroups{*this, "bwd-groups", llvm::cl::init("")};
  Pass::Option<std::string> deferW{*this, "defer-w", llvm::cl::init("")};
  Pass::Option<int64_t> waitLag{
      *this, "wait-lag",
      llvm::cl::desc("complete sends this many actions later (0: at the end of the step)"),
      llvm::cl::init(1)};

  void runOnOperation() override {
    std::string extra = "microbatches=" + std::to_string(microbatches) + " schedule=" + schedule;
    if (group > 0)
      extra += " group=" + std::to_string(group);
    if (!fwdGroups.empty())
      extra += " fwd-groups=" + fwdGroups;
    if (!bwdGroups.empty())
      extra += " bwd-groups=" + bwdGroups;
    if (!deferW.empty())
      extra += " defer-w=" + deferW;
    CompileOptions opts;
    auto step = setUp(extra, opts);
    if (failed(step))
      return signalPassFailure();
    ScheduleConfig cfg;
    cfg.kind = *parseScheduleKind(opts.schedule);
    cfg.pp = opts.pp, cfg.vpp = opts.vpp, cfg.microbatches = opts.microbatches;
    cfg.group = opts.group, cfg.fwdGroups = opts.fwdGroups, cfg.bwdGroups = opts.bwdGroups;
    cfg.deferW = opts.deferW.value_or(DeferW::None);
    std::string why;
    if (!validateSchedule(cfg, why)) {
      getOperation().emitError() << "--pmesh-schedule: " << why;
      return signalPassFailure();
    }
    if (failed(detail::buildRankPrograms(getOperation(), *step, cfg, opts.dp, waitLag)))
      return signalPassFailure();
  }
};

} // namespace

void registerPlanPasses() {
  PassRegistration<ShardPass>();
  PassRegistration<SchedulePass>();
}

} // namespace pipemesh::plan
