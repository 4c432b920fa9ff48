//===- Evaluation.cpp - validation loss from the training program ------------===//
#include "pipemesh/runtime/Evaluation.h"

#include "OpContext.h"

#include "pipemesh/runtime/Error.h"

#include <cctype>
#include <iterator>
#include <map>
#include <optional>
#include <tuple>

namespace pipemesh::rt {
namespace {

/// The phase letter of an instruction's schedule action ("12B3" -> 'B',
/// "0W1.2" -> 'W'); 0 without one (zero, adamw, waits between actions).
char phaseOf(const Instruction &inst) {
  auto it = inst.json.find("action");
  if (it == inst.json.end() || !it->is_string())
    return 0;
  const std::string &a = it->get_ref<const std::string &>();
  size_t i = 0;
  while (i < a.size() && std::isdigit((unsigned char)a[i]))
    ++i;
  return i < a.size() ? a[i] : 0;
}

bool skippedByEvaluation(const RankPlan &r, const Instruction &inst) {
  if (inst.op == "adamw")
    return true;
  // Reductions (gradients): every member of every group skips all of them,
  // so each communicator still sees its remaining collectives in one order;
  // the CPU backend completes collectives where they are issued, so no
  // wait_collectives counts on them.
  if (inst.op == "allreduce" || inst.op == "reduce_scatter")
    return true;
  if (isCommOp(inst.op))
    return false;
  char phase = phaseOf(inst);
  if (phase == 'B' || phase == 'W' || phase == 'R')
    return true;
  // Between actions: what adds reduced gradients into a ZeRO shard.
  bool onlyGradients = !inst.out.empty();
  for (int64_t id : inst.out)
    onlyGradients = onlyGradients && r.buffer(id).kind == BufferKind::Grad;
  return onlyGradients;
}

/// A send or receive as MPI matches it: (sender, receiver, tag), and which
/// of the simulated program runs it belongs to.
using Channel = std::tuple<int64_t, int64_t, int64_t, size_t>;
/// Per channel, in program order: whether each send carries a stale value.
using SendStaleness = std::map<Channel, std::vector<bool>>;

/// The runs simulated back to back from a fresh start (after a step, or the
/// start-up): repeated evaluations, then training steps after evaluations.
/// Staleness persists from run to run (the arena does), so a value an
/// evaluation left stale that a later run reads before writing it is found.
constexpr bool kRunIsEvaluation[] = {true, true, false, true, false};

struct Verdict {
  SendStaleness sends;
  /// The first instruction that reads a stale value it must not.
  std::optional<std::string> problem;
  bool evaluatesLoss = false;
};

int64_t field(const Instruction &inst, const char *key) {
  auto it = inst.json.find(key);
  return it != inst.json.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

std::string actionOf(const Instruction &i) {
  auto a = i.json.find("action");
  return a != i.json.end() && a->is_string() ? ", action " + a->get<std::string>() : "";
}

/// The runs of one listed program; `received` says which sends (by channel
/// and order) carried stale values in the previous pass.
void follow(const RankPlan &r, const SendStaleness &received, Verdict &out) {
  // A view shares its owner's memory: staleness is the owner's.
  auto owner = [&](int64_t id) {
    const BufferInfo &b = r.buffer(id);
    return b.aliasOf >= 0 ? b.aliasOf : id;
  };
  struct Writer {
    size_t instr, run;
  };
  std::map<int64_t, Writer> staleBy; // owner buffer -> the writer that left it stale
  for (size_t run = 0; run < std::size(kRunIsEvaluation); ++run) {
    const bool evaluating = kRunIsEvaluation[run];
    std::map<Channel, size_t> recvCount;
    auto markStale = [&](int64_t id, bool stale, size_t instr) {
      if (stale)
        staleBy[owner(id)] = {instr, run};
      else
        staleBy.erase(owner(id));
    };
    auto isStale = [&](int64_t id) { return staleBy.count(owner(id)) > 0; };
    for (const Instruction &inst : r.program) {
      if (evaluating && skippedByEvaluation(r, inst)) {
        for (int64_t id : inst.out)
          markStale(id, true, inst.index);
        continue;
      }
      if (evaluating && inst.op == "loss")
        out.evaluatesLoss = true;
      // What the instruction reads. An evaluation may move stale values
      // (its communication runs whole); a kernel must not read one, nor
      // may anything in a training step.
      std::vector<int64_t> reads = inst.in;
      if (readsItsOutputs(inst))
        reads.insert(reads.end(), inst.out.begin(), inst.out.end());
      if (!(evaluating && isCommOp(inst.op)) && !out.problem)
        for (int64_t id : reads)
          if (isStale(id)) {
            Writer w = staleBy[owner(id)];
            out.problem = concat(
                "rank ", r.rank, ", instruction ", inst.index, " (", inst.op, actionOf(inst),
                ") of ", evaluating ? "an evaluation" : "a training step after one",
                " reads buffer %", id, " '", r.buffer(id).name,
                "', which the evaluation does not compute (left by instruction ", w.instr, " (",
                r.program[w.instr].op, actionOf(r.program[w.instr]), ") of ",
                kRunIsEvaluation[w.run] ? "an evaluation" : "a training step", ")");
            break;
          }
      if (inst.op == "send") {
        bool stale = !inst.in.empty() && isStale(inst.in[0]);
        out.sends[{r.rank, field(inst, "peer"), field(inst, "tag"), run}].push_back(stale);
        continue;
      }
      if (inst.op == "recv") {
        Channel ch{field(inst, "peer"), r.rank, field(inst, "tag"), run};
        size_t k = recvCount[ch]++;
        auto it = received.find(ch);
        bool stale = it != received.end() && k < it->second.size() && it->second[k];
        for (int64_t id : inst.out)
          markStale(id, stale, inst.index);
        continue;
      }
      if (isCommOp(inst.op)) {
        // Replicas hold alike what a dp-group gather moves; an evaluation's
        // reductions (gradients) and other groups' collectives are stale.
        auto g = inst.json.find("group");
        bool dpGather = inst.op == "allgather" && g != inst.json.end() && *g == "dp";
        bool anyStaleIn = false;
        for (int64_t id : inst.in)
          anyStaleIn = anyStaleIn || isStale(id);
        for (size_t i = 0; i < inst.out.size(); ++i) {
          bool stale = evaluating && !dpGather;
          if (dpGather)
            stale = i < inst.in.size() && isStale(inst.in[i]);
          else if (!evaluating)
            stale = anyStaleIn;
          markStale(inst.out[i], stale, inst.index);
        }
        continue;
      }
      for (int64_t id : inst.out)
        markStale(id, false, inst.index);
    }
  }
}

} // namespace

std::vector<bool> evaluationSkips(const Plan &plan, const RankPlan &rank) {
  // Staleness only grows from pass to pass (a stale send makes its receive
  // stale, which may make a later send stale): iterate to the fixed point,
  // at most one pass per listed program beyond the first.
  SendStaleness received;
  Verdict v;
  for (size_t pass = 0; pass <= plan.listed.size() + 1; ++pass) {
    v = Verdict();
    for (const RankPlan &r : plan.listed)
      follow(r, received, v);
    if (v.sends == received)
      break;
    received = v.sends;
  }
  if (v.problem)
    throw UniformError(concat("plan '", plan.path, "': evaluation (--val-data) cannot run it: ",
                              *v.problem));
  if (!v.evaluatesLoss)
    throw UniformError(concat("plan '", plan.path,
                              "': evaluation (--val-data) found no `loss` instruction outside "
                              "backward actions"));
  // A derived replica runs its listed program's instructions.
  const RankPlan &listed = plan.listedOf(rank.rank);
  std::vector<bool> skips(listed.program.size());
  for (size_t i = 0; i < skips.size(); ++i)
    skips[i] = skippedByEvaluation(listed, listed.program[i]);
  // A message whose value is stale in every evaluation (a backward's) is
  // left out on both sides: its receiver's buffer is stale either way, and
  // the k-th send and receive of a channel pair up alike in every run.
  auto staleInEveryEvaluation = [&](int64_t src, int64_t dst, int64_t tag, size_t k) {
    for (size_t run = 0; run < std::size(kRunIsEvaluation); ++run) {
      if (!kRunIsEvaluation[run])
        continue;
      auto it = v.sends.find({src, dst, tag, run});
      if (it == v.sends.end() || k >= it->second.size() || !it->second[k])
        return false;
    }
    return true;
  };
  std::map<std::tuple<int64_t, int64_t, int64_t>, size_t> seen; // (src, dst, tag) -> count
  for (const Instruction &inst : listed.program) {
    const bool isSend = inst.op == "send";
    if (!isSend && inst.op != "recv")
      continue;
    const int64_t peer = field(inst, "peer"), tag = field(inst, "tag");
    const int64_t src = isSend ? listed.rank : peer, dst = isSend ? peer : listed.rank;
    const size_t k = seen[{src, dst, tag}]++;
    if (staleInEveryEvaluation(src, dst, tag, k))
      skips[inst.index] = true;
  }
  return skips;
}

} // namespace pipemesh::rt
