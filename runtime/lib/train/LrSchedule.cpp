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
  if (name == "linear")
    return LrScheduleKind::Linear;
  if (name == "wsd")
    return LrScheduleKind::Wsd;
  return std::nullopt;
}

const char *lrScheduleName(LrScheduleKind k) {
  switch (k) {
  case LrScheduleKind::Cosine:
    return "cosine";
  case LrScheduleKind::Linear:
    return "linear";
  case LrScheduleKind::Wsd:
    return "wsd";
  case LrScheduleKind::Constant:
    break;
  }
  return "constant";
}

double LrSchedule::at(int64_t s) const {
  if (s < warmupSteps)
    return lr * (double)(s + 1) / (double)warmupSteps;
  if (kind == LrScheduleKind::Constant)
    return lr;
  if (kind == LrScheduleKind::Wsd) {
    int64_t decayStart = totalSteps - decaySteps;
    if (s < decayStart || decaySteps <= 0)
      return lr;
    double q = std::min(1.0, (double)(s - decayStart) / (double)decaySteps);
    return lr - (lr - minLr) * q;
  }
  double p = (double)(s - warmupSteps) / (double)std::max<int64_t>(1, totalSteps - warmupSteps);
  p = std::min(1.0, p);
  if (kind == LrScheduleKind::Linear)
    return lr - (lr - minLr) * p;
  return minLr + 0.5 * (lr - minLr) * (1.0 + std::cos(M_PI * p));
}

} // namespace pipemesh::rt
