//===- StepLog.cpp - progress lines and the JSON step log -------------------===//
#include "pipemesh/runtime/StepLog.h"

#include "pipemesh/runtime/Error.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>

namespace pipemesh::rt {

std::string progressLine(const StepRecord &r) {
  char buf[256];
  char norm[32];
  if (r.hasGradNorm)
    std::snprintf(norm, sizeof norm, "%.3g", r.gradNorm);
  else
    std::snprintf(norm, sizeof norm, "-");
  std::snprintf(
      buf, sizeof buf, "step %lld/%lld | loss %.6f | lr %.2e | grad_norm %s | %.1f ms | %.0f tok/s",
      (long long)(r.step + 1), (long long)r.steps, r.loss, r.lr, norm, r.ms, r.tokensPerS);
  return buf;
}

/// JSON numbers must be finite; NaN/inf become null.
static nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

std::string jsonLine(const StepRecord &r) {
  nlohmann::json j;
  j["step"] = r.step;
  j["loss"] = num(r.loss);
  j["lr"] = num(r.lr);
  j["grad_norm"] = r.hasGradNorm ? num(r.gradNorm) : nlohmann::json();
  j["ms"] = num(r.ms);
  j["tokens_per_s"] = num(r.tokensPerS);
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t i = 0; i < r.ranks.size(); ++i)
    ranks.push_back({{"rank", (int64_t)i},
                     {"compute_ms", num(r.ranks[i].computeMs)},
                     {"comm_ms", num(r.ranks[i].commMs)},
                     {"idle_ms", num(r.ranks[i].idleMs)}});
  j["ranks"] = ranks;
  return j.dump();
}

JsonLog::JsonLog(const std::string &p) : path(p) {
  file = std::fopen(p.c_str(), "w");
  if (!file)
    fail("cannot open --log-json file '", p, "': ", std::strerror(errno));
}

JsonLog::~JsonLog() {
  if (file)
    std::fclose(file);
}

void JsonLog::write(const StepRecord &r) {
  std::string line = jsonLine(r) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file) != line.size() || std::fflush(file) != 0)
    fail("cannot write --log-json file '", path, "': ", std::strerror(errno));
}

} // namespace pipemesh::rt
