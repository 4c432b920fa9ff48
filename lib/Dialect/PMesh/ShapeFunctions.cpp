//===- ShapeFunctions.cpp - result shapes of pmesh ops ----------------------===//
#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MathExtras.h"

namespace pipemesh::shapes {

std::string str(llvm::ArrayRef<int64_t> shape) {
  if (shape.empty())
    return "scalar";
  std::string s;
  for (auto [i, d] : llvm::enumerate(shape)) {
    if (i)
      s += "x";
    s += std::to_string(d);
  }
  return s;
}

int64_t numElements(llvm::ArrayRef<int64_t> shape) {
  // Saturates instead of overflowing: callers that accept untrusted shapes
  // (the importer) reject anything this large.
  int64_t n = 1;
  for (int64_t d : shape)
    if (llvm::MulOverflow(n, d, n))
      return INT64_MAX;
  return n;
}

std::optional<int64_t> checkedNumElements(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || llvm::MulOverflow(n, d, n))
      return std::nullopt;
  return n;
}

std::string list(llvm::ArrayRef<int64_t> values) {
  std::string s = "[";
  for (auto [i, v] : llvm::enumerate(values)) {
    if (i)
      s += ", ";
    s += std::to_string(v);
  }
  return s + "]";
}

std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

OptShape broadcast(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b, std::string &why) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      why = "shapes " + str(a) + " and " + str(b) + " do not broadcast (dim " +
            std::to_string(i) + ": " + std::to_string(da) + " vs " + std::to_string(db) + ")";
      return std::nullopt;
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcastsTo(llvm::ArrayRef<int64_t> from, llvm::ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return false;
  size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[off + i])
      return false;
  return true;
}

OptShape matmul(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b, bool transA, bool transB,
                std::string &why) {
  if (a.size() < 2 || b.size() < 2) {
    why = "matmul operands must have rank >= 2, got " + str(a) + " and " + str(b);
    return std::nullopt;
  }
  int64_t m = a[a.size() - 2], ka = a.back();
  if (transA)
    std::swap(m, ka);
  int64_t kb = b[b.size() - 2], n = b.back();
  if (transB)
    std::swap(kb, n);
  if (ka != kb) {
    why = "contracting dims differ: " + str(a) + (transA ? "^T" : "") + " @ " + str(b) +
          (transB ? "^T" : "") + " (" + std::to_string(ka) + " vs " + std::to_string(kb) + ")";
    return std::nullopt;
  }
  auto batch = broadcast(a.drop_back(2), b.drop_back(2), why);
  if (!batch) {
    why = "matmul batch dims: " + why;
    return std::nullopt;
  }
  batch->push_back(m);
  batch->push_back(n);
  return batch;
}

OptShape reduce(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> axes, bool keepdims,
                std::string &why) {
  llvm::SmallVector<bool> reduced(in.size(), false);
  for (int64_t ax : axes) {
    auto n = normalizeAxis(ax, in.size());
    if (!n) {
      why = "reduction axis " + std::to_string(ax) + " out of range for shape " + str(in);
      return std::nullopt;
    }
    if (reduced[*n]) {
      why = "reduction axes " + list(axes) + " name dim " + std::to_string(*n) +
            " more than once (shape " + str(in) + ")";
      return std::nullopt;
    }
    reduced[*n] = true;
  }
  Shape out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!reduced[i])
      out.push_back(in[i]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

OptShape transpose(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> perm, std::string &why) {
  if (perm.size() != in.size()) {
    why = "perm " + list(perm) + " has " + std::to_string(perm.size()) +
          " entries but the input " + str(in) + " has rank " + std::to_string(in.size());
    return std::nullopt;
  }
  llvm::SmallVector<bool> seen(in.size(), false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= (int64_t)in.size() || seen[p]) {
      why = "perm " + list(perm) + " is not a permutation of 0.." +
            std::to_string(in.size() - 1) + " (input " + str(in) + ")";
      return std::nullopt;
    }
    seen[p] = true;
    out.push_back(in[p]);
  }
  return out;
}

OptShape concat(llvm::ArrayRef<Shape> ins, int64_t axis, std::string &why) {
  if (ins.empty()) {
    why = "concat needs at least one input";
    return std::nullopt;
  }
  auto ax = normalizeAxis(axis, ins[0].size());
  if (!ax) {
    why = "concat axis " + std::to_string(axis) + " out of range for rank " +
          std::to_string(ins[0].size());
    return std::nullopt;
  }
  Shape out(ins[0]);
  for (size_t i = 1; i < ins.size(); ++i) {
    if (ins[i].size() != out.size()) {
      why = "concat inputs differ in rank: " + str(ins[0]) + " and " + str(ins[i]);
      return std::nullopt;
    }
    for (size_t d = 0; d < out.size(); ++d) {
      if ((int64_t)d == *ax)
        continue;
      if (ins[i][d] != out[d]) {
        why = "concat inputs differ outside axis " + std::to_string(*ax) + ": " + str(ins[0]) +
              " and " + str(ins[i]);
        return std::nullopt;
      }
    }
    if (llvm::AddOverflow(out[*ax], ins[i][*ax], out[*ax])) {
      why = "concat size along axis " + std::to_string(*ax) + " overflows int64";
      return std::nullopt;
    }
  }
  return out;
}

std::optional<llvm::SmallVector<Shape>> split(llvm::ArrayRef<int64_t> in, int64_t axis,
                                              llvm::ArrayRef<int64_t> sizes, std::string &why) {
  auto ax = normalizeAxis(axis, in.size());
  if (!ax) {
    why = "split axis " + std::to_string(axis) + " out of range for shape " + str(in);
    return std::nullopt;
  }
  if (sizes.empty()) {
    why = "split of " + str(in) + " needs at least one size";
    return std::nullopt;
  }
  int64_t total = 0;
  bool overflow = false;
  llvm::SmallVector<Shape> outs;
  for (int64_t s : sizes) {
    if (s < 0) {
      why = "split size " + std::to_string(s) + " is negative";
      return std::nullopt;
    }
    overflow |= llvm::AddOverflow(total, s, total);
    Shape piece(in);
    piece[*ax] = s;
    outs.push_back(piece);
  }
  if (overflow) {
    why = "split sizes " + list(sizes) + " overflow";
    return std::nullopt;
  }
  if (total != in[*ax]) {
    why = "split sizes " + list(sizes) + " sum to " + std::to_string(total) + " but dim " +
          std::to_string(*ax) + " of " + str(in) + " is " + std::to_string(in[*ax]);
    return std::nullopt;
  }
  return outs;
}

OptShape slice(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> starts,
               llvm::ArrayRef<int64_t> limits, llvm::ArrayRef<int64_t> strides,
               std::string &why) {
  if (starts.size() != in.size() || limits.size() != in.size() || strides.size() != in.size()) {
    why = "slice needs one start, limit and stride per dim of " + str(in);
    return std::nullopt;
  }
  Shape out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (strides[i] <= 0) {
      why = "slice stride must be positive (dim " + std::to_string(i) + ")";
      return std::nullopt;
    }
    if (starts[i] < 0 || limits[i] > in[i] || starts[i] > limits[i]) {
      why = "slice [" + std::to_string(starts[i]) + ":" + std::to_string(limits[i]) +
            "] out of bounds for dim " + std::to_string(i) + " of size " + std::to_string(in[i]);
      return std::nullopt;
    }
    // ceil((limit - start) / stride), written so a huge stride cannot overflow.
    int64_t span = limits[i] - starts[i];
    out.push_back(span == 0 ? 0 : (span - 1) / strides[i] + 1);
  }
  return out;
}

int64_t attentionHeadGroup(llvm::ArrayRef<int64_t> q, llvm::ArrayRef<int64_t> kv) {
  if (q.size() < 2 || kv.size() != q.size())
    return 0;
  llvm::ArrayRef<int64_t> qLead = q.drop_back(2), lead = kv.drop_back(2);
  if (lead == qLead)
    return 1;
  if (lead.drop_back() != qLead.drop_back() || lead.back() <= 0 || qLead.back() % lead.back())
    return 0;
  return qLead.back() / lead.back();
}

OptShape attention(llvm::ArrayRef<int64_t> q, llvm::ArrayRef<int64_t> k, llvm::ArrayRef<int64_t> v,
                   std::optional<llvm::ArrayRef<int64_t>> mask, std::string &why) {
  if (q.size() < 2 || q.size() != k.size() || q.size() != v.size()) {
    why = "attention q, k, v must have equal rank >= 2: " + str(q) + ", " + str(k) + ", " + str(v);
    return std::nullopt;
  }
  size_t r = q.size();
  if (!attentionHeadGroup(q, k) || !attentionHeadGroup(q, v)) {
    why = "attention leading dims of k and v must be q's, or q's with the last (the heads) "
          "divided by a group size: " +
          str(q) + ", " + str(k) + ", " + str(v);
    return std::nullopt;
  }
  if (q[r - 1] != k[r - 1]) {
    why = "attention head dims of q and k differ: " + str(q) + " vs " + str(k);
    return std::nullopt;
  }
  if (k[r - 2] != v[r - 2]) {
    why = "attention key and value lengths differ: " + str(k) + " vs " + str(v);
    return std::nullopt;
  }
  Shape out(q.begin(), q.end());
  out[r - 1] = v[r - 1];
  if (mask) {
    Shape scores(q.begin(), q.end());
    scores[r - 1] = k[r - 2];
    if (!broadcastsTo(*mask, scores)) {
      why = "attention mask " + str(*mask) + " does not broadcast to the scores " + str(scores);
      return std::nullopt;
    }
  }
  return out;
}

OptShape embedding(llvm::ArrayRef<int64_t> table, llvm::ArrayRef<int64_t> ids, std::string &why) {
  if (table.size() != 2) {
    why = "embedding table must be 2-D, got " + str(table);
    return std::nullopt;
  }
  Shape out(ids.begin(), ids.end());
  out.push_back(table[1]);
  return out;
}

OptShape crossEntropy(llvm::ArrayRef<int64_t> logits, llvm::ArrayRef<int64_t> targets,
                      llvm::StringRef reduction, std::string &why) {
  if (logits.size() < 1 || logits.drop_back() != targets) {
    why = "cross_entropy logits " + str(logits) + " do not match targets " + str(targets) +
          " (expected [N..., V] and [N...])";
    return std::nullopt;
  }
  if (reduction == "none")
    return Shape(targets.begin(), targets.end());
  if (reduction == "mean" || reduction == "sum")
    return Shape{};
  why = "unknown reduction '" + reduction.str() + "' (expected mean, sum or none)";
  return std::nullopt;
}

bool layerNorm(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> scale,
               std::optional<llvm::ArrayRef<int64_t>> bias, int64_t axis, std::string &why) {
  auto ax = normalizeAxis(axis, in.size());
  if (!ax) {
    why = "layer_norm axis " + std::to_string(axis) + " out of range for shape " + str(in);
    return false;
  }
  llvm::ArrayRef<int64_t> normalized = in.drop_front(*ax);
  if (!broadcastsTo(scale, normalized)) {
    why = "layer_norm scale " + str(scale) + " does not match normalized dims " + str(normalized);
    return false;
  }
  if (bias && !broadcastsTo(*bias, normalized)) {
    why = "layer_norm bias " + str(*bias) + " does not match normalized dims " + str(normalized);
    return false;
  }
  return true;
}

} // namespace pipemesh::shapes
