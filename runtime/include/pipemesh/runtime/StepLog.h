//===- StepLog.h - progress lines and the JSON step log ---------*- C++ -*-===//
//
// Global rank 0 alone writes both, with the global loss:
//   step 3/10 | loss 5.123456 | lr 1.00e-03 | grad_norm 1.23 | 12.3 ms | 2345 tok/s
// and, with --log-json FILE, one JSON object per line and step:
//   {"step": 2, "loss": ..., "lr": ..., "grad_norm": ..., "ms": ...,
//    "tokens_per_s": ..., "ranks": [{"rank": 0, "compute_ms": ...,
//    "comm_ms": 0.0, "idle_ms": 0.0}, ...]}
// `step` is 0-based there; `loss` is the step's training loss before its
// update (mean over the global batch), printed with round-trip precision.
// An evaluation (--val-data) after step s writes
//   eval after step 4/10 | val loss 5.012345 | 2 batches, 4096 tokens | 8.1 ms
//   {"step": 3, "val_loss": ..., "val_batches": 2, "val_tokens": 4096, "ms": ...}
// (`step`: the last step done, 0-based; lines without `loss`).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_STEPLOG_H
#define PIPEMESH_RUNTIME_STEPLOG_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace pipemesh::rt {

struct RankTiming {
  double computeMs = 0, commMs = 0, idleMs = 0;
};

struct StepRecord {
  int64_t step = 0, steps = 0;
  double loss = 0, lr = 0, gradNorm = 0, ms = 0, tokensPerS = 0;
  /// The plan's model FLOPs per step over the step time and the ranks
  /// (0: the plan counts none); mfu, that over --peak-tflops (NaN: not given).
  double tflopsPerRank = 0, mfu = std::nan("");
  bool hasGradNorm = true;
  std::vector<RankTiming> ranks;
};

/// The validation loss after `step` (0-based, the last step done): the mean
/// over `batches` global batches of the validation data.
struct EvalRecord {
  int64_t step = 0, steps = 0, batches = 0, tokens = 0;
  double valLoss = 0, ms = 0;
};

std::string progressLine(const StepRecord &r);
std::string jsonLine(const StepRecord &r);
std::string progressLine(const EvalRecord &r);
std::string jsonLine(const EvalRecord &r);

/// The --log-json file, one flushed line per step. A fresh run truncates it;
/// a run resumed at step `resumedAt` (0-based: the first step it runs) keeps
/// the lines of the steps before and appends.
class JsonLog {
public:
  explicit JsonLog(const std::string &path, int64_t resumedAt = -1);
  ~JsonLog();
  void write(const StepRecord &r) { writeLine(jsonLine(r)); }
  void write(const EvalRecord &r) { writeLine(jsonLine(r)); }

private:
  void writeLine(const std::string &json);
  std::FILE *file = nullptr;
  std::string path;
};

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_STEPLOG_H
