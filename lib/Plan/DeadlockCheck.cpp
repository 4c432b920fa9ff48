//===- DeadlockCheck.cpp - every rank of a plan runs to completion ---------===//
#include "pipemesh/Plan/DeadlockCheck.h"
#include "pipemesh/Plan/Replicas.h"
#include "pipemesh/Sim/ProgramView.h"

#include "llvm/ADT/DenseMap.h"

#include <deque>
#include <set>
#include <tuple>

namespace json = llvm::json;

namespace pipemesh::plan {

namespace {

std::string listText(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string describe(const CommOp &op) {
  switch (op.kind) {
  case CommOp::Kind::Compute:
    return "compute";
  case CommOp::Kind::Send:
    return "send to rank " + std::to_string(op.peer) + " tag " + std::to_string(op.tag);
  case CommOp::Kind::Recv:
    return "recv from rank " + std::to_string(op.peer) + " tag " + std::to_string(op.tag);
  case CommOp::Kind::WaitSends:
    return "wait_sends";
  case CommOp::Kind::Collective:
    return op.signature + " on group " + op.group;
  }
  return "?";
}

struct Sent {
  int64_t bytes;
  size_t index; // sender's instruction
};

class Simulator {
public:
  explicit Simulator(llvm::ArrayRef<RankProgram> ranks) : ranks(ranks) {}

  std::string run() {
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (index.count(ranks[i].rank))
        return "rank " + std::to_string(ranks[i].rank) + " appears twice";
      index[ranks[i].rank] = i;
    }
    if (std::string why = checkGroups(); !why.empty())
      return why;
    pc.assign(ranks.size(), 0);
    unreceived.assign(ranks.size(), {});
    sendsAt.assign(ranks.size(), {});
    collectiveSeq.assign(ranks.size(), {});
    bool progress = true;
    while (progress) {
      progress = false;
      for (size_t r = 0; r < ranks.size(); ++r) {
        while (pc[r] < ranks[r].ops.size()) {
          bool advanced = false;
          if (std::string why = step(r, advanced); !why.empty())
            return why;
          if (!advanced)
            break;
          progress = true;
        }
      }
    }
    std::string blocked;
    for (size_t r = 0; r < ranks.size(); ++r)
      if (pc[r] < ranks[r].ops.size())
        blocked += "\n  " + waitText(r);
    if (!blocked.empty())
      return "deadlock: no rank can proceed:" + blocked;
    for (auto &[key, queue] : mailbox)
      if (!queue.empty()) {
        auto [src, dst, tag] = key;
        return "rank " + std::to_string(src) + " instruction " +
               std::to_string(queue.front().index) + " sends tag " + std::to_string(tag) +
               " to rank " + std::to_string(dst) + ", which never receives it";
      }
    return "";
  }

private:
  /// Every member of a group names the same members, itself included.
  std::string checkGroups() {
    for (const RankProgram &rp : ranks)
      for (auto &[name, members] : rp.groups) {
        if (members.empty())
          continue;
        if (std::find(members.begin(), members.end(), rp.rank) == members.end())
          return "rank " + std::to_string(rp.rank) + "'s group '" + name + "' " +
                 listText(members) + " does not contain the rank itself";
        for (int64_t m : members) {
          auto it = index.find(m);
          if (it == index.end())
            return "rank " + std::to_string(rp.rank) + "'s group '" + name + "' names rank " +
                   std::to_string(m) + ", which the plan does not have";
          auto other = ranks[it->second].groups.find(name);
          if (other == ranks[it->second].groups.end() || other->second != members)
            return "rank " + std::to_string(rp.rank) + "'s group '" + name + "' is " +
                   listText(members) + " but rank " + std::to_string(m) + "'s is " +
                   (other == ranks[it->second].groups.end() ? std::string("missing")
                                                            : listText(other->second));
        }
      }
    return "";
  }

  std::string where(size_t r) const {
    return "rank " + std::to_string(ranks[r].rank) + " instruction " + std::to_string(pc[r]);
  }

  std::string waitText(size_t r) {
    const CommOp &op = ranks[r].ops[pc[r]];
    std::string s = where(r) + " (" + describe(op) + ") waits for ";
    switch (op.kind) {
    case CommOp::Kind::Recv:
      return s + "rank " + std::to_string(op.peer) + " to send tag " + std::to_string(op.tag);
    case CommOp::Kind::WaitSends: {
      s += "its sends to be received:";
      for (auto &[peer, tag, at] : unreceived[r])
        s += " tag " + std::to_string(tag) + " to rank " + std::to_string(peer) +
             " (instruction " + std::to_string(at) + ")";
      return s;
    }
    case CommOp::Kind::Collective: {
      const std::vector<int64_t> &members = ranks[r].groups.at(op.group);
      int64_t seq = collectiveSeq[r][op.group];
      auto &arrived = arrivals[{op.group + listText(members), seq}];
      std::vector<int64_t> missing;
      for (int64_t m : members)
        if (!arrived.count(m))
          missing.push_back(m);
      return s + "ranks " + listText(missing) + " of group " + op.group + " " +
             listText(members);
    }
    default:
      return s + "nothing";
    }
  }

  std::string step(size_t r, bool &advanced) {
    const RankProgram &rp = ranks[r];
    const CommOp &op = rp.ops[pc[r]];
    switch (op.kind) {
    case CommOp::Kind::Compute:
      break;
    case CommOp::Kind::Send: {
      if (!index.count(op.peer) || op.peer == rp.rank)
        return where(r) + " sends to rank " + std::to_string(op.peer) +
               ", which is not another rank of the plan";
      mailbox[{rp.rank, op.peer, op.tag}].push_back({op.bytes, pc[r]});
      unreceived[r].insert({op.peer, op.tag, pc[r]});
      sendsAt[r].push_back(pc[r]);
      break;
    }
    case CommOp::Kind::Recv: {
      if (!index.count(op.peer) || op.peer == rp.rank)
        return where(r) + " receives from rank " + std::to_string(op.peer) +
               ", which is not another rank of the plan";
      auto &queue = mailbox[{op.peer, rp.rank, op.tag}];
      if (queue.empty())
        return "";
      Sent s = queue.front();
      queue.pop_front();
      if (s.bytes != op.bytes)
        return where(r) + " receives " + std::to_string(op.bytes) + " bytes with tag " +
               std::to_string(op.tag) + " from rank " + std::to_string(op.peer) +
               ", which sends " + std::to_string(s.bytes) + " bytes (its instruction " +
               std::to_string(s.index) + ")";
      unreceived[index[op.peer]].erase({rp.rank, op.tag, s.index});
      break;
    }
    case CommOp::Kind::WaitSends: {
      // Sends posted before `first` must have been received.
      size_t kept = std::min<size_t>(op.keep, sendsAt[r].size());
      size_t first = kept ? sendsAt[r][sendsAt[r].size() - kept] : SIZE_MAX;
      for (auto &u : unreceived[r])
        if (std::get<2>(u) < first)
          return "";
      break;
    }
    case CommOp::Kind::Collective: {
      auto g = rp.groups.find(op.group);
      if (g == rp.groups.end() || g->second.empty())
        return where(r) + " runs " + op.signature + " on group '" + op.group +
               "', which the rank does not have";
      const std::vector<int64_t> &members = g->second;
      int64_t &seq = collectiveSeq[r][op.group];
      auto &arrived = arrivals[{op.group + listText(members), seq}];
      arrived.insert({rp.rank, op.signature});
      if (arrived.size() < members.size())
        return "";
      for (auto &[m, sig] : arrived)
        if (sig != op.signature)
          return where(r) + " runs " + op.signature + " on group " + op.group + " " +
                 listText(members) + " while rank " + std::to_string(m) + " runs " + sig;
      ++seq;
      break;
    }
    }
    ++pc[r];
    advanced = true;
    return "";
  }

  llvm::ArrayRef<RankProgram> ranks;
  std::map<int64_t, size_t> index;
  std::vector<size_t> pc;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::deque<Sent>> mailbox;
  /// Per rank: its sends not yet received, as (peer, tag, instruction).
  std::vector<std::set<std::tuple<int64_t, int64_t, size_t>>> unreceived;
  /// Per rank: the instruction of each of its sends, in order.
  std::vector<std::vector<size_t>> sendsAt;
  std::vector<std::map<std::string, int64_t>> collectiveSeq;
  std::map<std::pair<std::string, int64_t>, std::map<int64_t, std::string>> arrivals;
};

} // namespace

std::string findDeadlock(llvm::ArrayRef<RankProgram> ranks) { return Simulator(ranks).run(); }

bool readCommunication(const sim::ProgramView &prog, const std::map<int64_t, int64_t> &bytes,
                       RankProgram &rp, std::string &why) {
  std::string label = "rank " + std::to_string(rp.rank);
  auto bytesOf = [&](int64_t id) {
    auto it = bytes.find(id);
    return it == bytes.end() ? 0 : it->second;
  };
  auto sizes = [&](size_t k, llvm::StringRef field) {
    std::string s;
    if (const json::Array *a = prog.getArray(k, field))
      for (const json::Value &id : *a)
        s += " " + std::to_string(bytesOf(id.getAsInteger().value_or(-1)));
    return s;
  };
  auto firstBytes = [&](size_t k, llvm::StringRef field) -> int64_t {
    const json::Array *a = prog.getArray(k, field);
    return a && !a->empty() ? bytesOf((*a)[0].getAsInteger().value_or(-1)) : 0;
  };
  for (size_t k = 0, n = prog.size(); k < n; ++k) {
    llvm::StringRef op = prog.getString(k, "op").value_or("");
    if (op == "send" || op == "recv") {
      auto peer = prog.getInteger(k, "peer"), tag = prog.getInteger(k, "tag");
      if (!peer || !tag) {
        why = label + " instruction " + std::to_string(rp.ops.size()) + ": " + op.str() +
              " needs peer and tag";
        return false;
      }
      rp.ops.push_back(op == "send" ? CommOp::send(*peer, *tag, firstBytes(k, "in"))
                                    : CommOp::recv(*peer, *tag, firstBytes(k, "out")));
    } else if (op == "wait_sends") {
      rp.ops.push_back(CommOp::waitSends(prog.getInteger(k, "keep").value_or(0)));
    } else if (op == "allreduce" || op == "reduce_scatter" || op == "allgather") {
      std::string group = prog.getString(k, "group").value_or("").str();
      std::string sig = op.str() + " of" + sizes(k, "bufs") + sizes(k, "in") + " ->" +
                        sizes(k, "out") + " bytes";
      rp.ops.push_back(CommOp::collective(group, sig));
    } else {
      rp.ops.push_back(CommOp::compute());
    }
  }
  return true;
}

bool programsFromManifest(const json::Object &manifest, std::vector<RankProgram> &out,
                          std::string &why) {
  const json::Array *ranks = manifest.getArray("ranks");
  if (!ranks) {
    why = "the manifest has no ranks";
    return false;
  }
  for (const json::Value &rv : *ranks) {
    const json::Object *r = rv.getAsObject();
    if (!r || !r->getInteger("rank")) {
      why = "a rank entry lacks its rank number";
      return false;
    }
    RankProgram rp;
    rp.rank = *r->getInteger("rank");
    std::string label = "rank " + std::to_string(rp.rank);
    std::map<int64_t, int64_t> bytes;
    if (const json::Array *bufs = r->getArray("buffers"))
      for (const json::Value &bv : *bufs)
        if (const json::Object *b = bv.getAsObject())
          bytes[b->getInteger("id").value_or(-1)] = b->getInteger("bytes").value_or(0);
    if (const json::Object *groups = r->getObject("groups"))
      for (auto &[name, members] : *groups) {
        std::vector<int64_t> list;
        if (const json::Array *a = members.getAsArray())
          for (const json::Value &m : *a)
            list.push_back(m.getAsInteger().value_or(-1));
        rp.groups[name.str()] = list;
      }
    const json::Array *prog = r->getArray("program");
    if (!prog) {
      why = label + " has no program";
      return false;
    }
    if (!readCommunication(sim::JsonProgramView(*prog), bytes, rp, why))
      return false;
    out.push_back(std::move(rp));
  }
  return true;
}

std::string checkPlanDeadlock(const json::Object &manifest) {
  std::vector<RankProgram> programs;
  std::string why;
  if (!checkElided(manifest, why) || !programsFromManifest(manifest, programs, why))
    return why;
  // dp replicas run the same program against their own peers, and every
  // member of a dp group reaches its collectives in the same order: one
  // replica deadlocks exactly when all do, so an elided plan's replica 0
  // stands for all (its dp groups then have one member).
  if (isElided(manifest))
    for (RankProgram &rp : programs)
      rp.groups["dp"] = {rp.rank};
  return findDeadlock(programs);
}

} // namespace pipemesh::plan
