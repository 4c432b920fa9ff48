//===- Arena.cpp - one rank's memory ---------------------------------------===//
#include "pipemesh/runtime/Arena.h"

#include "pipemesh/runtime/CpuKernels.h"
#include "pipemesh/runtime/Error.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <sys/mman.h>

namespace pipemesh::rt {

Arena::Arena(const RankPlan &rank) : rank(rank), bytes(rank.arenaBytes) {
  // Anonymous pages are zero and cost nothing until touched: a device backend's
  // host mirror only ever touches the buffers that hold state (parameters,
  // moments, constants), not the tens of GB of activations a large plan
  // reserves (memset would fault in every page at start-up). Page-aligned, so
  // kArenaAlignment holds.
  static_assert(kArenaAlignment <= 4096, "mmap gives page alignment");
  void *p = mmap(nullptr, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
  if (p == MAP_FAILED)
    fail("cannot allocate the ", bytes, "-byte arena of rank ", rank.rank, ": ",
         std::strerror(errno));
  memory = static_cast<uint8_t *>(p);
}

Arena::Arena(const RankPlan &rank, uint8_t *external)
    : rank(rank), memory(external), bytes(rank.arenaBytes), owned(false) {}

Arena::~Arena() {
  if (owned)
    munmap(memory, bytes ? bytes : 1);
}

TensorRef Arena::tensor(const BufferInfo &b) const {
  TensorRef t;
  t.data = memory + b.offset;
  t.dtype = b.dtype;
  t.shape = b.shape;
  t.numel = b.numel;
  t.info = &b;
  return t;
}

TensorRef Arena::tensor(int64_t bufferId) const { return tensor(rank.buffer(bufferId)); }

/// Copies elements [first, first + b.numel) of `e` into buffer `b`; elements
/// past the entry's end stay zero (the padding of a last shard). Element types
/// must agree (BOOL or U8 for i1), but for a bf16 copy of an F32 parameter,
/// which is rounded.
static void copyEntry(const SafetensorsEntry &e, const std::string &entryName, const BufferInfo &b,
                      uint8_t *dst, int64_t first, int64_t rankId) {
  std::string want = safetensorsDType(b.dtype);
  if (b.kind == BufferKind::ParamCopy && e.dtype == "F32") {
    int64_t n = std::max<int64_t>(0, std::min<int64_t>(b.numel, (int64_t)(e.bytes / 4) - first));
    // Arena buffers are aligned; the mapped entries need not be.
    cpu::roundBf16Unaligned(e.data + (uint64_t)first * 4, reinterpret_cast<uint16_t *>(dst), n);
    return;
  }
  if (!(e.dtype == want || (b.dtype == DType::I1 && e.dtype == "U8")))
    fail("plan weights entry '", entryName, "' is ", e.dtype, " but buffer ", b.id, " '", b.name,
         "' of rank ", rankId, " is ", dtypeName(b.dtype));
  size_t es = dtypeSize(b.dtype);
  int64_t n = std::max<int64_t>(0, std::min<int64_t>(b.numel, (int64_t)(e.bytes / es) - first));
  if (n > 0)
    std::memcpy(dst, e.data + (uint64_t)first * es, (uint64_t)n * es);
  if (b.dtype == DType::I1)
    for (int64_t i = 0; i < n; ++i)
      dst[i] = dst[i] != 0;
}

void Arena::loadInitialValues(const Plan &plan) {
  for (const BufferInfo &b : rank.buffers) {
    if (b.kind == BufferKind::Param || b.kind == BufferKind::ParamCopy) {
      const SafetensorsEntry *e = plan.weights.find(b.param);
      if (!e)
        fail("plan '", plan.path, "' has no initial value for parameter '", b.param,
             "' (no weights entry of that name)");
      const ParamInfo *pi = plan.findParam(b.param);
      if (e->shape != pi->shape)
        fail("plan weights entry '", b.param, "' has shape ", shapeStr(e->shape),
             " but the parameter has shape ", shapeStr(pi->shape));
      copyEntry(*e, b.param, b, memory + b.offset, b.elemOffset, rank.rank);
    } else if (b.kind == BufferKind::Constant) {
      const SafetensorsEntry *e = plan.weights.find(b.data);
      if (!e)
        fail("plan '", plan.path, "' has no weights entry '", b.data, "' for constant buffer ",
             b.id, " '", b.name, "'");
      if (numElements(e->shape) != b.numel)
        fail("plan weights entry '", b.data, "' has shape ", shapeStr(e->shape),
             " but constant buffer ", b.id, " '", b.name, "' has shape ", shapeStr(b.shape));
      copyEntry(*e, b.data, b, memory + b.offset, 0, rank.rank);
    }
  }
}

} // namespace pipemesh::rt
