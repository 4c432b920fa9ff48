//===- Simulator.cpp - discrete-event simulation of a step ----------------===//
#include "pipemesh/Sim/Simulator.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <sstream>
#include <unordered_map>

using namespace pipemesh;
using namespace pipemesh::sim;

namespace {

constexpr double kUnknown = -1.0;

/// Bytes as an integer when whole (they always are in plans).
std::string num(double v) {
  if (v == std::floor(v) && std::fabs(v) < 9e15)
    return std::to_string((long long)v);
  return llvm::formatv("{0}", v).str();
}

/// One point-to-point message: the k-th send of (src, dst, tag) and the k-th
/// receive.
struct Message {
  int32_t src = 0, dst = 0;
  int32_t sendInstr = -1, recvInstr = -1;
  int32_t channel = 0;
  double bytes = 0;
  double xfer = 0;      // alpha + bytes / bandwidth
  double occupancy = 0; // bytes / bandwidth: how long the channel is busy
  double issue = kUnknown, recvPost = kUnknown, arrival = kUnknown;
  bool recvWaiting = false;
};

/// One collective: the k-th collective of each member on a group.
struct Instance {
  int32_t group = 0;
  cost::Collective kind = cost::Collective::AllReduce;
  double bytes = 0;
  double duration = 0;
  int32_t arrived = 0;
  double maxIssue = 0;
  double start = 0, end = 0;
  bool resolved = false;
  std::vector<int32_t> waiters;
  int32_t firstRank = -1, firstInstr = -1;
};

enum class Block : uint8_t { None, Message, Sends, Instance };

struct RankState {
  size_t pc = 0;
  double t = 0;
  int64_t live = 0, peak = 0;
  bool issued = false; // the collective at pc was issued already
  bool done = false, queued = false;
  Block block = Block::None;
  int32_t blockOn = -1;
  std::vector<int32_t> sends; // message ids in issue order
  size_t arrivedPrefix = 0;    // sends[0, arrivedPrefix) have known arrivals
  std::vector<double> prefixMax; // latest arrival of sends[0, i]
  double sendsMaxArrival = 0;
  std::vector<int32_t> async; // async collectives issued, in order
  double collFree = 0;
  std::vector<int32_t> pending; // issued, unresolved collectives in order
  size_t pendingHead = 0;
  std::vector<std::pair<double, double>> idle; // compute-stream idle intervals
};

struct PairTagHash {
  size_t operator()(const std::pair<uint64_t, int64_t> &k) const {
    return std::hash<uint64_t>()(k.first * 0x9E3779B97F4A7C15ull ^ (uint64_t)k.second);
  }
};

class Engine {
public:
  Engine(const Job &job, const cost::Cluster &cluster, const SimOptions &opts)
      : job(job), cluster(cluster), opts(opts), n(job.ranks.size()) {}

  SimResult run();

private:
  const Job &job;
  const cost::Cluster &cluster;
  const SimOptions &opts;
  size_t n;
  SimResult res;

  std::vector<RankState> st;
  std::vector<std::vector<int32_t>> aux; // message / instance id per instruction
  std::vector<Message> msgs;
  std::vector<Instance> insts;
  std::vector<double> chanFree;
  std::deque<int32_t> ready;

  bool fail(std::string why) {
    res.ok = false;
    res.error = std::move(why);
    return false;
  }
  bool prepare();
  void advance(int32_t r);
  void wake(int32_t r) {
    if (!st[r].queued && !st[r].done) {
      st[r].queued = true;
      ready.push_back(r);
    }
  }
  void resolveMessage(Message &m, double recvTime);
  void advanceSends(int32_t r);
  void tryResolve(int32_t inst);
  void idle(int32_t r, double until, SpanKind kind, int32_t instr);
  void finishInstr(int32_t r, const Instr &in, double start);
  std::string describe(int32_t r, size_t pc) const;
  std::string deadlockReport();
  void summarize();
};

bool Engine::prepare() {
  st.assign(n, RankState());
  aux.resize(n);
  res.ranks.resize(n);
  if (opts.timeline) {
    res.spans.assign(n, {});
    res.memory.assign(n, {});
  }
  for (size_t r = 0; r < n; ++r)
    if (job.ranks[r].rank != (int32_t)r)
      return fail("job.ranks[" + std::to_string(r) + "] has rank " +
                  std::to_string(job.ranks[r].rank) + "; ranks must be listed in order");
  for (size_t g = 0; g < job.groups.size(); ++g)
    for (int64_t m : job.groups[g].members)
      if (m < 0 || m >= (int64_t)n)
        return fail("group '" + job.groups[g].name + "' names rank " + std::to_string(m) +
                    ", outside the " + std::to_string(n) + " ranks");

  // Point-to-point matching: the k-th send of (src, dst, tag) goes to the
  // k-th receive of it.
  std::unordered_map<std::pair<uint64_t, int64_t>, std::pair<std::vector<int32_t>, size_t>,
                     PairTagHash>
      byKey;
  std::unordered_map<uint64_t, int32_t> channels;
  for (size_t r = 0; r < n; ++r) {
    const std::vector<Instr> &is = job.ranks[r].instrs;
    aux[r].assign(is.size(), -1);
    for (size_t i = 0; i < is.size(); ++i) {
      const Instr &in = is[i];
      if (in.kind != OpKind::Send && in.kind != OpKind::Recv)
        continue;
      if (in.peer < 0 || in.peer >= (int32_t)n || in.peer == (int32_t)r)
        return fail("rank " + std::to_string(r) + " instruction " + std::to_string(i) + ": " +
                    (in.kind == OpKind::Send ? "send to" : "recv from") + " invalid peer " +
                    std::to_string(in.peer));
      if (in.kind != OpKind::Send)
        continue;
      uint64_t pair = (uint64_t)r * n + in.peer;
      Message m;
      m.src = r, m.dst = in.peer, m.sendInstr = i, m.bytes = in.bytes;
      auto ch = channels.try_emplace(pair, (int32_t)channels.size()).first;
      m.channel = ch->second;
      const cost::Link &link = cluster.linkBetween(r, in.peer);
      m.xfer = link.time(in.bytes);
      m.occupancy = link.bandwidth > 0 ? in.bytes / link.bandwidth : 0.0;
      aux[r][i] = msgs.size();
      byKey[{pair, in.tag}].first.push_back(msgs.size());
      msgs.push_back(m);
    }
  }
  chanFree.assign(channels.size(), 0.0);
  for (size_t r = 0; r < n; ++r) {
    const std::vector<Instr> &is = job.ranks[r].instrs;
    for (size_t i = 0; i < is.size(); ++i) {
      const Instr &in = is[i];
      if (in.kind != OpKind::Recv)
        continue;
      uint64_t pair = (uint64_t)in.peer * n + r;
      auto it = byKey.find({pair, in.tag});
      if (it == byKey.end() || it->second.second >= it->second.first.size())
        return fail("rank " + std::to_string(r) + " instruction " + describe(r, i) +
                    " receives from rank " + std::to_string(in.peer) + " tag " +
                    std::to_string(in.tag) + ", which rank " + std::to_string(in.peer) +
                    " never sends");
      Message &m = msgs[it->second.first[it->second.second++]];
      if (m.bytes != in.bytes)
        return fail("rank " + std::to_string(r) + " instruction " + describe(r, i) +
                    " receives " + num(in.bytes) + " bytes from rank " +
                    std::to_string(in.peer) + " tag " + std::to_string(in.tag) + " but it sends " +
                    num(m.bytes));
      m.recvInstr = i;
      aux[r][i] = &m - msgs.data();
    }
  }
  for (const Message &m : msgs)
    if (m.recvInstr < 0)
      return fail("rank " + std::to_string(m.src) + " instruction " +
                  describe(m.src, m.sendInstr) + " sends to rank " + std::to_string(m.dst) +
                  " tag " + std::to_string(job.ranks[m.src].instrs[m.sendInstr].tag) +
                  ", which rank " + std::to_string(m.dst) + " never receives");

  // Collectives: the k-th collective of every member on a group is one
  // instance; members must agree on what it is.
  std::vector<std::vector<int32_t>> instOf(job.groups.size());
  std::vector<std::vector<int32_t>> count(n, std::vector<int32_t>(job.groups.size(), 0));
  // The dp groups' spreads over the nodes, when their collectives are
  // hierarchical; a layout the runtime refuses (pipemesh-run) is an error.
  std::vector<std::optional<cost::Cluster::Spread>> spread(job.groups.size());
  if (job.hierarchicalDp)
    for (size_t gi = 0; gi < job.groups.size(); ++gi) {
      const Group &g = job.groups[gi];
      if (g.name != "dp")
        continue;
      spread[gi] = cluster.spreadOf(g.members);
      std::string uneven = cluster.hierarchicalSpreadError(g.members, *spread[gi]);
      if (!uneven.empty())
        return fail(uneven);
    }
  for (size_t r = 0; r < n; ++r) {
    const std::vector<Instr> &is = job.ranks[r].instrs;
    for (size_t i = 0; i < is.size(); ++i) {
      const Instr &in = is[i];
      if (in.kind == OpKind::Wait) {
        if (in.handle >= (int32_t)i ||
            (in.handle >= 0 && (is[in.handle].kind != OpKind::Collective || !is[in.handle].async)))
          return fail("rank " + std::to_string(r) + " instruction " + std::to_string(i) +
                      ": wait names instruction " + std::to_string(in.handle) +
                      ", not an earlier async collective");
        continue;
      }
      if (in.kind != OpKind::Collective)
        continue;
      if (in.group < 0 || in.group >= (int32_t)job.groups.size())
        return fail("rank " + std::to_string(r) + " instruction " + std::to_string(i) +
                    ": collective on unknown group " + std::to_string(in.group));
      const Group &g = job.groups[in.group];
      if (!llvm::is_contained(g.members, (int64_t)r))
        return fail("rank " + std::to_string(r) + " instruction " + describe(r, i) +
                    ": collective on group '" + g.name + "' which does not contain it");
      int32_t k = count[r][in.group]++;
      std::vector<int32_t> &of = instOf[in.group];
      if ((size_t)k == of.size()) {
        Instance x;
        x.group = in.group, x.kind = in.coll, x.bytes = in.bytes;
        x.duration = spread[in.group] ? cluster.hierarchicalCollectiveTime(
                                            in.coll, in.bytes, g.members, *spread[in.group])
                                      : cluster.collectiveTime(in.coll, in.bytes, g.members);
        x.firstRank = r, x.firstInstr = i;
        of.push_back(insts.size());
        insts.push_back(std::move(x));
      }
      Instance &x = insts[of[k]];
      if (x.kind != in.coll || x.bytes != in.bytes)
        return fail("collective " + std::to_string(k) + " on group '" + g.name + "': rank " +
                    std::to_string(x.firstRank) + " instruction " +
                    describe(x.firstRank, x.firstInstr) + " is " +
                    cost::collectiveName(x.kind).str() + " of " +
                    num(x.bytes) + " bytes but rank " +
                    std::to_string(r) + " instruction " + describe(r, i) + " is " +
                    cost::collectiveName(in.coll).str() + " of " +
                    num(in.bytes) + " bytes");
      aux[r][i] = of[k];
    }
  }
  for (size_t g = 0; g < job.groups.size(); ++g) {
    const Group &grp = job.groups[g];
    for (int64_t m : grp.members)
      if (count[m][g] != count[grp.members.front()][g])
        return fail("group '" + grp.name + "': rank " + std::to_string(grp.members.front()) +
                    " issues " + std::to_string(count[grp.members.front()][g]) +
                    " collectives on it but rank " + std::to_string(m) + " issues " +
                    std::to_string(count[m][g]));
  }
  return true;
}

void Engine::idle(int32_t r, double until, SpanKind kind, int32_t instr) {
  RankState &s = st[r];
  if (until <= s.t)
    return;
  double d = until - s.t;
  if (kind == SpanKind::Bubble)
    res.ranks[r].bubbleS += d;
  else
    res.ranks[r].exposedCommS += d;
  s.idle.push_back({s.t, until});
  if (opts.timeline) {
    Span sp;
    sp.start = s.t, sp.end = until, sp.kind = kind, sp.instr = instr;
    res.spans[r].push_back(sp);
  }
  s.t = until;
}

void Engine::finishInstr(int32_t r, const Instr &in, double start) {
  RankState &s = st[r];
  s.peak = std::max(s.peak, s.live + in.memPeak);
  if (opts.timeline && (in.memPeak != 0 || in.memNet != 0)) {
    if (in.memPeak > std::max<int64_t>(in.memNet, 0))
      res.memory[r].push_back({start, s.live + in.memPeak});
    res.memory[r].push_back({s.t, s.live + in.memNet});
  }
  s.live += in.memNet;
  ++s.pc;
}

void Engine::resolveMessage(Message &m, double recvTime) {
  double start = std::max(m.issue, chanFree[m.channel]);
  if (opts.rendezvous)
    start = std::max(start, recvTime);
  m.arrival = start + m.xfer;
  chanFree[m.channel] = start + m.occupancy;
  RankState &s = st[m.src];
  s.sendsMaxArrival = std::max(s.sendsMaxArrival, m.arrival);
  if (opts.timeline) {
    Span sp;
    sp.start = start, sp.end = m.arrival, sp.kind = SpanKind::P2P, sp.instr = m.sendInstr;
    sp.peer = m.dst;
    res.spans[m.src].push_back(sp);
  }
}

void Engine::advanceSends(int32_t r) {
  RankState &s = st[r];
  while (s.arrivedPrefix < s.sends.size() && msgs[s.sends[s.arrivedPrefix]].arrival >= 0) {
    double a = msgs[s.sends[s.arrivedPrefix]].arrival;
    s.prefixMax.push_back(s.prefixMax.empty() ? a : std::max(s.prefixMax.back(), a));
    ++s.arrivedPrefix;
  }
}

void Engine::tryResolve(int32_t first) {
  std::vector<int32_t> work{first};
  while (!work.empty()) {
    int32_t id = work.back();
    work.pop_back();
    Instance &x = insts[id];
    const std::vector<int64_t> &mem = job.groups[x.group].members;
    if (x.resolved || x.arrived < (int32_t)mem.size())
      continue;
    bool heads = true;
    for (int64_t m : mem) {
      const RankState &s = st[m];
      if (s.pendingHead >= s.pending.size() || s.pending[s.pendingHead] != id) {
        heads = false;
        break;
      }
    }
    if (!heads)
      continue;
    double start = x.maxIssue;
    for (int64_t m : mem)
      start = std::max(start, st[m].collFree);
    x.start = start;
    x.end = start + x.duration;
    x.resolved = true;
    for (int64_t m : mem) {
      RankState &s = st[m];
      s.collFree = x.end;
      ++s.pendingHead;
      res.ranks[m].collectiveBytes += x.bytes;
      res.ranks[m].collectiveBusyS += x.duration;
      if (opts.timeline) {
        Span sp;
        sp.start = x.start, sp.end = x.end, sp.kind = SpanKind::Collective, sp.peer = x.group;
        res.spans[m].push_back(sp);
      }
      if (s.pendingHead < s.pending.size())
        work.push_back(s.pending[s.pendingHead]);
    }
    for (int32_t w : x.waiters)
      wake(w);
    x.waiters.clear();
  }
}

void Engine::advance(int32_t r) {
  RankState &s = st[r];
  const Program &p = job.ranks[r];
  const cost::Device &dev = cluster.device;
  RankStats &rs = res.ranks[r];
  s.block = Block::None;
  while (s.pc < p.instrs.size()) {
    const Instr &in = p.instrs[s.pc];
    double start = s.t;
    switch (in.kind) {
    case OpKind::Compute: {
      double d = in.seconds >= 0 ? in.seconds : dev.time(in.opCost(), in.kernelClass);
      rs.workS[(int)in.work] += d;
      rs.computeS += d;
      if (opts.timeline && d > 0) {
        Span sp;
        sp.start = s.t, sp.end = s.t + d, sp.kind = SpanKind::Compute, sp.work = in.work;
        sp.label = in.label, sp.instr = s.pc;
        res.spans[r].push_back(sp);
      }
      s.t += d;
      break;
    }
    case OpKind::Send: {
      Message &m = msgs[aux[r][s.pc]];
      m.issue = s.t;
      rs.p2pBytes += m.bytes;
      if (!opts.rendezvous || m.recvPost >= 0)
        resolveMessage(m, m.recvPost);
      s.sends.push_back(aux[r][s.pc]);
      advanceSends(r);
      if (m.recvWaiting)
        wake(m.dst);
      break;
    }
    case OpKind::Recv: {
      Message &m = msgs[aux[r][s.pc]];
      if (m.issue < 0) {
        m.recvPost = s.t;
        m.recvWaiting = true;
        s.block = Block::Message;
        s.blockOn = aux[r][s.pc];
        return;
      }
      if (m.arrival < 0) { // rendezvous: the transfer starts now
        resolveMessage(m, s.t);
        advanceSends(m.src);
        if (st[m.src].block == Block::Sends)
          wake(m.src);
      }
      m.recvWaiting = false;
      idle(r, m.arrival, SpanKind::Bubble, s.pc);
      break;
    }
    case OpKind::WaitSends: {
      int64_t need = (int64_t)s.sends.size() - std::max<int32_t>(in.keep, 0);
      if (need <= 0)
        break;
      if ((int64_t)s.arrivedPrefix < need) {
        s.block = Block::Sends;
        return;
      }
      idle(r, s.prefixMax[need - 1], SpanKind::Bubble, s.pc);
      break;
    }
    case OpKind::Collective:
    case OpKind::Wait: {
      int32_t id;
      if (in.kind == OpKind::Collective) {
        id = aux[r][s.pc];
        if (!s.issued) {
          Instance &x = insts[id];
          ++x.arrived;
          x.maxIssue = std::max(x.maxIssue, s.t);
          s.pending.push_back(id);
          s.issued = true;
          if (in.async)
            s.async.push_back(id);
          tryResolve(id);
        }
        if (in.async) {
          s.issued = false;
          break;
        }
      } else {
        // One stream runs a rank's collectives in issue order: all but the
        // `keep` most recent are done when the (keep+1)-th most recent is.
        int64_t nth = (int64_t)s.async.size() - 1 - std::max<int32_t>(in.keep, 0);
        id = in.handle >= 0 ? aux[r][in.handle] : nth >= 0 ? s.async[nth] : -1;
        if (id < 0)
          break;
      }
      Instance &x = insts[id];
      if (!x.resolved) {
        x.waiters.push_back(r);
        s.block = Block::Instance;
        s.blockOn = id;
        return;
      }
      s.issued = false;
      // Until the last member issued it the rank waits for a peer that is
      // behind (pipeline imbalance: bubble); after, for the network.
      idle(r, std::min(x.maxIssue, x.end), SpanKind::Bubble, s.pc);
      idle(r, x.end, SpanKind::ExposedComm, s.pc);
      break;
    }
    }
    finishInstr(r, in, start);
  }
  s.done = true;
  rs.endS = s.t;
}

std::string Engine::describe(int32_t r, size_t pc) const {
  const Program &p = job.ranks[r];
  const Instr &in = p.instrs[pc];
  std::string s = std::to_string(in.source >= 0 ? in.source : (int32_t)pc) + " (";
  switch (in.kind) {
  case OpKind::Compute:
    s += "compute";
    break;
  case OpKind::Send:
    s += "send to rank " + std::to_string(in.peer) + " tag " + std::to_string(in.tag);
    break;
  case OpKind::Recv:
    s += "recv from rank " + std::to_string(in.peer) + " tag " + std::to_string(in.tag);
    break;
  case OpKind::WaitSends:
    s += "wait_sends";
    if (in.keep > 0)
      s += " keep " + std::to_string(in.keep);
    break;
  case OpKind::Collective:
    s += cost::collectiveName(in.coll).str();
    if (in.group >= 0 && in.group < (int32_t)job.groups.size())
      s += " on group " + job.groups[in.group].name;
    break;
  case OpKind::Wait:
    s += "wait";
    break;
  }
  if (in.label >= 0 && in.label < (int32_t)p.labels.size())
    s += ", action " + p.labels[in.label];
  return s + ")";
}

std::string Engine::deadlockReport() {
  std::string out = "deadlock: no rank can go on";
  for (size_t r = 0; r < n; ++r) {
    const RankState &s = st[r];
    if (s.done)
      continue;
    out += "\n  rank " + std::to_string(r) + " instruction " + describe(r, s.pc);
    switch (s.block) {
    case Block::Message: {
      const Message &m = msgs[s.blockOn];
      out += " waits for rank " + std::to_string(m.src) + " to send tag " +
             std::to_string(job.ranks[m.src].instrs[m.sendInstr].tag);
      if (!st[m.src].done)
        out += " (rank " + std::to_string(m.src) + " is stuck at instruction " +
               std::to_string(job.ranks[m.src].instrs[st[m.src].pc].source >= 0
                                  ? job.ranks[m.src].instrs[st[m.src].pc].source
                                  : (int32_t)st[m.src].pc) +
               ")";
      break;
    }
    case Block::Sends:
      out += " waits for its sends to be received";
      break;
    case Block::Instance: {
      const Instance &x = insts[s.blockOn];
      const Group &g = job.groups[x.group];
      std::vector<std::string> missing, busy;
      for (int64_t m : g.members) {
        const RankState &o = st[m];
        bool issued = std::find(o.pending.begin(), o.pending.end(), s.blockOn) != o.pending.end();
        if (!issued)
          missing.push_back(std::to_string(m));
        else if (o.pending[o.pendingHead] != s.blockOn)
          busy.push_back(std::to_string(m));
      }
      if (!missing.empty())
        out += " waits for rank(s) " + llvm::join(missing, ", ") + " of group " + g.name +
               " to reach the collective";
      else
        out += " waits for earlier collectives of rank(s) " + llvm::join(busy, ", ");
      break;
    }
    case Block::None:
      out += " is not blocked (internal error)";
      break;
    }
  }
  return out;
}

void Engine::summarize() {
  double step = 0;
  for (size_t r = 0; r < n; ++r)
    step = std::max({step, st[r].t, st[r].collFree, st[r].sendsMaxArrival});
  res.stepTimeS = step;
  // The idle tail: a rank that finished early waits for the step to end.
  for (size_t r = 0; r < n; ++r)
    if (st[r].t < step)
      idle(r, step, SpanKind::Bubble, -1);

  double compute = 0, bubble = 0, exposed = 0, recompute = 0;
  for (size_t r = 0; r < n; ++r) {
    RankStats &rs = res.ranks[r];
    rs.rank = r;
    rs.recomputeS = rs.workS[(int)Work::Recompute];
    rs.peakMemBytes = job.ranks[r].persistentBytes + st[r].peak;
    rs.arenaBytes = job.ranks[r].arenaBytes;
    res.maxPeakMemBytes = std::max(res.maxPeakMemBytes, rs.peakMemBytes);
    res.collectiveFloorS = std::max(res.collectiveFloorS, rs.collectiveBusyS);
    res.computeMaxS = std::max(res.computeMaxS, rs.computeS);
    compute += rs.computeS;
    bubble += rs.bubbleS;
    exposed += rs.exposedCommS;
    recompute += rs.recomputeS;
  }
  res.floorS = std::max(res.collectiveFloorS, res.computeMaxS);
  double total = step * (double)n;
  if (total > 0) {
    res.computeFrac = compute / total;
    res.bubbleFrac = bubble / total;
    res.exposedCommFrac = exposed / total;
    res.recomputeFrac = recompute / total;
  }
  if (step > 0)
    res.tokensPerS = job.tokensPerStep / step;

  // All-device idle: the measure of the times inside n idle intervals at
  // once (each rank's intervals are disjoint).
  std::vector<std::pair<double, int>> ev;
  for (size_t r = 0; r < n; ++r)
    for (auto [a, b] : st[r].idle) {
      ev.push_back({a, +1});
      ev.push_back({b, -1});
    }
  // Ends before starts at equal times: touching intervals do not overlap.
  std::sort(ev.begin(), ev.end(), [](const auto &x, const auto &y) {
    return x.first < y.first || (x.first == y.first && x.second < y.second);
  });
  int64_t depth = 0;
  double allIdle = 0, since = 0;
  for (auto [t, d] : ev) {
    if (depth == (int64_t)n)
      allIdle += t - since;
    depth += d;
    since = t;
  }
  res.allDeviceIdleS = allIdle;
  res.allDeviceIdleFrac = step > 0 ? allIdle / step : 0.0;
}

SimResult Engine::run() {
  if (!prepare())
    return std::move(res);
  for (size_t r = 0; r < n; ++r)
    wake(r);
  while (!ready.empty()) {
    int32_t r = ready.front();
    ready.pop_front();
    st[r].queued = false;
    advance(r);
  }
  for (size_t r = 0; r < n; ++r)
    if (!st[r].done) {
      fail(deadlockReport());
      return std::move(res);
    }
  summarize();
  // A rate or efficiency that the cluster file allows (positive) but that is
  // too small to cost the plan's work in a finite time (1e-300 flop/s) would
  // otherwise surface as inf / nan in every figure of the report.
  if (!std::isfinite(res.stepTimeS)) {
    std::string why;
    llvm::raw_string_ostream os(why);
    os << "the cluster '" << cluster.name << "' costs this plan's step at "
       << llvm::format("%g", res.stepTimeS) << " s";
    for (const RankStats &s : res.ranks)
      if (!std::isfinite(s.computeS) || !std::isfinite(s.collectiveBusyS)) {
        os << llvm::format(" (rank %lld: compute %g s, collectives %g s)", (long long)s.rank,
                           s.computeS, s.collectiveBusyS);
        break;
      }
    os << ": a rate, bandwidth or efficiency in it is too small (or a time too large) to "
          "give finite times";
    fail(why);
  }
  return std::move(res);
}

} // namespace

SimResult pipemesh::sim::simulate(const Job &job, const cost::Cluster &cluster,
                                  const SimOptions &opts) {
  Engine e(job, cluster, opts);
  return e.run();
}
