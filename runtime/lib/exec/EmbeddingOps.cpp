//===- EmbeddingOps.cpp - embedding and embedding_grad ----------------------===//
//
// ids may be i64 or i32 (converted to an i64 scratch). Every id is checked
// against the table's rows before the kernel runs, so a bad token is
// reported with its value and position rather than as a crash.
//
//===----------------------------------------------------------------------===//
#include "OpContext.h"
#include "OpUtils.h"

#include "pipemesh/runtime/CpuKernels.h"

#include <memory>

namespace pipemesh::rt {
namespace {

/// i64 view of an ids buffer (a scratch copy for i32), range-checked per call.
struct Ids {
  TensorRef t;
  std::shared_ptr<std::vector<int64_t>> scratch;
  int64_t V = 0;

  const int64_t *get() const {
    const int64_t *p = t.as<int64_t>();
    if (scratch) {
      const int32_t *q = t.as<int32_t>();
      for (int64_t i = 0; i < t.numel; ++i)
        (*scratch)[i] = q[i];
      p = scratch->data();
    }
    for (int64_t i = 0; i < t.numel; ++i)
      if (p[i] < 0 || p[i] >= V)
        fail("token id ", p[i], " at position ", i, " of ids buffer ", t.info->id,
             t.info->name.empty() ? "" : " '" + t.info->name + "'", " is out of range [0, ", V,
             ")");
    return p;
  }
};

Ids ids(OpContext &c, const TensorRef &t, int64_t V) {
  c.expectIndex(t, "the ids");
  Ids r{t, nullptr, V};
  if (t.dtype == DType::I32)
    r.scratch = std::make_shared<std::vector<int64_t>>(t.numel);
  return r;
}

Thunk bindEmbedding(OpContext &c) {
  c.expectCounts(2, 2, 1, 1);
  TensorRef table = c.in(0), y = c.out(0);
  c.expectFloat(table, "the table");
  c.expectFloat(y, "the result");
  if (table.rank() != 2)
    c.error("table ", shapeStr(table.shape), " must be 2-D [V, C]");
  int64_t V = table.shape[0], C = table.shape[1];
  Ids id = ids(c, c.in(1), V);
  Dims want = id.t.shape;
  want.push_back(C);
  c.expectShape(y, want, "the result");
  return [table, y, id, V, C] {
    const int64_t *p = id.get();
    if (!cpu::embedding<float>(table.as<float>(), p, y.as<float>(), id.t.numel, V, C))
      fail("token id out of range [0, ", V, ")");
  };
}

Thunk bindEmbeddingGrad(OpContext &c) {
  c.expectCounts(2, 2, 1, 1);
  TensorRef dy = c.in(0), dt = c.out(0);
  c.expectFloat(dy, "dy");
  c.expectFloat(dt, "dtable");
  if (dt.rank() != 2)
    c.error("dtable ", shapeStr(dt.shape), " must be 2-D [V, C]");
  int64_t V = dt.shape[0], C = dt.shape[1];
  Ids id = ids(c, c.in(1), V);
  Dims want = id.t.shape;
  want.push_back(C);
  c.expectShape(dy, want, "dy");
  // "accumulate": dtable is a parameter's gradient, into which the rows are
  // added times "scale" (the compiler's lowering of an embedding gradient
  // and its accumulation as one instruction).
  const bool accumulate = c.flag("accumulate", false);
  const float scale = (float)c.field("scale", 1.0);
  return [dy, dt, id, V, C, accumulate, scale] {
    const int64_t *p = id.get();
    cpu::embeddingGrad<float>(dy.as<float>(), p, dt.as<float>(), id.t.numel, V, C, accumulate,
                              scale);
  };
}

} // namespace

void registerEmbeddingOps(OpTable &t) {
  t["embedding"] = bindEmbedding;
  t["embedding_grad"] = bindEmbeddingGrad;
}

} // namespace pipemesh::rt
