//===- Arena.h - one rank's memory ------------------------------*- C++ -*-===//
//
// Exactly `arena_bytes` bytes, 64-byte aligned, zero-filled; every plan buffer
// is a view at its planned offset. load() copies the parameters' initial
// values and the constants from the plan's weights blob into their buffers.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_ARENA_H
#define PIPEMESH_RUNTIME_ARENA_H

#include "pipemesh/runtime/Plan.h"

#include <cstdint>

namespace pipemesh::rt {

/// A typed view of one buffer in the arena.
struct TensorRef {
  void *data = nullptr;
  DType dtype = DType::F32;
  Dims shape;
  int64_t numel = 0;
  const BufferInfo *info = nullptr;

  int64_t rank() const { return (int64_t)shape.size(); }
  uint64_t bytes() const { return (uint64_t)numel * dtypeSize(dtype); }
  template <typename T> T *as() const { return static_cast<T *>(data); }
};

class Arena {
public:
  Arena(const RankPlan &rank);
  /// A view of memory the caller owns and keeps alive (a device backend's
  /// allocation of `rank.arenaBytes`): not zeroed, not freed here.
  Arena(const RankPlan &rank, uint8_t *external);
  ~Arena();
  Arena(const Arena &) = delete;
  Arena &operator=(const Arena &) = delete;

  uint8_t *base() const { return memory; }
  uint64_t size() const { return bytes; }
  TensorRef tensor(int64_t bufferId) const;
  TensorRef tensor(const BufferInfo &b) const;

  /// Copies initial parameter values (safetensors entry = parameter name,
  /// sliced when the buffer holds a shard: see docs/plan-format.md) and
  /// constants (entry = the buffer's `data`) into their buffers.
  void loadInitialValues(const Plan &plan);

private:
  const RankPlan &rank;
  uint8_t *memory = nullptr;
  uint64_t bytes = 0;
  bool owned = true;
};

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_ARENA_H
