//===- ParallelCheck.cpp - cross-rank checks of a multi-rank plan -----------===//
//
// What one rank cannot see in its own program but a mistake in which would
// hang or silently corrupt a job: the rank layout, the groups the collectives
// run on, the pairing of point-to-point transfers (MPI matches a receive with
// the oldest send of the same sender and tag, so for every (sender, receiver,
// tag) the sizes must agree in program order), and the sequence of
// collectives each group's members issue. Every rank reads the listed
// programs and computes the same verdict, so a failure is a UniformError
// reported once by rank 0, before any communication. An elided plan's checks
// run on its listed programs (dp rank 0 of each pipeline rank): with the dp
// groups its listed ranks' replicas and every peer and tied-group member a
// listed rank, replica d is the listed job shifted by d (Plan.h's replica
// rules), so what holds for the listed programs holds for every replica.
// Ordering (deadlock freedom) is the compiler's deadlock check
// (docs/parallel-plan.md); a plan that passes this one but deadlocks still
// ends at --comm-timeout.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/runtime/Error.h"
#include "pipemesh/runtime/Plan.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

namespace pipemesh::rt {
namespace {

[[noreturn]] void bad(const Plan &p, const std::string &why) {
  throw UniformError(concat("plan '", p.path, "': ", why));
}

std::string list(const std::vector<int64_t> &v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i)
    os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

struct Transfer {
  size_t instr;
  uint64_t bytes;
};

/// One collective as its members must all issue it.
struct Collective {
  size_t instr;
  std::string op;
  std::vector<int64_t> numels;
};

int64_t intField(const Plan &p, const RankPlan &r, const Instruction &inst, const char *key) {
  auto it = inst.json.find(key);
  if (it == inst.json.end() || !it->is_number_integer())
    bad(p, concat("rank ", r.rank, ", instruction ", inst.index, " (", inst.op,
                  ") needs an integer \"", key, "\""));
  return it->get<int64_t>();
}

const BufferInfo &onlyBuffer(const Plan &p, const RankPlan &r, const Instruction &inst,
                             const std::vector<int64_t> &ids, const char *role) {
  if (ids.size() != 1)
    bad(p, concat("rank ", r.rank, ", instruction ", inst.index, " (", inst.op, ") needs exactly one ",
                  role, " buffer, has ", ids.size()));
  return r.buffer(ids[0]);
}

/// Names a rank that an elided plan's listed program may not name.
std::string notListed(const Plan &p, int64_t m) {
  return concat("rank ", m, ", dp rank ", m % p.parallel.dp, " of pipeline rank ",
                m / p.parallel.dp);
}

void checkGroup(const Plan &p, const RankPlan &r, const std::vector<int64_t> &g, const char *name,
                bool isDp) {
  if (g.empty())
    return;
  // Replica d of an elided plan's listed rank has the same dp group and
  // dp_rank d: the group must hold each replica at its dp position. (Its
  // tied group is shifted with it, so it holds itself when the listed one does.)
  const int64_t replicas = isDp ? p.replicasPerListed() : 1;
  for (int64_t d = 0; d < replicas; ++d) {
    const int64_t me = replica::rank(r.rank, d), dpRank = r.dpRank + d;
    auto self = std::find(g.begin(), g.end(), me);
    if (self == g.end())
      bad(p, concat("rank ", me, "'s ", name, " group ", list(g), " does not contain it"));
    if (d == 0) {
      std::vector<int64_t> sorted = g;
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
        bad(p, concat("rank ", me, "'s ", name, " group ", list(g), " repeats a rank"));
      if (isDp && (int64_t)g.size() != p.parallel.dp)
        bad(p, concat("rank ", me, "'s dp group ", list(g), " has ", g.size(),
                      " ranks, the plan has dp=", p.parallel.dp));
    }
    if (isDp && self - g.begin() != dpRank)
      bad(p, concat("rank ", me, " (dp_rank ", dpRank, ") is at position ", self - g.begin(),
                    " of its dp group ", list(g), ": the group must be in dp order"));
  }
  for (int64_t m : g) {
    if (m < 0 || m >= p.parallel.worldSize)
      bad(p, concat("rank ", r.rank, "'s ", name, " group ", list(g), " names rank ", m,
                    ", outside world size ", p.parallel.worldSize));
    if (!isDp && p.replicasElided && m % p.parallel.dp != 0)
      bad(p, concat("rank ", r.rank, "'s tied group ", list(g), " names ", notListed(p, m),
                    ": in a plan with replicas_elided a tied group lists dp rank 0 of each "
                    "member pipeline rank (replica d's members are those plus d)"));
    // Member m's group: its listed program's (a dp replica's is the same list).
    const RankPlan &o = p.listedOf(m);
    const std::vector<int64_t> &og = isDp ? o.dpGroup : o.tiedGroup;
    if (og != g)
      bad(p, concat("rank ", r.rank, "'s ", name, " group is ", list(g), " but rank ", m, "'s is ",
                    list(og), ": members of a group must list the same group"));
    if (isDp && o.ppRank != r.ppRank)
      bad(p, concat("dp group ", list(g), " mixes pp_rank ", r.ppRank, " and ", o.ppRank));
    if (!isDp && o.dpRank != r.dpRank)
      bad(p, concat("tied group ", list(g), " mixes dp_rank ", r.dpRank, " and ", o.dpRank));
  }
}

} // namespace

void validateParallelPlan(const Plan &p) {
  const int64_t world = p.parallel.worldSize;
  if (p.parallel.pp * p.parallel.dp != world)
    bad(p, concat("parallel.world_size ", world, " is not pp x dp = ", p.parallel.pp, " x ",
                  p.parallel.dp));
  std::map<std::pair<int64_t, int64_t>, int64_t> layout;
  for (const RankPlan &r : p.listed) {
    if (r.rank < 0 || r.rank >= world)
      bad(p, concat("has a program for rank ", r.rank, ", outside world size ", world));
    auto [it, fresh] = layout.emplace(std::make_pair(r.ppRank, r.dpRank), r.rank);
    if (!fresh)
      bad(p, concat("ranks ", it->second, " and ", r.rank, " both claim pp_rank ", r.ppRank,
                    " dp_rank ", r.dpRank));
  }
  // (An elided plan's reader has checked that it lists every pipeline rank once.)
  if ((int64_t)p.listed.size() * p.replicasPerListed() != world)
    bad(p, concat("has ", p.listed.size(), " rank programs for world size ", world));

  // (sender, receiver, tag) -> transfers in program order.
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<Transfer>> sends, recvs;
  // (group kind, members) -> per member, its collectives in order.
  std::map<std::pair<std::string, std::vector<int64_t>>,
           std::map<int64_t, std::vector<Collective>>>
      collectives;
  std::map<int64_t, size_t> adamws;
  for (const RankPlan &r : p.listed) {
    checkGroup(p, r, r.dpGroup, "dp", true);
    checkGroup(p, r, r.tiedGroup, "tied", false);
    for (const std::vector<int64_t> *g : {&r.dpGroup, &r.tiedGroup})
      if (!g->empty())
        collectives[{g == &r.dpGroup ? "dp" : "tied", *g}][r.rank];
    size_t &nAdam = adamws[r.rank];
    for (const Instruction &inst : r.program) {
      auto where = [&] { return concat("rank ", r.rank, ", instruction ", inst.index, " (", inst.op, ")"); };
      if (inst.op == "send" || inst.op == "recv") {
        bool send = inst.op == "send";
        int64_t peer = intField(p, r, inst, "peer"), tag = intField(p, r, inst, "tag");
        if (peer < 0 || peer >= world || peer == r.rank)
          bad(p, concat(where(), " has peer ", peer, ": it must be another rank of the ", world));
        // Replica d talks to the peer's replica d: the peer must be listed.
        if (p.replicasElided && peer % p.parallel.dp != 0)
          bad(p, concat(where(), " has peer ", notListed(p, peer),
                        ": in a plan with replicas_elided the listed programs send to and receive "
                        "from dp rank 0 of a pipeline rank (replica d from that rank plus d)"));
        if (tag < 0)
          bad(p, concat(where(), " has a negative tag ", tag));
        const BufferInfo &b = onlyBuffer(p, r, inst, send ? inst.in : inst.out, send ? "in" : "out");
        auto key = send ? std::make_tuple(r.rank, peer, tag) : std::make_tuple(peer, r.rank, tag);
        (send ? sends : recvs)[key].push_back({inst.index, b.bytes});
      } else if (inst.op == "allreduce" || inst.op == "reduce_scatter" || inst.op == "allgather") {
        auto g = inst.json.find("group");
        std::string group = g != inst.json.end() && g->is_string() ? g->get<std::string>() : "";
        if (group != "dp" && (group != "tied" || inst.op != "allreduce"))
          bad(p, concat(where(), " has group ",
                        g == inst.json.end() ? std::string("(none)") : g->dump(), ": expected ",
                        inst.op == "allreduce" ? "\"dp\" or \"tied\"" : "\"dp\""));
        const std::vector<int64_t> &members = group == "dp" ? r.dpGroup : r.tiedGroup;
        if (members.empty())
          bad(p, concat(where(), " runs on the tied group, but rank ", r.rank, " has none"));
        Collective c{inst.index, inst.op, {}};
        std::vector<int64_t> ids;
        if (inst.op == "allreduce") {
          auto bufs = inst.json.find("bufs");
          if (bufs == inst.json.end() || !bufs->is_array() || bufs->empty())
            bad(p, concat(where(), " needs a non-empty \"bufs\" array of buffer ids"));
          for (const auto &id : *bufs) {
            if (!id.is_number_integer())
              bad(p, concat(where(), ": \"bufs\" must hold buffer ids, got ", id.dump()));
            c.numels.push_back(r.buffer(id.get<int64_t>()).numel);
          }
        } else {
          // Both sides of the collective move the shard sizes.
          const std::vector<int64_t> &shards = inst.op == "reduce_scatter" ? inst.out : inst.in;
          for (int64_t id : shards)
            c.numels.push_back(r.buffer(id).numel);
        }
        collectives[{group, members}][r.rank].push_back(std::move(c));
      } else if (inst.op == "adamw") {
        ++nAdam;
      }
    }
  }

  for (const auto &[key, list_] : sends) {
    auto [from, to, tag] = key;
    auto it = recvs.find(key);
    size_t nr = it == recvs.end() ? 0 : it->second.size();
    if (nr != list_.size())
      bad(p, concat("rank ", from, " sends ", list_.size(), " message(s) to rank ", to, " with tag ",
                    tag, " (first: instruction ", list_[0].instr, ") but rank ", to, " receives ",
                    nr, " from rank ", from, " with that tag"));
    for (size_t i = 0; i < list_.size(); ++i)
      if (list_[i].bytes != it->second[i].bytes)
        bad(p, concat("rank ", from, ", instruction ", list_[i].instr, " sends ", list_[i].bytes,
                      " bytes to rank ", to, " with tag ", tag, " but the matching receive (rank ",
                      to, ", instruction ", it->second[i].instr, ") expects ", it->second[i].bytes));
  }
  for (const auto &[key, list_] : recvs)
    if (!sends.count(key)) {
      auto [from, to, tag] = key;
      bad(p, concat("rank ", to, ", instruction ", list_[0].instr, " receives from rank ", from,
                    " with tag ", tag, " but rank ", from, " never sends with that tag"));
    }

  for (const auto &[key, byRank] : collectives) {
    const auto &[group, members] = key;
    const std::vector<Collective> &ref = byRank.at(members[0]);
    for (int64_t m : members) {
      // Not listed: a dp replica of members[0] (the group checks made sure),
      // which runs members[0]'s program.
      auto it = byRank.find(m);
      if (it == byRank.end())
        continue;
      const std::vector<Collective> &mine = it->second;
      for (size_t i = 0; i < std::max(ref.size(), mine.size()); ++i) {
        if (i >= ref.size() || i >= mine.size())
          bad(p, concat("the ", group, " group ", list(members), ": rank ", members[0], " issues ",
                        ref.size(), " collectives per step, rank ", m, " ", mine.size()));
        if (ref[i].op != mine[i].op || ref[i].numels != mine[i].numels)
          bad(p, concat("the ", group, " group ", list(members), ": collective ", i, " is ",
                        ref[i].op, " of ", list(ref[i].numels), " elements on rank ", members[0],
                        " (instruction ", ref[i].instr, ") but ", mine[i].op, " of ",
                        list(mine[i].numels), " on rank ", m, " (instruction ", mine[i].instr,
                        ")"));
      }
    }
  }

  size_t n0 = adamws.begin()->second;
  for (const auto &[rank, n] : adamws)
    if (n != n0)
      bad(p, concat("rank ", adamws.begin()->first, " has ", n0, " adamw instruction(s), rank ",
                    rank, " has ", n, ": every rank must run the optimizer step (its gradient "
                    "norm is a collective over all ranks)"));
}

} // namespace pipemesh::rt
