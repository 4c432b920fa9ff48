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
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_STEPLOG_H
#define PIPEMESH_RUNTIME_STEPLOG_H

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
  bool hasGradNorm = true;
  std::vector<RankTiming> ranks;
};

std::string progressLine(const StepRecord &r);
std::string jsonLine(const StepRecord &r);

/// The --log-json file, one flushed line per step. A fresh run truncates it;
/// a run resumed at step `resumedAt` (0-based: the first step it runs) keeps
/// the lines of the steps before and appends.
class JsonLog {
public:
  explicit JsonLog(const std::string &path, int64_t resumedAt = -1);
  ~JsonLog();
  void write(const StepRecord &r);

private:
  std::FILE *file = nullptr;
  std::string path;
};

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_STEPLOG_H
