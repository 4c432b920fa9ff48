//===- Program.cpp - per-rank instruction streams for the simulator -------===//
#include "pipemesh/Sim/Program.h"

#include <algorithm>
#include <iterator>
#include <map>

using namespace pipemesh::sim;
using namespace pipemesh;

llvm::StringRef pipemesh::sim::workName(Work w) {
  switch (w) {
  case Work::Forward:
    return "forward";
  case Work::Backward:
    return "backward";
  case Work::WeightGrad:
    return "weight_grad";
  case Work::Recompute:
    return "recompute";
  case Work::Optimizer:
    return "optimizer";
  case Work::Other:
    return "other";
  }
  return "other";
}

Work pipemesh::sim::workOfAction(llvm::StringRef action) {
  // `<chunk><letter><microbatch>`: the first non-digit.
  size_t i = 0;
  while (i < action.size() && action[i] >= '0' && action[i] <= '9')
    ++i;
  if (i == 0 || i >= action.size())
    return Work::Other;
  switch (action[i]) {
  case 'F':
    return Work::Forward;
  case 'B':
    return Work::Backward;
  case 'W':
    return Work::WeightGrad;
  case 'R':
    return Work::Recompute;
  default:
    return Work::Other;
  }
}

Instr Instr::compute(double seconds, Work w, int32_t label) {
  Instr i;
  i.kind = OpKind::Compute;
  i.seconds = std::max(0.0, seconds);
  i.work = w;
  i.label = label;
  return i;
}

Instr Instr::kernel(double flops, double bytes, cost::KernelClass k, Work w, int32_t label) {
  Instr i;
  i.kind = OpKind::Compute;
  i.flops = flops;
  i.memBytes = bytes;
  i.kernelClass = k;
  i.work = w;
  i.label = label;
  return i;
}

Instr Instr::send(int32_t peer, int64_t tag, double bytes) {
  Instr i;
  i.kind = OpKind::Send;
  i.peer = peer;
  i.tag = tag;
  i.bytes = bytes;
  return i;
}

Instr Instr::recv(int32_t peer, int64_t tag, double bytes) {
  Instr i = send(peer, tag, bytes);
  i.kind = OpKind::Recv;
  return i;
}

Instr Instr::waitSends(int32_t keep) {
  Instr i;
  i.kind = OpKind::WaitSends;
  i.keep = keep;
  return i;
}

Instr Instr::collective(cost::Collective c, int32_t group, double bytes, bool async) {
  Instr i;
  i.kind = OpKind::Collective;
  i.coll = c;
  i.group = group;
  i.bytes = bytes;
  i.async = async;
  return i;
}

Instr Instr::wait(int32_t handle, int32_t keep) {
  Instr i;
  i.kind = OpKind::Wait;
  i.handle = handle;
  i.keep = keep;
  return i;
}

void pipemesh::sim::buildReplicas(Job &job, int64_t dp) {
  for (size_t base = 0; base < job.ranks.size(); base += dp)
    for (int64_t d = 1; d < dp && base + d < job.ranks.size(); ++d) {
      Program copy = job.ranks[base];
      copy.rank = (int32_t)(base + d);
      std::map<int32_t, int32_t> groupOf;
      for (Instr &in : copy.instrs) {
        if (in.kind == OpKind::Send || in.kind == OpKind::Recv)
          in.peer += (int32_t)d;
        if (in.kind == OpKind::Collective) {
          auto it = groupOf.find(in.group);
          if (it == groupOf.end()) {
            Group gr = job.groups[in.group];
            if (gr.name != "dp")
              for (int64_t &mbr : gr.members)
                mbr += d;
            it = groupOf.emplace(in.group, job.group(gr.name, gr.members)).first;
          }
          in.group = it->second;
        }
      }
      job.ranks[base + d] = std::move(copy);
    }
}

void pipemesh::sim::carryAsyncTailIntoStep(Program &program) {
  std::vector<Instr> &is = program.instrs;
  size_t lastWait = 0;
  for (size_t i = 0; i < is.size(); ++i)
    if (is[i].kind == OpKind::Wait)
      lastWait = i + 1;
  // Only collectives that touch no step-local memory can move (a gather of
  // persistent parameters): moving an allocation would change the peak.
  auto carried = [](const Instr &in) {
    return in.kind == OpKind::Collective && in.async && in.memPeak == 0 && in.memNet == 0;
  };
  std::vector<Instr> tail;
  std::copy_if(is.begin() + lastWait, is.end(), std::back_inserter(tail), carried);
  if (tail.empty())
    return;
  is.erase(std::remove_if(is.begin() + lastWait, is.end(), carried), is.end());
  is.insert(is.begin(), tail.begin(), tail.end());
  // Waits name earlier instructions, which all moved down by the tail.
  for (Instr &in : is)
    if (in.kind == OpKind::Wait && in.handle >= 0)
      in.handle += (int32_t)tail.size();
}

int32_t Program::label(llvm::StringRef name) {
  // Actions arrive in order and repeat in runs: look at the last few first.
  for (size_t k = labels.size(); k > 0 && labels.size() - k < 4; --k)
    if (labels[k - 1] == name)
      return (int32_t)k - 1;
  for (size_t k = 0; k < labels.size(); ++k)
    if (labels[k] == name)
      return (int32_t)k;
  labels.push_back(name.str());
  return (int32_t)labels.size() - 1;
}

int32_t Job::group(llvm::StringRef name, const std::vector<int64_t> &members) {
  for (size_t g = 0; g < groups.size(); ++g)
    if (groups[g].name == name && groups[g].members == members)
      return (int32_t)g;
  groups.push_back({name.str(), members});
  return (int32_t)groups.size() - 1;
}

void pipemesh::sim::mergeCompute(Job &job, const cost::Device &device) {
  for (Program &p : job.ranks) {
    std::vector<Instr> out;
    out.reserve(p.instrs.size());
    // Wait handles name instructions by index; collectives are never merged,
    // so each keeps a new index.
    std::vector<int32_t> newIndex(p.instrs.size(), -1);
    for (size_t k = 0; k < p.instrs.size(); ++k) {
      Instr in = p.instrs[k];
      if (in.kind == OpKind::Wait && in.handle >= 0 && (size_t)in.handle < k)
        in.handle = newIndex[in.handle];
      if (in.kind == OpKind::Compute && in.seconds < 0)
        in.seconds = device.time(in.opCost(), in.kernelClass);
      if (in.kind == OpKind::Compute && !out.empty()) {
        Instr &last = out.back();
        if (last.kind == OpKind::Compute && last.label == in.label && last.work == in.work) {
          last.seconds += in.seconds;
          last.flops += in.flops;
          last.memBytes += in.memBytes;
          last.memPeak = std::max(last.memPeak, last.memNet + in.memPeak);
          last.memNet += in.memNet;
          newIndex[k] = (int32_t)out.size() - 1;
          continue;
        }
      }
      newIndex[k] = (int32_t)out.size();
      out.push_back(in);
    }
    p.instrs = std::move(out);
  }
}

JobSize pipemesh::sim::jobSize(const Job &job) {
  JobSize s;
  for (const Program &p : job.ranks)
    for (const Instr &i : p.instrs) {
      ++s.instructions;
      s.compute += i.kind == OpKind::Compute;
    }
  return s;
}
