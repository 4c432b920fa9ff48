//===- CommOps.cpp - send, recv, wait_sends, collectives, free --------------===//
//
// The communication instructions of pipeline / data-parallel plans
// (docs/parallel-plan.md). Every wait is bounded by --comm-timeout: the
// Communicator throws a CommError naming the transfer (peer, tag, buffer),
// the executor adds the rank and the instruction.
//
//   send        MPI_Isend; the request is kept until wait_sends (or the end
//               of the step); the buffer must stay untouched until then.
//   recv        MPI_Irecv, then polled to completion (exact size checked).
//   wait_sends  completes every outstanding send of this rank (but the "keep"
//               most recent ones).
//   allreduce   in-place sum over the dp or tied group, then * scale; several
//               buffers travel packed in one collective.
//   reduce_scatter  sum over dp of the zero-padded full gradients; member d
//               keeps shard d (packed over pairs: one collective). Both sums
//               may travel as bf16 ("dtype": "bf16", grad-reduce=bf16).
//   allgather   every member's shard into the full (unpadded) parameter
//               ("async" at the end of a step: completed in the next).
//   free        informational (zero=3 parameters after use).
//
//===----------------------------------------------------------------------===//
#include "OpContext.h"

#include "pipemesh/runtime/Communicator.h"
#include "pipemesh/runtime/CpuKernels.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace pipemesh::rt {
namespace {

std::string describe(const TensorRef &t) {
  return concat("buffer ", t.info->id, t.info->name.empty() ? "" : " '" + t.info->name + "'", " (",
                t.bytes(), " bytes)");
}

Communicator &commOf(OpContext &c) {
  if (!c.env.comm)
    c.error("needs a communicator (none is attached)");
  return *c.env.comm;
}

/// peer and tag of a send / recv, checked.
std::pair<int, int> peerAndTag(OpContext &c) {
  Communicator &comm = commOf(c);
  double peer = c.field("peer"), tag = c.field("tag");
  if (peer != (int64_t)peer || tag != (int64_t)tag)
    c.error("peer and tag must be integers");
  if (peer < 0 || peer >= comm.size() || (int64_t)peer == c.env.rank.rank)
    c.error("peer ", (int64_t)peer, " is not another rank of this ", comm.size(), "-rank job");
  if (tag < 0 || tag >= comm.maxTag())
    c.error("tag ", (int64_t)tag, " is outside [0, ", comm.maxTag(),
            ") (the largest tag is reserved for the warm-up)");
  return {(int)peer, (int)tag};
}

Thunk bindSend(OpContext &c) {
  c.cls = InstrClass::Comm;
  c.expectCounts(1, 1, 0, 0);
  auto [peer, tag] = peerAndTag(c);
  TensorRef t = c.in(0);
  c.activity = concat("send of buffer ", t.info->id, " to rank ", peer, ", tag ", tag);
  std::string what = concat("send of ", describe(t), " to rank ", peer, ", tag ", tag,
                            " (posted by instruction ", c.inst.index, ")");
  ExecEnv *env = &c.env;
  return [env, t, peer = peer, tag = tag, what] {
    env->pendingSends.post(env->comm->isend(t.data, t.bytes(), peer, tag, what));
  };
}

Thunk bindRecv(OpContext &c) {
  c.cls = InstrClass::Comm;
  c.expectCounts(0, 0, 1, 1);
  auto [peer, tag] = peerAndTag(c);
  TensorRef t = c.out(0);
  c.activity = concat("recv of buffer ", t.info->id, " from rank ", peer, ", tag ", tag);
  std::string what = concat("receive of ", describe(t), " from rank ", peer, ", tag ", tag);
  ExecEnv *env = &c.env;
  return [env, t, peer = peer, tag = tag, what] {
    env->comm->irecv(t.data, t.bytes(), peer, tag, what)->wait();
  };
}

Thunk bindWaitSends(OpContext &c) {
  c.cls = InstrClass::Comm;
  c.expectCounts(0, 0, 0, 0);
  commOf(c);
  // "keep": leave the k most recent sends outstanding (the compiler places
  // such waits mid-step so that older sent buffers can be reused).
  int64_t keep = c.count("keep");
  ExecEnv *env = &c.env;
  return [env, keep] { env->pendingSends.waitAllBut((size_t)keep); };
}

/// A collective's group ("dp", or "tied" where allowed). Every collective
/// binder asks it, so its "async" is read here too: such a collective may
/// complete at a later wait_collectives, and running it to completion where
/// it is issued is one valid schedule of it.
Group groupOf(OpContext &c, bool tiedAllowed) {
  (void)c.flag("async", false);
  const nlohmann::json *it = c.fieldValue("group");
  std::string g = it && it->is_string() ? it->get<std::string>() : "";
  if (g == "dp")
    return Group::Dp;
  if (g == "tied" && tiedAllowed)
    return Group::Tied;
  c.error("\"group\" must be ", tiedAllowed ? "\"dp\" or \"tied\"" : "\"dp\"", ", got ",
          it ? it->dump() : std::string("nothing"));
}

/// Buffer ids of a field that lists them ("bufs").
std::vector<TensorRef> bufferList(OpContext &c, const char *key) {
  const nlohmann::json *it = c.fieldValue(key);
  if (!it || !it->is_array() || it->empty())
    c.error("needs a non-empty \"", key, "\" array of buffer ids");
  std::vector<TensorRef> out;
  for (const auto &id : *it) {
    if (!id.is_number_integer())
      c.error("\"", key, "\" must hold buffer ids, got ", id.dump());
    out.push_back(c.env.arena.tensor(id.get<int64_t>()));
    c.expectFloat(out.back(), std::string(key) + " entry");
  }
  return out;
}

/// Reserves n floats of the shared packing space (ExecEnv::commScratch);
/// thunks reach it through the env at run time.
void reserveScratch(OpContext &c, size_t n) {
  if (c.env.commScratch.size() < n)
    c.env.commScratch.resize(n);
}

void scaleInPlace(float *x, int64_t n, float s) {
  if (s != 1.0f)
    for (int64_t i = 0; i < n; ++i)
      x[i] *= s;
}

/// A reduction's element type on the wire: "dtype": "bf16" (grad-reduce=bf16)
/// rounds the f32 buffers to bf16, sums bf16 and widens the result back.
bool reducesInBf16(OpContext &c) {
  const nlohmann::json *it = c.fieldValue("dtype");
  if (!it)
    return false;
  if (!it->is_string() || (*it != "bf16" && *it != "f32"))
    c.error("\"dtype\" must be \"f32\" or \"bf16\", got ", it->dump());
  return *it == "bf16";
}

/// Floats of commScratch that hold n bf16 values.
size_t bf16Floats(size_t n) { return (n + 1) / 2; }

Thunk bindAllreduce(OpContext &c) {
  c.cls = InstrClass::Comm;
  Communicator &comm = commOf(c);
  Group g = groupOf(c, true);
  if (comm.groupSize(g) == 0)
    c.error("rank ", c.env.rank.rank, " is in no ", groupName(g), " group (the plan's groups.",
            groupName(g), " is empty)");
  std::vector<TensorRef> bufs = bufferList(c, "bufs");
  float scale = (float)c.field("scale", 1.0);
  const bool bf16 = reducesInBf16(c);
  int64_t total = 0;
  for (const TensorRef &t : bufs)
    total += t.numel;
  const char *unit = bf16 ? " floats summed in bf16" : " floats";
  c.activity = concat("all-reduce of ", bufs.size(), " buffer(s), ", total, unit, ", on the ",
                      groupName(g), " group");
  std::string what = concat("all-reduce of ", total, unit, " (", bufs.size(), " buffer(s), first ",
                            describe(bufs[0]), ") on the ", groupName(g), " group");
  if (bf16)
    reserveScratch(c, bf16Floats(total));
  else if (bufs.size() > 1)
    reserveScratch(c, total);
  Communicator *cm = &comm;
  ExecEnv *env = &c.env;
  return [cm, env, g, bufs, scale, total, what, bf16] {
    if (bf16) {
      auto *s = reinterpret_cast<uint16_t *>(env->commScratch.data());
      int64_t off = 0;
      for (const TensorRef &t : bufs)
        cpu::roundBf16Buffer(t.as<float>(), s + off, t.numel), off += t.numel;
      cm->groupAllreduceBf16(g, s, total, what);
      off = 0;
      for (const TensorRef &t : bufs) {
        cpu::widenBf16Buffer(s + off, t.as<float>(), t.numel);
        scaleInPlace(t.as<float>(), t.numel, scale);
        off += t.numel;
      }
      return;
    }
    if (bufs.size() == 1) {
      cm->groupAllreduce(g, bufs[0].as<float>(), total, what);
      scaleInPlace(bufs[0].as<float>(), total, scale);
      return;
    }
    float *s = env->commScratch.data();
    int64_t off = 0;
    for (const TensorRef &t : bufs) {
      std::memcpy(s + off, t.data, t.bytes());
      off += t.numel;
    }
    cm->groupAllreduce(g, s, total, what);
    scaleInPlace(s, total, scale);
    off = 0;
    for (const TensorRef &t : bufs) {
      std::memcpy(t.data, s + off, t.bytes());
      off += t.numel;
    }
  };
}

/// One (full, shard) pair of a reduce_scatter or allgather.
struct ShardPair {
  TensorRef full, shard;
  int64_t offset; ///< of this pair's shard in a member's packed block
};

/// Checks the pairs: shard sizes S_i > 0, full sizes N_i <= dp * S_i (the
/// full buffer is the parameter, or the parameter padded), and a shard buffer
/// that declares its elem_offset sits at this member's place. Every buffer
/// is f32 or (`bf16Allowed`, an all-gather of params=bf16 copies) every one
/// is bf16.
std::vector<ShardPair> shardPairs(OpContext &c, const std::vector<int64_t> &fullIds,
                                  const std::vector<int64_t> &shardIds, int members, int me,
                                  int64_t &blockTotal, bool bf16Allowed = false) {
  if (fullIds.empty() || fullIds.size() != shardIds.size())
    c.error("needs as many inputs as outputs (pairs of full buffer and shard), has ", c.numIn(),
            " and ", c.numOut());
  std::vector<ShardPair> pairs;
  blockTotal = 0;
  for (size_t i = 0; i < fullIds.size(); ++i) {
    TensorRef full = c.env.arena.tensor(fullIds[i]), shard = c.env.arena.tensor(shardIds[i]);
    DType want = bf16Allowed && c.env.arena.tensor(fullIds[0]).dtype == DType::BF16 ? DType::BF16
                                                                                   : DType::F32;
    c.expectDType(full, want, "full buffer");
    c.expectDType(shard, want, "shard");
    int64_t S = shard.numel, N = full.numel;
    if (S == 0 || N > (int64_t)members * S)
      c.error("full ", describe(full), " of ", N, " elements does not split into ", members,
              " shards of ", describe(shard), " (", S, " elements)");
    if (shard.info->isShard() && shard.info->elemOffset != (int64_t)me * S)
      c.error("shard ", describe(shard), " holds elements from ", shard.info->elemOffset,
              " but this rank is member ", me, " of its dp group, whose shard starts at ",
              (int64_t)me * S);
    pairs.push_back({full, shard, blockTotal});
    blockTotal += S;
  }
  return pairs;
}

Thunk bindReduceScatter(OpContext &c) {
  c.cls = InstrClass::Comm;
  Communicator &comm = commOf(c);
  Group g = groupOf(c, false);
  const int members = comm.groupSize(g), me = comm.groupRank(g);
  int64_t block = 0;
  std::vector<ShardPair> pairs = shardPairs(c, c.inst.in, c.inst.out, members, me, block);
  float scale = (float)c.field("scale", 1.0);
  const bool bf16 = reducesInBf16(c);
  const char *unit = bf16 ? " floats summed in bf16" : " floats";
  c.activity = concat("reduce-scatter of ", pairs.size(), " buffer(s), ", block, unit,
                      " per shard, on the dp group");
  std::string what = concat("reduce-scatter of ", pairs.size(), " buffer(s) (first ",
                            describe(pairs[0].full), ") into shards of ", block, unit,
                            " on the dp group");
  // Direct when one f32 pair needs no padding; else packed: member d's block
  // holds, pair after pair, shard d of each full buffer (zero-padded), as f32
  // or (bf16) rounded.
  bool direct = !bf16 && pairs.size() == 1 && pairs[0].full.numel == (int64_t)members * block;
  // Packing space: the send blocks, then the received shard (in floats, or
  // bf16 values two to a float).
  const size_t sendN = direct ? 0 : (size_t)members * block;
  const size_t recvN = pairs.size() == 1 && !bf16 ? 0 : block;
  reserveScratch(c, bf16 ? bf16Floats(sendN) + bf16Floats(recvN) : sendN + recvN);
  Communicator *cm = &comm;
  ExecEnv *env = &c.env;
  return [cm, env, g, pairs, block, members, scale, what, direct, sendN, bf16] {
    float *scratch = env->commScratch.data();
    auto *scratch16 = reinterpret_cast<uint16_t *>(scratch);
    const float *in = direct ? pairs[0].full.as<float>() : scratch;
    if (!direct) {
      for (int d = 0; d < members; ++d)
        for (const ShardPair &p : pairs) {
          const int64_t S = p.shard.numel, first = d * S, at = (int64_t)d * block + p.offset;
          const int64_t n = std::max<int64_t>(0, std::min(S, p.full.numel - first));
          if (bf16) {
            if (n > 0)
              cpu::roundBf16Buffer(p.full.as<float>() + first, scratch16 + at, n);
            std::fill(scratch16 + at + n, scratch16 + at + S, (uint16_t)0);
            continue;
          }
          if (n > 0)
            std::memcpy(scratch + at, p.full.as<float>() + first, n * sizeof(float));
          std::fill(scratch + at + n, scratch + at + S, 0.0f);
        }
    }
    if (bf16) {
      uint16_t *out16 = scratch16 + 2 * bf16Floats(sendN);
      cm->groupReduceScatterBf16(g, scratch16, out16, block, what);
      for (const ShardPair &p : pairs) {
        cpu::widenBf16Buffer(out16 + p.offset, p.shard.as<float>(), p.shard.numel);
        scaleInPlace(p.shard.as<float>(), p.shard.numel, scale);
      }
      return;
    }
    float *out = pairs.size() == 1 ? pairs[0].shard.as<float>() : scratch + sendN;
    cm->groupReduceScatter(g, in, out, block, what);
    scaleInPlace(out, block, scale);
    if (pairs.size() > 1)
      for (const ShardPair &p : pairs)
        std::memcpy(p.shard.data, out + p.offset, p.shard.bytes());
  };
}

Thunk bindAllgather(OpContext &c) {
  c.cls = InstrClass::Comm;
  Communicator &comm = commOf(c);
  Group g = groupOf(c, false);
  const int members = comm.groupSize(g), me = comm.groupRank(g);
  int64_t block = 0;
  std::vector<ShardPair> pairs =
      shardPairs(c, c.inst.out, c.inst.in, members, me, block, /*bf16Allowed=*/true);
  const uint64_t es = dtypeSize(pairs[0].shard.dtype);
  c.activity = concat("all-gather of ", pairs.size(), " buffer(s), ", block, " ",
                      dtypeName(pairs[0].shard.dtype), " elements per shard, on the dp group");
  std::string what = concat("all-gather of ", pairs.size(), " buffer(s) (first ",
                            describe(pairs[0].shard), ") into full buffers on the dp group");
  bool direct = pairs.size() == 1 && pairs[0].full.numel == (int64_t)members * block;
  // Packing space: this member's packed shards, then the gathered blocks
  // (in bytes; the space is counted in floats).
  const uint64_t sendBytes = pairs.size() == 1 ? 0 : block * es;
  const uint64_t bytes = sendBytes + (direct ? 0 : (uint64_t)members * block * es);
  reserveScratch(c, (bytes + sizeof(float) - 1) / sizeof(float));
  Communicator *cm = &comm;
  ExecEnv *env = &c.env;
  return [cm, env, g, pairs, block, members, what, direct, sendBytes, es] {
    auto *scratch = reinterpret_cast<uint8_t *>(env->commScratch.data());
    const void *in = pairs[0].shard.data;
    if (pairs.size() > 1) {
      for (const ShardPair &p : pairs)
        std::memcpy(scratch + p.offset * es, p.shard.data, p.shard.bytes());
      in = scratch;
    }
    uint8_t *out = direct ? pairs[0].full.as<uint8_t>() : scratch + sendBytes;
    cm->groupAllgather(g, in, out, block * es, what);
    if (!direct)
      for (int d = 0; d < members; ++d)
        for (const ShardPair &p : pairs) {
          const int64_t S = p.shard.numel, first = d * S;
          const int64_t n = std::max<int64_t>(0, std::min(S, p.full.numel - first));
          if (n > 0)
            std::memcpy(p.full.as<uint8_t>() + first * es, out + ((int64_t)d * block + p.offset) * es,
                        n * es);
        }
  };
}

/// wait_collectives: completes the rank's "async" collectives. The CPU
/// backend runs every collective to completion where it is issued (a valid
/// schedule of an async collective: MPI's non-blocking collectives progress
/// only inside MPI calls, so there is no overlap to gain on CPUs), so there
/// is nothing left to wait for. "keep" (leave the k most recent outstanding,
/// e.g. the previous step's later parameter gathers) is checked all the same.
Thunk bindWaitCollectives(OpContext &c) {
  c.cls = InstrClass::Comm;
  c.expectCounts(0, 0, 0, 0);
  c.count("keep");
  return [] {};
}

Thunk bindFree(OpContext &c) {
  // Informational: the plan's memory planner already reuses the bytes.
  c.cls = InstrClass::Control;
  if (const nlohmann::json *it = c.fieldValue("bufs")) {
    if (!it->is_array())
      c.error("\"bufs\" must be an array of buffer ids");
    for (const auto &id : *it) {
      if (!id.is_number_integer())
        c.error("\"bufs\" must hold buffer ids, got ", id.dump());
      c.env.rank.buffer(id.get<int64_t>()); // exists
    }
  }
  return [] {};
}

} // namespace

void registerCommOps(OpTable &t) {
  t["send"] = bindSend;
  t["recv"] = bindRecv;
  t["wait_sends"] = bindWaitSends;
  t["allreduce"] = bindAllreduce;
  t["reduce_scatter"] = bindReduceScatter;
  t["allgather"] = bindAllgather;
  t["free"] = bindFree;
  t["wait_collectives"] = bindWaitCollectives;
}

bool isCommOp(const std::string &op) {
  static const OpTable comm = [] {
    OpTable t;
    registerCommOps(t);
    return t;
  }();
  return comm.count(op) > 0;
}

} // namespace pipemesh::rt
