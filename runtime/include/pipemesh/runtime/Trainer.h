//===- Trainer.h - one pipemesh-run training job ----------------*- C++ -*-===//
//
// Ties the pieces together in the order failures should surface: read the
// plan, check the world size and the cross-rank consistency of the plan
// against it (before any work), check the backend, load and validate the
// data, allocate the arena and load the initial weights, create and warm up
// the dp / tied communicators, bind the program, warm up its point-to-point
// peers, restore a checkpoint; then run the steps, logging on global rank 0
// (with every rank's compute / comm / idle time) and checkpointing when asked.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_TRAINER_H
#define PIPEMESH_RUNTIME_TRAINER_H

#include "pipemesh/runtime/Arena.h"
#include "pipemesh/runtime/Backend.h"
#include "pipemesh/runtime/Executor.h"
#include "pipemesh/runtime/LrSchedule.h"
#include "pipemesh/runtime/Plan.h"
#include "pipemesh/runtime/Sampler.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace pipemesh::rt {

class Communicator;
class JsonLog;

/// The most global batches an evaluation takes by default.
constexpr int64_t kDefaultEvalIters = 20;

struct RunOptions {
  std::string planPath;
  std::optional<std::string> dataPath;
  /// Validation tokens (--val-data): evaluated after every `evalInterval`
  /// steps (0: only after the last) on `evalIters` global batches (0: the
  /// default, every window once, at most kDefaultEvalIters batches).
  std::optional<std::string> valDataPath;
  int64_t evalInterval = 0;
  int64_t evalIters = 0;
  int64_t steps = 0;
  std::string logJson;
  OptimizerConfig opt;
  int64_t warmupSteps = 0;
  LrScheduleKind schedule = LrScheduleKind::Constant;
  double minLr = 0;
  int64_t decaySteps = 0; ///< --decay-steps (wsd)
  std::string checkpointDir;
  int64_t checkpointEvery = 0;
  int64_t keepCheckpoints = 0; ///< 0: all; else the newest K step directories stay
  bool resume = false;
  std::string backend = "cpu";
  std::string precision = "fp32"; ///< device backends: fp32 | bf16 (--precision)
  bool deterministic = true;      ///< device backends: bit-identical runs (--deterministic)
  std::optional<uint64_t> shuffleSeed;
  uint64_t seed = 0;
  std::optional<int64_t> stopAtStep; ///< stop after this many completed steps
  /// Stop (with a checkpoint) after the first step that ends this many
  /// minutes after the run started (--max-minutes).
  std::optional<double> maxMinutes;
  /// A rank's peak FLOP/s in TFLOP/s (--peak-tflops): the step log's MFU.
  std::optional<double> peakTflops;
  std::string dumpData;              ///< debug: JSON lines of every micro-batch
  bool profile = false;              ///< print time per op name at the end
  std::string blasInfo;              ///< for the banner
};

/// A parameter's trained values, as --export-onnx needs them.
struct TrainedParam {
  const ParamInfo *info;
  const float *data;
};

class Trainer {
public:
  Trainer(const RunOptions &opts, Communicator &comm, std::ostream &log);
  ~Trainer();
  /// Runs the remaining steps.
  void run();
  const Plan &plan() const { return planData; }
  /// Every parameter's trained values, on rank 0 (collected from the rank
  /// that holds it whole, or from its ZeRO-3 shards; empty elsewhere). Every
  /// rank must call it: the other ranks send what rank 0 needs.
  std::vector<TrainedParam> trainedParams();

private:
  void banner();
  /// The run's flags a checkpoint records (`run` in its manifest).
  nlohmann::json runRecord() const;
  /// Writes the checkpoint after `done` steps (collective).
  void checkpoint(int64_t done);
  /// The validation loss after `done` steps, logged on rank 0.
  void evaluate(int64_t done, JsonLog *jsonLog);
  void printProfile() const;
  void setUpTestExit(const std::string &spec);
  /// Device backends: their persistent buffers into the host arena.
  void syncToHost();
  const RunOptions &opts;
  Communicator &comm;
  std::ostream &log;
  Plan planData;
  const RankPlan *rankPlan = nullptr;
  std::unique_ptr<Arena> arena; ///< host memory (the device backend's mirror)
  /// Parameters rank 0 collected from other ranks for --export-onnx.
  std::vector<std::vector<float>> exportStorage;
  std::unique_ptr<ComputeBackend> backend; ///< null: the CPU kernels on `arena`
  std::shared_ptr<TokenData> data;
  std::unique_ptr<Sampler> sampler;
  std::shared_ptr<TokenData> valData;
  std::unique_ptr<Sampler> valSampler; ///< without --shuffle: the same batches every time
  std::vector<bool> evalSkips;         ///< evaluationSkips() of this rank's program
  /// dp-collectives=hierarchical: how many ranks run them so (the banner's).
  int64_t hierarchicalRanks = 0;
  int64_t evalIters = 0;
  std::unique_ptr<ExecEnv> env;
  std::unique_ptr<Executor> executor;
  LrSchedule schedule;
  int64_t startStep = 0;
  /// Steps (0-based, inclusive) whose times --profile reports.
  int64_t profileFirst = -1, profileLast = -1;
  uint64_t rngState = 0;
  std::string resumedFrom;
  std::string reshardedFrom; ///< the configuration of a resharded checkpoint
};

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_TRAINER_H
