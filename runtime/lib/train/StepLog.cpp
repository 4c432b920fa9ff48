//===- StepLog.cpp - progress lines and the JSON step log -------------------===//
#include "pipemesh/runtime/StepLog.h"

#include "pipemesh/runtime/AtomicFile.h"
#include "pipemesh/runtime/Error.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>

namespace pipemesh::rt {

std::string progressLine(const StepRecord &r) {
  char buf[256];
  char norm[32];
  if (r.hasGradNorm)
    std::snprintf(norm, sizeof norm, "%.3g", unsignedNan(r.gradNorm));
  else
    std::snprintf(norm, sizeof norm, "-");
  int n = std::snprintf(
      buf, sizeof buf, "step %lld/%lld | loss %.6f | lr %.2e | grad_norm %s | %.1f ms | %.0f tok/s",
      (long long)(r.step + 1), (long long)r.steps, unsignedNan(r.loss), r.lr, norm,
      r.ms, r.tokensPerS);
  if (r.tflopsPerRank > 0 && n > 0 && n < (int)sizeof buf)
    n += r.tflopsPerRank >= 1
             ? std::snprintf(buf + n, sizeof buf - n, " | %.1f TFLOP/s/rank", r.tflopsPerRank)
             : std::snprintf(buf + n, sizeof buf - n, " | %.3g GFLOP/s/rank",
                             1e3 * r.tflopsPerRank);
  if (std::isfinite(r.mfu) && n > 0 && n < (int)sizeof buf)
    std::snprintf(buf + n, sizeof buf - n, " | MFU %.1f%%", 100.0 * r.mfu);
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
  if (r.tflopsPerRank > 0)
    j["tflops_per_rank"] = num(r.tflopsPerRank);
  if (std::isfinite(r.mfu))
    j["mfu"] = r.mfu;
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t i = 0; i < r.ranks.size(); ++i)
    ranks.push_back({{"rank", (int64_t)i},
                     {"compute_ms", num(r.ranks[i].computeMs)},
                     {"comm_ms", num(r.ranks[i].commMs)},
                     {"idle_ms", num(r.ranks[i].idleMs)}});
  j["ranks"] = ranks;
  return j.dump();
}

std::string progressLine(const EvalRecord &r) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "eval after step %lld/%lld | val loss %.6f | %lld %s, %lld tokens | %.1f ms",
                (long long)(r.step + 1), (long long)r.steps, unsignedNan(r.valLoss), (long long)r.batches,
                r.batches == 1 ? "batch" : "batches", (long long)r.tokens, r.ms);
  return buf;
}

std::string jsonLine(const EvalRecord &r) {
  nlohmann::json j;
  j["step"] = r.step;
  j["val_loss"] = num(r.valLoss);
  j["val_batches"] = r.batches;
  j["val_tokens"] = r.tokens;
  j["ms"] = num(r.ms);
  return j.dump();
}

JsonLog::JsonLog(const std::string &p, int64_t resumedAt) : path(p) {
  if (resumedAt >= 0) {
    // The steps before the checkpoint stay; lines of steps the resumed run
    // redoes (the interrupted run went past its last checkpoint) and a
    // line cut short by the interruption go. Rewritten atomically, so an
    // interruption now loses nothing either.
    std::string kept;
    if (std::FILE *in = std::fopen(p.c_str(), "r")) {
      char *line = nullptr;
      size_t cap = 0;
      ssize_t n;
      while ((n = getline(&line, &cap, in)) > 0) {
        std::string text(line, (size_t)n);
        nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
        if (text.back() == '\n' && j.is_object() && j.contains("step") &&
            j["step"].is_number_integer() && j["step"].get<int64_t>() < resumedAt) {
          kept += text;
        }
      }
      std::free(line);
      std::fclose(in);
    }
    writeFileAtomically(p, kept, "--log-json file");
  }
  file = std::fopen(p.c_str(), resumedAt >= 0 ? "a" : "w");
  if (!file)
    fail("cannot open --log-json file '", p, "': ", std::strerror(errno));
}

JsonLog::~JsonLog() {
  if (file)
    std::fclose(file);
}

void JsonLog::writeLine(const std::string &json) {
  std::string line = json + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file) != line.size() || std::fflush(file) != 0)
    fail("cannot write --log-json file '", path, "': ", std::strerror(errno));
}

} // namespace pipemesh::rt
