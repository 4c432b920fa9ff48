//===- LrSchedule.h - learning rate per step --------------------*- C++ -*-===//
//
// For step s (0-based) of S steps, base rate lr, W warmup steps, floor min_lr:
//   s <  W:                lr * (s + 1) / W
//   s >= W, constant:      lr
//   s >= W, cosine:        min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * p)),
//                          p = (s - W) / max(1, S - W)
//   s >= W, linear:        lr - (lr - min_lr) * p, the same p
//   s >= W, wsd:           warmup-stable-decay: lr until the last D decay steps
//                          (--decay-steps), then lr - (lr - min_lr) * q,
//                          q = (s - (S - D)) / D
// (llm.c's schedule; the last step's p is (S-1-W)/(S-W), slightly above
// min_lr, and so q.) Computed in double; AdamW receives it as is.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_LRSCHEDULE_H
#define PIPEMESH_RUNTIME_LRSCHEDULE_H

#include <cstdint>
#include <optional>
#include <string>

namespace pipemesh::rt {

enum class LrScheduleKind { Constant, Cosine, Linear, Wsd };
std::optional<LrScheduleKind> parseLrSchedule(const std::string &name);
const char *lrScheduleName(LrScheduleKind k);

struct LrSchedule {
  double lr = 1e-3;
  int64_t warmupSteps = 0;
  LrScheduleKind kind = LrScheduleKind::Constant;
  double minLr = 0;
  int64_t totalSteps = 1;
  int64_t decaySteps = 0; ///< wsd: the last steps, decaying linearly to minLr

  double at(int64_t step) const;
};

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_LRSCHEDULE_H
