//===- Plan.h - the plan artifact as the runtime sees it --------*- C++ -*-===//
//
// docs/plan-format.md specifies the file. readPlan() checks the container
// (magic, version, lengths, XXH3-64 checksum), parses the manifest with
// nlohmann::json into these structs (every missing or mistyped field is an
// Error naming its JSON path) and the safetensors weights blob, and validates
// the buffer table (shapes against bytes, offsets inside the arena and
// aligned, persistent buffers overlapping nothing).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_PLAN_H
#define PIPEMESH_RUNTIME_PLAN_H

#include "pipemesh/runtime/DType.h"
#include "pipemesh/runtime/MappedFile.h"
#include "pipemesh/runtime/Safetensors.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace pipemesh::rt {

constexpr char kPlanMagic[8] = {'P', 'M', 'P', 'L', 'A', 'N', 0, 0};
// 2: the checksum is XXH3-64, was FNV-1a. 3: attention's window and softcap
// (a version-2 runtime would ignore them and compute another attention).
constexpr uint32_t kPlanVersion = 3;
constexpr uint64_t kPlanHeaderBytes = 40;
constexpr uint64_t kArenaAlignment = 64;

/// ParamCopy (params=bf16): a bf16 copy of a parameter's f32 master (whole
/// or shard) or a whole gathered from such copies: what the forward and
/// backward read; AdamW writes it, checkpoints keep it, exports ignore it.
enum class BufferKind { Input, Activation, Param, ParamCopy, Grad, AdamM, AdamV, Constant };
const char *bufferKindName(BufferKind k);

struct BufferInfo {
  int64_t id = -1;
  std::string name;
  Dims shape;
  DType dtype = DType::F32;
  uint64_t offset = 0, bytes = 0;
  BufferKind kind = BufferKind::Activation;
  std::string param; ///< the parameter of a param/param_copy/grad/adam_* buffer
  std::string data;  ///< a constant's safetensors entry in the weights blob
  /// First element of the (flattened) parameter a param/grad/moment buffer
  /// holds: 0 unless the buffer is a shard (ZeRO). A shard that runs past the
  /// parameter's end is padded with zeros.
  int64_t elemOffset = 0;
  /// A ZeRO shard (`shard_numel` in the plan: every rank of the DP group
  /// holds `shard_numel` elements of the parameter, zero-padded to
  /// `padded_numel` = dp * shard_numel): -1 when the buffer is not a shard.
  int64_t shardNumel = -1;
  bool isShard() const { return shardNumel >= 0; }
  /// A view of another buffer's memory (a reshape result): same offset and
  /// size as that buffer, which owns the memory; -1 when the buffer owns it.
  int64_t aliasOf = -1;
  int64_t numel = 0;
  /// Lives across steps (params, moments, constants) or across micro-batches
  /// (gradients): may share memory with no other buffer.
  bool persistent() const;
};

struct Instruction {
  size_t index = 0; ///< position in the rank's program (0-based)
  std::string op;
  std::vector<int64_t> in, out;
  nlohmann::json attrs; ///< the "attrs" object (empty object when absent)
  nlohmann::json json;  ///< the whole instruction (control instructions' fields)
};

/// Whether the instruction reads the values of its outputs: kernels write
/// their outputs whole, except `accumulate` and the instructions fused with
/// one (`"accumulate": true`: a GEMM with beta = 1, an embedding gradient
/// added row by row), which add into them. The bf16 staging, the evaluation's
/// staleness analysis and the device backend's liveness questions all ask.
bool readsItsOutputs(const Instruction &inst);

struct RankPlan {
  int64_t rank = 0, ppRank = 0, dpRank = 0;
  /// The global ranks of this rank's data-parallel group (same pp_rank, in
  /// dp order; default: derived from the layout) and of its tied-weight
  /// group (ranks holding a copy of a tied parameter, same dp_rank; empty
  /// when it holds none).
  std::vector<int64_t> dpGroup, tiedGroup;
  std::vector<int64_t> chunks; ///< informational
  bool firstStage = true, lastStage = true;
  uint64_t arenaBytes = 0;
  std::vector<BufferInfo> buffers;
  std::vector<Instruction> program;
  /// The buffer with this id; Error when there is none.
  const BufferInfo &buffer(int64_t id) const;
  /// Indexes `buffers` by id, for a rank plan built in code (the reader
  /// indexes the plans it reads); Error on a repeated id.
  void indexBuffers();

private:
  friend struct PlanParser;
  std::unordered_map<int64_t, size_t> byId;
};

struct ParamInfo {
  std::string name;
  std::string source; ///< ONNX initializer holding the initial values
  Dims shape;
  bool decay = false;
  /// ONNX initializers that store this parameter transposed (an exporter's
  /// folded copy of a tied embedding); --export-onnx rewrites them too.
  std::vector<std::string> transposedCopies;
};

struct ModelInfo {
  std::string source;
  int64_t batch = 0, seq = 0, vocab = 0, numParams = 0;
  double flopsPerStep = 0;
  std::string loss;
  /// Storage type of activation buffers (compile option activations=):
  /// "f32" or "bf16".
  std::string activations = "f32";
  /// What the forward and backward read of trained parameters (compile
  /// option params=): "f32" (the master) or "bf16" (param_copy buffers).
  std::string paramDtype = "f32";
  /// Element type of the data-parallel gradient sums (grad-reduce=): "f32"
  /// or "bf16".
  std::string gradReduce = "f32";
};

struct ParallelInfo {
  int64_t pp = 1, dp = 1, vpp = 1, microbatches = 1, worldSize = 1;
  int64_t zero = 0;     ///< ZeRO level (0..3; default 0)
  std::string schedule; ///< gpipe, 1f1b, interleaved, ... (informational)
  /// `parallel.dp_collectives`: the dp group's collectives run within each
  /// node, then between the nodes (Communicator::setupGroups).
  bool hierarchicalDp = false;
  /// Sequences per step: dp * microbatches * batch.
};

struct Plan {
  std::string path;
  uint32_t version = 0;
  uint64_t checksum = 0; ///< the container's XXH3-64 (identifies the plan)
  ModelInfo model;
  ParallelInfo parallel;
  std::string tokensInput, targetsInput;
  std::vector<ParamInfo> params;
  /// `parallel.replicas_elided`: the manifest lists dp rank 0's program of
  /// each pipeline rank, and the other dp replicas follow by the replica
  /// rules (namespace replica below).
  bool replicasElided = false;
  /// The programs the manifest lists, parsed: every rank's in manifest
  /// order, or, in an elided plan, dp rank 0's of each pipeline rank in
  /// pipeline order. Whatever looks across ranks (validateParallelPlan,
  /// --export-onnx's gathering, the CUDA backend's transfer order) reasons
  /// on these: a replica differs from its listed program only by the rules,
  /// and deriving every replica in every process costs world-size-fold
  /// memory and start-up time (a 1024-rank job: gigabytes per process).
  std::vector<RankPlan> listed;
  /// The replicas readPlan derived from `listed`: the reading rank's own
  /// when it is not dp rank 0 of an elided plan, every one for kEveryRank.
  std::vector<RankPlan> derived;
  /// As read; an elided plan's entries as dp rank 0 runs them (replica::
  /// derive(entry, 0)), its other replicas not expanded.
  nlohmann::json manifest;

  std::shared_ptr<MappedFile> file; ///< keeps `weights` valid
  Safetensors weights;

  /// The program of global rank `r`, listed or derived; Error when the plan
  /// has none or when `r` is a replica this process did not derive.
  const RankPlan &rank(int64_t r) const;
  /// The listed program that global rank `r` runs: its own, or, in an
  /// elided plan, the one of which it is a replica (rank r - r % dp).
  const RankPlan &listedOf(int64_t r) const;
  /// The ranks each listed program stands for: dp in an elided plan, else 1.
  int64_t replicasPerListed() const { return replicasElided ? parallel.dp : 1; }
  const ParamInfo *findParam(const std::string &name) const;
  int64_t globalBatch() const { return parallel.dp * parallel.microbatches * model.batch; }
};

/// The replica rules of an elided plan (docs/parallel-plan.md, "replicas_
/// elided"): replica d of the listed program of pipeline rank q (global rank
/// q * dp, dp rank 0) is global rank q * dp + d with dp_rank d and runs that
/// program with every send/recv `peer` and every `tied` group member plus d,
/// every ZeRO shard at elem_offset + d * shard_numel, and `norm_weight` 0 in
/// the adamw entries marked `norm_dp0_only` (the mark dropped; dp rank 0's
/// weight stays). The runtime states them here only: the reader derives a
/// replica's program with derive(), --export-onnx locates the other
/// replicas' shards with rank() and shardOffset(). The compiler (lib/Plan/
/// Replicas.cpp) and the simulator state them again on purpose: readers
/// that do not share code check one another.
namespace replica {
/// The global rank of replica d of listed rank `r`; also replica d's peer
/// and tied-group member where the listed program names rank `r`.
inline int64_t rank(int64_t r, int64_t d) { return r + d; }
/// The first element replica d holds of a buffer whose listed copy starts
/// at `elemOffset`: a ZeRO shard (shardNumel >= 0) moves by d shards, a
/// whole copy stays.
inline int64_t shardOffset(int64_t elemOffset, int64_t shardNumel, int64_t d) {
  return shardNumel >= 0 ? elemOffset + d * shardNumel : elemOffset;
}
/// Turns a listed manifest entry (`ranks[i]`) into replica d's, in place; d
/// = 0 only drops the norm_dp0_only marks.
void derive(nlohmann::json &entry, int64_t d);
} // namespace replica

/// Cross-rank checks of a multi-rank plan that every rank computes alike
/// (throw UniformError): the rank layout, the groups (every member of a
/// group lists the same group; a DP group's order is its members' dp_rank),
/// and point-to-point pairing: for every (sender, receiver, tag) the sizes of
/// the sends, in program order, equal those of the receives. On the listed
/// programs: in an elided plan a dp group must be its listed rank's
/// replicas, and peers and tied-group members listed ranks (replica d's are
/// theirs plus d, so the pairing of the listed programs is every replica's).
void validateParallelPlan(const Plan &plan);

/// readPlan's `ownRank` that derives every replica of an elided plan (tools
/// and tests that look at the whole job; a training process derives its own).
constexpr int64_t kEveryRank = -1;

/// Reads and validates a plan file for the process of global rank
/// `ownRank`: the listed programs, and, in an elided plan, `ownRank`'s
/// program derived by the replica rules when it is not dp rank 0 (none for a
/// rank outside the world: the caller reports the world size). Errors: "not a
/// PipeMesh plan", "plan format version N, this runtime reads 1", truncated,
/// "damaged" (checksum), missing or malformed manifest fields, invalid buffer
/// tables (an elided plan's listed shards checked for every replica, so that
/// every process reaches the same verdict).
Plan readPlan(const std::string &path, int64_t ownRank);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_PLAN_H
