//===- Options.cpp - the --pipemesh-compile="..." options ------------------===//
#include "pipemesh/Plan/Plan.h"
#include "pipemesh/Plan/Schedule.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringSet.h"

namespace pipemesh::plan {

std::optional<int64_t> parseByteSize(llvm::StringRef text) {
  static const std::pair<const char *, double> units[] = {
      {"TiB", 1024.0 * 1024 * 1024 * 1024}, {"GiB", 1024.0 * 1024 * 1024},
      {"MiB", 1024.0 * 1024}, {"KiB", 1024.0}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6},
      {"KB", 1e3}, {"B", 1}};
  double scale = 1;
  for (auto [suffix, factor] : units)
    if (text.consume_back(suffix)) {
      scale = factor;
      break;
    }
  double value;
  // Sizes past int64 (1e30GiB) or not numbers at all (nan) are not sizes.
  if (text.empty() || text.getAsDouble(value) || !(value >= 0) || !(value * scale < 0x1p63))
    return std::nullopt;
  return (int64_t)(value * scale);
}

bool parseCompileOptions(llvm::StringRef text, CompileOptions &opts, std::string &why) {
  llvm::SmallVector<llvm::StringRef> items;
  text.split(items, ' ', -1, /*KeepEmpty=*/false);
  llvm::StringSet<> given;
  for (llvm::StringRef item : items) {
    auto [key, value] = item.split('=');
    // "batch=2 ... batch=3" is a slip: neither value is clearly the meant one.
    if (!key.empty() && !given.insert(key).second) {
      why = "'" + key.str() + "' is given twice";
      return false;
    }
    auto setInt = [&](int64_t &dst) {
      if (value.getAsInteger(10, dst) || dst <= 0) {
        why = "'" + key.str() + "' needs a positive integer" +
              (key == "prefetch" ? std::string(" or auto") : std::string()) + ", got '" +
              value.str() + "'";
        return false;
      }
      return true;
    };
    if (key == "batch" ? !setInt(opts.batch)
        : key == "seq" ? !setInt(opts.seq)
        : key == "pp" ? !setInt(opts.pp)
        : key == "dp" ? !setInt(opts.dp)
        : key == "vpp" ? !setInt(opts.vpp)
        : key == "microbatches" ? !setInt(opts.microbatches)
        : key == "group" ? !setInt(opts.group)
        : key == "prefetch" && value != "auto" ? !setInt(opts.prefetch)
                         : false)
      return false;
    // "a,b,c" into non-negative integers.
    auto parseList = [&](std::vector<int64_t> &dst) {
      llvm::SmallVector<llvm::StringRef> parts;
      value.split(parts, ',');
      dst.clear();
      for (llvm::StringRef part : parts) {
        int64_t n;
        if (part.getAsInteger(10, n) || n < 0) {
          why = "'" + key.str() + "' needs a comma-separated list of counts, got '" +
                value.str() + "'";
          return false;
        }
        dst.push_back(n);
      }
      return true;
    };
    if (key == "schedule") {
      if (!parseScheduleKind(value)) {
        why = "schedule must be gpipe, 1f1b, interleaved, elastic, bfs, zb-h1 or zb-h2, got '" +
              value.str() + "'";
        return false;
      }
      opts.schedule = value.str();
    } else if (key == "zero") {
      // A level, a level per chunk, or auto.
      opts.zeroAuto = value == "auto";
      opts.zeroChunks.clear();
      if (!opts.zeroAuto) {
        std::vector<int64_t> levels;
        if (!parseList(levels) || levels.empty() ||
            llvm::any_of(levels, [](int64_t z) { return z > 3; })) {
          why = "zero must be 0, 1, 2 or 3, a comma-separated level per chunk, or auto, got '" +
                value.str() + "'";
          return false;
        }
        if (levels.size() == 1)
          opts.zero = levels[0];
        else
          opts.zeroChunks = levels, opts.zero = *llvm::max_element(levels);
      }
    } else if (key == "layers-per-stage") {
      if (!parseList(opts.layersPerStage))
        return false;
    } else if (key == "fwd-groups") {
      if (!parseList(opts.fwdGroups))
        return false;
    } else if (key == "bwd-groups") {
      if (!parseList(opts.bwdGroups))
        return false;
    } else if (key == "groups") {
      if (value != "auto") {
        why = "groups takes 'auto' (give explicit sizes with fwd-groups= and bwd-groups=), got '" +
              value.str() + "'";
        return false;
      }
      opts.autoGroups = true;
    } else if (key == "defer-w") {
      opts.deferW = parseDeferW(value);
      if (!opts.deferW) {
        why = "defer-w must be none, chunk, all or bucket, got '" + value.str() + "'";
        return false;
      }
    } else if (key == "cluster") {
      if (value.empty()) {
        why = "cluster needs a pipemesh-sim preset or a cluster JSON file";
        return false;
      }
      opts.cluster = value.str();
    } else if (key == "recompute") {
      if (!llvm::is_contained({"none", "selective", "full", "auto"}, value)) {
        why = "recompute must be none, selective, full or auto, got '" + value.str() + "'";
        return false;
      }
      opts.recompute = value.str();
    } else if (key == "mem-limit") {
      auto bytes = parseByteSize(value);
      if (!bytes || *bytes <= 0) {
        why = "mem-limit needs a size such as 40GiB or 512MiB, got '" + value.str() + "'";
        return false;
      }
      opts.memLimit = *bytes;
    } else if (key == "prefetch" && value == "auto") {
      opts.prefetchAuto = true;
    } else if (key == "activations") {
      if (value != "f32" && value != "bf16") {
        why = "activations must be f32 or bf16, got '" + value.str() + "'";
        return false;
      }
      opts.activations = value.str();
    } else if (key == "params") {
      if (value != "f32" && value != "bf16") {
        why = "params must be f32 or bf16, got '" + value.str() + "'";
        return false;
      }
      opts.params = value.str();
    } else if (key == "grad-reduce") {
      if (value != "f32" && value != "bf16") {
        why = "grad-reduce must be f32 or bf16, got '" + value.str() + "'";
        return false;
      }
      opts.gradReduce = value.str();
    } else if (key == "dp-collectives") {
      if (value != "flat" && value != "hierarchical") {
        why = "dp-collectives must be flat or hierarchical, got '" + value.str() + "'";
        return false;
      }
      opts.dpCollectives = value.str();
    } else if (key == "shapes-only") {
      if (!llvm::is_contained({"true", "false", "1", "0"}, value)) {
        why = "shapes-only must be true or false, got '" + value.str() + "'";
        return false;
      }
      opts.shapesOnly = value == "true" || value == "1";
    } else if (key == "labels") {
      if (value != "auto" && value != "next" && value != "same") {
        why = "labels must be auto, next or same, got '" + value.str() + "'";
        return false;
      }
      opts.labels = value.str();
    } else if (!llvm::is_contained({"batch", "seq", "pp", "dp", "vpp", "microbatches", "group",
                                    "prefetch"},
                                   key)) {
      why = "unknown option '" + key.str() + "'";
      return false;
    }
  }
  if (!opts.zeroChunks.empty() && (int64_t)opts.zeroChunks.size() != opts.pp * opts.vpp) {
    why = "zero lists " + std::to_string(opts.zeroChunks.size()) +
          " levels but pp * vpp = " + std::to_string(opts.pp * opts.vpp) + " chunks";
    return false;
  }
  if (opts.autoGroups && opts.schedule != "elastic") {
    why = "groups=auto is an option of schedule=elastic";
    return false;
  }
  if (opts.autoGroups && (!opts.fwdGroups.empty() || !opts.bwdGroups.empty())) {
    why = "groups=auto chooses fwd-groups and bwd-groups itself: give one or the other";
    return false;
  }
  if (!opts.batch || !opts.seq) {
    why = "batch=B and seq=T are required";
    return false;
  }
  if (!opts.layersPerStage.empty() &&
      (int64_t)opts.layersPerStage.size() != opts.pp * opts.vpp) {
    why = "layers-per-stage lists " + std::to_string(opts.layersPerStage.size()) +
          " chunks but pp * vpp = " + std::to_string(opts.pp * opts.vpp);
    return false;
  }
  return true;
}

} // namespace pipemesh::plan
