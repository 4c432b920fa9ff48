//===- StagedStep.h - @train_step split into chunks and phases --*- C++ -*-===//
//
// Internal to lib/Plan. Reads the `pmesh.stage` of every op of @train_step
// (set by --pmesh-partition and the staged autodiff), splits each chunk's
// ops into its forward phase (F: the ops the loss depends on) and its
// backward phase (B: everything else, gradients and accumulate_grad), and
// finds the values that cross pipeline ranks (one message channel per
// (value, destination rank)) and the ranks that hold each parameter.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_LIB_PLAN_STAGEDSTEP_H
#define PIPEMESH_LIB_PLAN_STAGEDSTEP_H

#include "pipemesh/Plan/Schedule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <set>
#include <string>
#include <vector>

namespace pipemesh::plan::detail {

/// Where a value's buffer comes from on a rank.
enum class ValueScope {
  Input,      // a @train_step argument (loaded per micro-batch) or a view of one
  Constant,   // a pmesh.constant or a view of one (one buffer per rank)
  Param,      // a get_param or a view of one (the rank's copy of the parameter)
  Activation, // computed per micro-batch
};

struct StagedStep {
  mlir::func::FuncOp train;
  int64_t pp = 1;
  int64_t numChunks = 1;
  /// The returned loss and the op that computes it.
  mlir::Value loss;
  mlir::Operation *lossOp = nullptr;
  /// Chunk of every op that produces activations (or accumulates a gradient).
  llvm::DenseMap<mlir::Operation *, int64_t> chunkOf;
  /// The ops the loss depends on (the forward phase).
  llvm::DenseSet<mlir::Operation *> forward;
  /// Per chunk, the ops each phase runs, in program order (views of inputs,
  /// constants and parameters are left out: every rank materializes those).
  std::vector<std::vector<mlir::Operation *>> fwdOps, bwdOps;
  /// Each chunk's backward split for the Zero Bubble schedules: the input-
  /// gradient part (what the gradients sent to other ranks depend on) and the
  /// weight-gradient part (the rest: weight gradients and their
  /// accumulation), each in program order.
  std::vector<std::vector<mlir::Operation *>> bwdInputOps, bwdWeightOps;
  /// Each chunk's weight-gradient ops in parts, one per gradient bucket
  /// (gradientBuckets) they accumulate, in the order the unsplit W completes
  /// the buckets; an op belongs to the first part that needs it, so the
  /// parts run in order, and part k of one micro-batch may run after later
  /// micro-batches' parts. One part when the chunk has one bucket. The
  /// schedules that defer W's run a chunk's first bucket of every
  /// micro-batch before its other buckets (Schedule.h, orderWeightParts):
  /// that bucket's reduction then starts while the rest compute.
  std::vector<std::vector<std::vector<mlir::Operation *>>> bwdWeightParts;
  /// Per chunk and part: the parameters whose gradient the part accumulates.
  std::vector<std::vector<std::set<std::string>>> accumulatedByPart;
  /// The transformer layer of every forward and backward op (from the
  /// parameters it reads, else inherited from its operands; -1 before the
  /// first layer): what recompute=layers works in.
  llvm::DenseMap<mlir::Operation *, int64_t> layerOf;
  /// Activations read on other pipeline ranks: (destination rank, channel).
  llvm::DenseMap<mlir::Value, llvm::SmallVector<std::pair<int64_t, int64_t>, 1>> remote;
  int64_t numChannels = 0;
  /// The value each channel carries.
  std::vector<mlir::Value> channelValue;
  /// Per parameter: the pipeline ranks that read it or accumulate its
  /// gradient (more than one: a tied parameter, one copy per rank).
  llvm::StringMap<std::set<int64_t>> holders;
  /// Per parameter: the chunks that read it or accumulate its gradient.
  llvm::StringMap<std::set<int64_t>> chunksOf;
  /// Per chunk: the parameters whose gradient its backward accumulates.
  std::vector<std::set<std::string>> accumulated;
  /// The weights entry of every constant ("const.K" in program order).
  llvm::DenseMap<mlir::Operation *, std::string> constantName;

  int64_t rankOf(int64_t chunk) const { return chunk % pp; }
  /// The ops one phase of a chunk runs: phase 0 the forward, 1 the whole
  /// backward (or, when the schedule splits it, its input-gradient part B),
  /// 2 the weight-gradient part W.
  const std::vector<mlir::Operation *> &phaseOps(int64_t chunk, int phase, bool split) const {
    if (phase == 0)
      return fwdOps[chunk];
    if (!split)
      return bwdOps[chunk];
    return phase == 2 ? bwdWeightOps[chunk] : bwdInputOps[chunk];
  }
  /// The layers (layerOf) of a chunk's forward ops, in order.
  std::set<int64_t> layersIn(int64_t chunk) const;
  /// The ops an action runs: phaseOps of its phase, a W part's
  /// (bwdWeightParts) when it has one.
  const std::vector<mlir::Operation *> &opsOf(const Action &a, bool split) const {
    if (a.weight && a.part >= 0)
      return bwdWeightParts[a.chunk][a.part];
    return phaseOps(a.chunk, a.phase(), split);
  }
  /// The gradient bucket of every parameter chunk `chunk`'s forward reads
  /// (an opaque key, equal for one bucket): the unit of data-parallel
  /// reduction (and of ZeRO gathers). Buckets never span layers (named by
  /// partition::layerOfParam). A layer's parameters fill buckets of about
  /// PyTorch DDP's default size, 25 MiB of f32 gradient (6.5M elements), in
  /// the order the forward reads them, a weight matrix never split (a 1.3B
  /// GPT layer: three, a 7B one: four; the tiny test models: one): the
  /// backward's last bucket, whose reduction nothing hides, is then a part
  /// of a layer. The parameters of no layer form a bucket with the others
  /// of their first reader's layer: the embedding and, apart from the last
  /// layer, the final norm and the LM head (a tied embedding's copy there),
  /// whose gradients the backward completes first.
  const llvm::StringMap<int64_t> &gradientBuckets(int64_t chunk) const {
    return bucketOf[chunk];
  }
  /// Per chunk: gradientBuckets.
  std::vector<llvm::StringMap<int64_t>> bucketOf;
  /// The pipeline rank that computes an Activation-scope value.
  int64_t producerRank(mlir::Value v) const;
  ValueScope scope(mlir::Value v) const;
  /// The parameter a Param-scope value reads ("" otherwise).
  llvm::StringRef paramRoot(mlir::Value v) const;

  /// The value a chain of reshapes views (`v` itself when no reshape made
  /// it): views share their root's buffer, so they share its storage type.
  static mlir::Value viewRoot(mlir::Value v);
  /// Roots (viewRoot) of the values that are parts of parameter gradients:
  /// what accumulate_grad reads, and what reaches it through sums, slices,
  /// transposes and concatenations (a tied weight's two gradients, a
  /// position table's slice). With activations=bf16 they keep f32 storage:
  /// a gradient rounded to 8 bits of mantissa before it is summed over
  /// micro-batches loses what AdamW's fp32 master weights are there to keep.
  llvm::DenseSet<mlir::Value> gradientParts;
  /// Values computed from a parameter (or from the loss, which is): what
  /// bf16 storage may round. Values computed from the inputs and constants
  /// alone (masks, positions cast to f32) stay exact.
  llvm::DenseSet<mlir::Value> fromParams;
  /// activations=bf16, params=bf16 (set by the plan builder from its
  /// options).
  bool bf16Activations = false;
  bool bf16Params = false;
  /// grad-reduce=bf16: data-parallel gradient reductions move bf16.
  bool bf16GradReduce = false;
  /// Whether `v`'s buffer stores bf16 (computed in f32, rounded when
  /// stored): with bf16Activations, Activation-scope f32 tensors of rank >= 1
  /// computed from parameters do, except gradientParts; inputs, parameters,
  /// constants, what only they determine and scalars (the loss) never do.
  bool storesBf16(mlir::Value v) const;
  /// The bytes of `v`'s buffer at its storage type (what the memory planner
  /// and a pipeline message see; the skeleton simulation's sizes).
  int64_t storedBytes(mlir::Value v) const;
};

/// Analyzes @train_step for `pp` pipeline ranks and `numChunks` (= pp * vpp)
/// chunks. With one chunk, stage attributes are ignored.
mlir::FailureOr<StagedStep> analyzeTrainStep(mlir::func::FuncOp train, int64_t pp,
                                             int64_t numChunks);

} // namespace pipemesh::plan::detail

#endif // PIPEMESH_LIB_PLAN_STAGEDSTEP_H
