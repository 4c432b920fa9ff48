//===- Executor.cpp - interprets one rank's program -------------------------===//
#include "pipemesh/runtime/Executor.h"

#include "OpContext.h"

#include <algorithm>
#include <chrono>
#include <map>

namespace pipemesh::rt {

static std::string prefix(const ExecEnv &env, const Instruction &inst) {
  return concat("rank ", env.rank.rank, ", instruction ", inst.index, " (", inst.op, "): ");
}

Executor::Executor(ExecEnv &env) : env(env) {
  const OpTable &table = opTable();
  for (const Instruction &inst : env.rank.program) {
    auto it = table.find(inst.op);
    if (it == table.end())
      fail(prefix(env, inst), "unknown op '", inst.op,
           "' (this runtime does not implement it; see docs/plan-format.md for the op set)");
    OpContext ctx(env, inst);
    BoundInstruction b;
    b.inst = &inst;
    try {
      b.run = it->second(ctx);
    } catch (const Error &e) {
      throw Error(prefix(env, inst) + e.what());
    }
    b.cls = ctx.cls;
    program.push_back(std::move(b));
  }
}

void Executor::runStep() {
  using clock = std::chrono::steady_clock;
  StepTimings t;
  for (BoundInstruction &b : program) {
    auto start = clock::now();
    try {
      b.run();
    } catch (const Error &e) {
      throw Error(prefix(env, *b.inst) + e.what());
    }
    double ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
    b.totalMs += ms;
    (b.cls == InstrClass::Compute ? t.computeMs
     : b.cls == InstrClass::Comm  ? t.commMs
                                  : t.controlMs) += ms;
  }
  lastTimings = t;
}

std::vector<std::pair<std::string, double>> Executor::profile() const {
  std::map<std::string, double> byOp;
  for (const BoundInstruction &b : program)
    byOp[b.inst->op] += b.totalMs;
  std::vector<std::pair<std::string, double>> out(byOp.begin(), byOp.end());
  std::sort(out.begin(), out.end(),
            [](const auto &a, const auto &b) { return a.second > b.second; });
  return out;
}

std::vector<std::string> Executor::knownOps() {
  std::vector<std::string> names;
  for (const auto &kv : opTable())
    names.push_back(kv.first);
  return names;
}

} // namespace pipemesh::rt
