//===- Executor.h - interprets one rank's program ---------------*- C++ -*-===//
//
// The executor binds every instruction once, up front: it looks the op up in
// the op table (one binder per op name, runtime/lib/exec/*Ops.cpp), checks
// operand counts, element types and shapes, derives the kernel arguments
// (sizes, strides, broadcasts) from the buffer table and returns a thunk that
// only calls kernels. An unknown op or a malformed instruction is an Error
// naming the instruction before any step runs. runStep() then calls the
// thunks in order; an error while running (a token id out of range, a
// communication timeout) names the rank, the instruction and the op.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_EXECUTOR_H
#define PIPEMESH_RUNTIME_EXECUTOR_H

#include "pipemesh/runtime/Arena.h"
#include "pipemesh/runtime/Backend.h"
#include "pipemesh/runtime/PendingSends.h"
#include "pipemesh/runtime/Plan.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pipemesh::rt {

class Communicator;
class CommRequest;
class Sampler;

/// AdamW hyper-parameters (PyTorch's defaults) and global-norm clipping
/// (0 = off). `lr` is the base rate; StepState::lr is this step's.
struct OptimizerConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01, gradClip = 0;
  /// A non-finite global gradient norm stops the run before the update
  /// (--nan-check on, the default), instead of writing NaN into every weight.
  bool nanCheck = true;
};

/// What the control instructions of one step read and write.
struct StepState {
  int64_t step = 0;    ///< 0-based step being run
  double lr = 0;       ///< this step's learning rate (after warmup / schedule)
  double loss = 0;     ///< this rank's sum of `loss` instructions' scale * loss
  double gradNorm = 0; ///< global gradient norm before clipping (set by adamw)
  bool optimizerRan = false;
  /// Communication waits inside non-communication instructions (adamw's
  /// gradient-norm all-reduce), counted as communication in the timings.
  double commInComputeMs = 0;
};

/// Sees every micro-batch the loader fills (pipemesh-run --dump-data).
using MicrobatchObserver =
    std::function<void(int64_t step, int64_t microbatch, int64_t dpRank, const int64_t *tokens,
                       const int64_t *targets, int64_t count)>;

/// Everything a bound instruction may reach.
struct ExecEnv {
  const Plan &plan;
  const RankPlan &rank;
  Arena &arena;
  const Sampler *sampler = nullptr;
  Communicator *comm = nullptr;
  /// The compute backend whose op table and arena the program binds to;
  /// null: the CPU kernels on `arena`.
  ComputeBackend *backend = nullptr;
  OptimizerConfig opt;
  StepState state;
  MicrobatchObserver observer;
  /// Sends posted by `send` and not yet completed by `wait_sends` (or the
  /// end of the step).
  PendingSends pendingSends;
  /// Packing space of the collectives (one, sized at bind time for the
  /// largest: instructions run one at a time).
  std::vector<float> commScratch;
  /// Test hook (PIPEMESH_TEST_EXIT_AT_STEP): _exit(9) before instruction
  /// `testExitInstruction` of step `testExitStep` (-1: never).
  int64_t testExitStep = -1;
  size_t testExitInstruction = 0;

  ExecEnv(const Plan &plan, const RankPlan &rank, Arena &arena);
  ~ExecEnv();
};

/// What kind of time an instruction spends (for the per-rank split in the log).
enum class InstrClass { Compute, Comm, Control };

struct BoundInstruction {
  const Instruction *inst = nullptr;
  InstrClass cls = InstrClass::Compute;
  Thunk run;
  double totalMs = 0;   ///< over all steps run
  std::string activity; ///< "instruction 7 (recv from rank 0, tag 3)"
};

struct StepTimings {
  double computeMs = 0, commMs = 0, controlMs = 0;
};

class Executor {
public:
  /// Binds the rank's whole program; Error on the first bad instruction.
  explicit Executor(ExecEnv &env);
  /// Runs the program once (one training step), then completes the sends
  /// still outstanding. With `skips` (evaluationSkips(): one flag per
  /// instruction), an evaluation: the flagged instructions do not run, and
  /// the step counts neither into the profile nor for the test-exit hook.
  void runStep(const std::vector<bool> *skips = nullptr);
  /// Peers of this rank's send and recv instructions (sorted, unique).
  std::vector<int64_t> peers() const;
  const StepTimings &timings() const { return lastTimings; }
  /// Milliseconds spent per op name over all steps so far (for --profile).
  std::vector<std::pair<std::string, double>> profile() const;
  /// The same per op, input shapes and attributes: the `top` largest.
  std::vector<std::pair<std::string, double>> profileByShape(size_t top) const;
  /// Forgets the times so far (--profile leaves out the first step, whose
  /// times include one-time costs: lazy kernel loading, first touches).
  void resetProfile();
  /// Op names the executor knows (kernel and control instructions).
  static std::vector<std::string> knownOps();
  /// Bytes of the f32 staging space of a bf16-activation plan on the CPU
  /// kernels (0 otherwise): memory beside the arena.
  uint64_t stagingBytes() const { return bf16Staging.size() * sizeof(float); }

private:
  ExecEnv &env;
  std::vector<BoundInstruction> program;
  /// f32 copies of the bf16 buffers of the instruction running (CPU
  /// kernels compute in f32): one space, sized for the largest instruction.
  std::vector<float> bf16Staging;
  StepTimings lastTimings;
};

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_EXECUTOR_H
