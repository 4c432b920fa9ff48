//===- Executor.cpp - interprets one rank's program -------------------------===//
#include "pipemesh/runtime/Executor.h"

#include "OpContext.h"

#include "pipemesh/runtime/Activity.h"
#include "pipemesh/runtime/CpuKernels.h"
#include "pipemesh/runtime/Communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

namespace pipemesh::rt {

ExecEnv::ExecEnv(const Plan &plan, const RankPlan &rank, Arena &arena)
    : plan(plan), rank(rank), arena(arena) {}
ExecEnv::~ExecEnv() = default;

static std::string prefix(const ExecEnv &env, const Instruction &inst) {
  return concat("rank ", env.rank.rank, ", instruction ", inst.index, " (", inst.op, "): ");
}

/// The bf16 buffers of an instruction (each once), which the CPU kernels
/// see as f32 copies. Communication instructions move bytes as they are (or
/// only mark buffers): never staged.
static std::vector<int64_t> bf16Buffers(const RankPlan &rank, const Instruction &inst) {
  std::vector<int64_t> ids;
  if (isCommOp(inst.op))
    return ids;
  for (const std::vector<int64_t> *list : {&inst.in, &inst.out})
    for (int64_t id : *list)
      if (id >= 0 && id < (int64_t)rank.buffers.size() && rank.buffer(id).dtype == DType::BF16 &&
          std::find(ids.begin(), ids.end(), id) == ids.end())
        ids.push_back(id);
  return ids;
}

namespace {
/// A bf16 buffer an instruction sees as an f32 copy in the staging space.
struct StagedCopy {
  uint16_t *stored;
  float *staged;
  int64_t numel;
  bool read, written;
};
} // namespace

/// Points the instruction's bf16 operands (`ids`) at f32 copies laid out
/// from `space` (ctx.staged) and returns what to widen and round around it.
static std::vector<StagedCopy> stageBf16(const ExecEnv &env, const Instruction &inst,
                                         const std::vector<int64_t> &ids, OpContext &ctx,
                                         float *space) {
  std::vector<StagedCopy> copies;
  for (int64_t id : ids) {
    TensorRef t = env.arena.tensor(id);
    bool written = std::find(inst.out.begin(), inst.out.end(), id) != inst.out.end();
    bool read = !written || readsItsOutputs(inst) ||
                std::find(inst.in.begin(), inst.in.end(), id) != inst.in.end();
    copies.push_back({t.as<uint16_t>(), space, t.numel, read, written});
    t.data = space;
    t.dtype = DType::F32;
    ctx.staged[id] = t;
    space += t.numel;
  }
  return copies;
}

static Thunk withStaging(Thunk run, std::vector<StagedCopy> copies) {
  if (copies.empty())
    return run;
  return [run = std::move(run), copies = std::move(copies)] {
    for (const StagedCopy &c : copies)
      if (c.read)
        cpu::widenBf16Buffer(c.stored, c.staged, c.numel);
    run();
    for (const StagedCopy &c : copies)
      if (c.written)
        cpu::roundBf16Buffer(c.staged, c.stored, c.numel);
  };
}

Executor::Executor(ExecEnv &env) : env(env) {
  const OpTable &table = env.backend ? env.backend->ops() : opTable();
  // activations=bf16 on the CPU kernels: one staging space for the largest
  // instruction (instructions run one at a time). A device backend brings
  // its own handling of storage types.
  std::vector<std::vector<int64_t>> staged(env.rank.program.size());
  if (!env.backend) {
    int64_t most = 0;
    for (size_t i = 0; i < staged.size(); ++i) {
      staged[i] = bf16Buffers(env.rank, env.rank.program[i]);
      int64_t n = 0;
      for (int64_t id : staged[i])
        n += numElements(env.rank.buffer(id).shape);
      most = std::max(most, n);
    }
    bf16Staging.resize((size_t)most);
  }
  for (size_t i = 0; i < staged.size(); ++i) {
    const Instruction &inst = env.rank.program[i];
    auto it = table.find(inst.op);
    if (it == table.end())
      fail(prefix(env, inst), "unknown op '", inst.op,
           "' (this runtime does not implement it; see docs/plan-format.md for the op set)");
    OpContext ctx(env, inst);
    BoundInstruction b;
    b.inst = &inst;
    std::vector<StagedCopy> copies = stageBf16(env, inst, staged[i], ctx, bf16Staging.data());
    try {
      b.run = it->second(ctx);
    } catch (const Error &e) {
      throw Error(prefix(env, inst) + e.what());
    }
    // A plan from a newer compiler may carry an attribute or a field that
    // changes what the instruction does (attention's window did); running
    // without it would be silently wrong, so one no binder asked about is
    // refused.
    if (std::string unknown = ctx.firstUnasked(); !unknown.empty())
      fail(prefix(env, inst), unknown, " is unknown to this runtime's '", inst.op,
           "' (it may change what the instruction does; the plan may come from a newer "
           "compiler)");
    b.run = withStaging(std::move(b.run), std::move(copies));
    b.cls = ctx.cls;
    b.activity = concat("instruction ", inst.index, " (",
                        ctx.activity.empty() ? inst.op : ctx.activity, ")");
    program.push_back(std::move(b));
  }
}

void Executor::runStep(const std::vector<bool> *skips) {
  using clock = std::chrono::steady_clock;
  StepTimings t;
  const bool evaluating = skips != nullptr;
  if (evaluating && skips->size() != program.size())
    fail("rank ", env.rank.rank, ": evaluation skips for ", skips->size(),
         " instructions, the program has ", program.size());
  activity::setStep(evaluating ? -1 : env.state.step);
  for (size_t i = 0; i < program.size(); ++i) {
    BoundInstruction &b = program[i];
    if (evaluating && (*skips)[i]) {
      if (b.inst->op == "send")
        env.pendingSends.postSkipped();
      continue;
    }
    if (!evaluating && env.state.step == env.testExitStep && i == env.testExitInstruction) {
      std::fprintf(stderr,
                   "pipemesh-run: test: rank %lld exits with status 9 before instruction %zu of "
                   "step %lld (PIPEMESH_TEST_EXIT_AT_STEP)\n",
                   (long long)env.rank.rank, i, (long long)env.state.step + 1);
      std::fflush(stderr);
      std::_Exit(9);
    }
    activity::set(b.activity.c_str());
    const double embedded0 = env.state.commInComputeMs;
    auto start = clock::now();
    try {
      b.run();
      if (b.cls != InstrClass::Comm && !env.pendingSends.empty())
        env.pendingSends.progress();
    } catch (const UniformError &e) {
      throw UniformError(prefix(env, *b.inst) + e.what()); // every rank alike: rank 0 reports
    } catch (const Error &e) {
      throw Error(prefix(env, *b.inst) + e.what());
    }
    double ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
    if (!evaluating)
      b.totalMs += ms;
    if (b.cls == InstrClass::Comm) {
      t.commMs += ms;
    } else {
      double inner = env.state.commInComputeMs - embedded0;
      t.commMs += inner;
      (b.cls == InstrClass::Compute ? t.computeMs : t.controlMs) += ms - inner;
    }
  }
  if (!env.pendingSends.empty()) {
    // The plan should complete its sends with wait_sends; whatever is left is
    // completed here, so that no buffer is reused while still in flight.
    activity::set("the end of the step (completing outstanding sends)");
    auto start = clock::now();
    try {
      env.pendingSends.waitAllBut(0);
    } catch (const Error &e) {
      throw Error(concat("rank ", env.rank.rank, ", end of step ", env.state.step, ": ", e.what()));
    }
    t.commMs += std::chrono::duration<double, std::milli>(clock::now() - start).count();
  }
  if (env.backend) {
    // A device backend only enqueued the work: wait for it (bounded), and
    // collect the loss and the gradient norm. Counted as compute.
    activity::set("the end of the step (waiting for the device)");
    auto start = clock::now();
    try {
      env.backend->finishStep(env);
    } catch (const Error &e) {
      throw Error(concat("rank ", env.rank.rank, ", end of step ", env.state.step, ": ", e.what()));
    }
    t.computeMs += std::chrono::duration<double, std::milli>(clock::now() - start).count();
  }
  activity::set("the end of the step");
  lastTimings = t;
}

std::vector<int64_t> Executor::peers() const {
  std::set<int64_t> out;
  for (const BoundInstruction &b : program)
    if (b.inst->op == "send" || b.inst->op == "recv")
      out.insert(b.inst->json.at("peer").get<int64_t>());
  return {out.begin(), out.end()};
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

void Executor::resetProfile() {
  for (BoundInstruction &b : program)
    b.totalMs = 0;
}

std::vector<std::pair<std::string, double>> Executor::profileByShape(size_t top) const {
  // Same op on the same input shapes and attributes: one line (a GPT's
  // twelve layers fold into one line per GEMM of a layer).
  std::map<std::string, double> byKind;
  for (const BoundInstruction &b : program) {
    std::string key = b.inst->op;
    for (int64_t id : b.inst->in)
      key += " " + shapeStr(env.rank.buffer(id).shape);
    if (!b.inst->attrs.empty())
      key += " " + b.inst->attrs.dump();
    byKind[key] += b.totalMs;
  }
  std::vector<std::pair<std::string, double>> out(byKind.begin(), byKind.end());
  std::sort(out.begin(), out.end(),
            [](const auto &a, const auto &b) { return a.second > b.second; });
  if (out.size() > top)
    out.resize(top);
  return out;
}

std::vector<std::string> Executor::knownOps() {
  std::vector<std::string> names;
  for (const auto &kv : opTable())
    names.push_back(kv.first);
  return names;
}

} // namespace pipemesh::rt
