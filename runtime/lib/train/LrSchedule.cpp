//===- LrSchedule.cpp - learning rate per step ------------------------------===//
#include "pipemesh/runtime/LrSchedule.h"

#include <algorithm>
#include <cmath>

namespace pipemesh::rt {

std::optional<LrScheduleKind> parseLrSchedule(const std::string &name) {
  if (name == "constant")
    return LrScheduleKind::Constant;
  if (name == "cosine")
    return LrScheduleKind::Cosine;
  return std::nullopt;
}

const char *lrScheduleName(LrScheduleKind k) {
  return k == LrScheduleKind::Cosine ? "cosine" : "constant";
}

double LrSchedule::at(int64_t s) const {
  if (s < warmupSteps)
    return lr * (double)(s + 1) / (double)warmupSteps;
  if (kind == LrScheduleKind::Constant)
    return lr;
  double p = (double)(s - warmupSteps) / (double)std::max<int64_t>(1, totalSteps - warmupSteps);
  p = std::min(1.0, p);
  return minLr + 0.5 * (lr - minLr) * (1.0 + std::cos(M_PI * p));
}

} // namespace pipemesh::rt
