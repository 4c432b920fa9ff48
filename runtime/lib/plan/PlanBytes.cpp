//===- PlanBytes.cpp - which bytes of the arena an instruction touches ------===//

#include "pipemesh/runtime/PlanBytes.h"

namespace pipemesh::rt {

ByteRange bytesOf(const RankPlan &rank, int64_t bufferId) {
  const BufferInfo &b = rank.buffer(bufferId);
  return {b.offset, b.offset + b.bytes};
}

std::vector<ByteRange> namedBytes(const RankPlan &rank, const Instruction &inst) {
  std::vector<ByteRange> r;
  for (int64_t id : inst.in)
    r.push_back(bytesOf(rank, id));
  for (int64_t id : inst.out)
    r.push_back(bytesOf(rank, id));
  if (auto it = inst.json.find("bufs"); it != inst.json.end() && it->is_array())
    for (const auto &id : *it)
      if (id.is_number_integer())
        r.push_back(bytesOf(rank, id.get<int64_t>()));
  if (auto it = inst.json.find("params"); it != inst.json.end() && it->is_array())
    for (const auto &e : *it)
      for (const char *k : {"param", "grad", "m", "v"})
        if (e.is_object() && e.contains(k) && e[k].is_number_integer())
          r.push_back(bytesOf(rank, e[k].get<int64_t>()));
  return r;
}

bool deadAfter(const RankPlan &rank, size_t after, ByteRange bytes) {
  // The bytes no later instruction has rewritten yet.
  std::vector<ByteRange> live{bytes};
  for (size_t j = after + 1; j < rank.program.size() && !live.empty(); ++j) {
    const Instruction &later = rank.program[j];
    const std::vector<ByteRange> named = namedBytes(rank, later);
    const size_t outBegin = later.in.size(), outEnd = outBegin + later.out.size();
    for (size_t r = 0; r < named.size(); ++r) {
      const bool written = r >= outBegin && r < outEnd && !readsItsOutputs(later);
      if (written)
        continue;
      for (const ByteRange &l : live)
        if (named[r].overlaps(l))
          return false;
    }
    for (size_t r = outBegin; r < outEnd; ++r) {
      const ByteRange w = named[r];
      std::vector<ByteRange> rest;
      for (const ByteRange &l : live) {
        if (!w.overlaps(l)) {
          rest.push_back(l);
          continue;
        }
        if (l.begin < w.begin)
          rest.push_back({l.begin, w.begin});
        if (w.end < l.end)
          rest.push_back({w.end, l.end});
      }
      live = std::move(rest);
    }
  }
  return true;
}

} // namespace pipemesh::rt
