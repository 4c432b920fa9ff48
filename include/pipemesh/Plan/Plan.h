//===- Plan.h - compiling a module into a plan artifact ---------*- C++ -*-===//
//
// The plan is what pipemesh-run executes: a manifest (JSON), per-rank
// instruction streams with arena offsets, and the initial weights as
// safetensors, in one checksummed file. docs/plan-format.md specifies it.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_PLAN_PLAN_H
#define PIPEMESH_PLAN_PLAN_H

#include "pipemesh/Plan/PlanFormat.h"
#include "pipemesh/Plan/Schedule.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pipemesh::plan {


/// The `--pipemesh-compile="..."` options.
struct CompileOptions {
  int64_t batch = 0; // micro-batch size (sequences per micro-batch per replica)
  int64_t seq = 0;
  int64_t pp = 1, dp = 1, vpp = 1;
  int64_t microbatches = 1;
  /// gpipe | 1f1b | interleaved | elastic | bfs | zb-h1 | zb-h2
  std::string schedule = "1f1b";
  /// Interleaved: micro-batches per group through one chunk (0 = pp).
  int64_t group = 0;
  /// Elastic: forward and backward micro-batch group sizes (empty: one group
  /// of all micro-batches).
  std::vector<int64_t> fwdGroups, bwdGroups;
  /// Elastic `groups=auto`: choose the forward and backward group sizes by
  /// simulating candidates on `cluster` (the simulator is the cost function).
  bool autoGroups = false;
  /// Elastic and bfs: `defer-w=none|chunk|all`, whether the backward is split
  /// into B and W and when the W's run (ScheduleConfig::deferW). Unset: not
  /// given (none, and groups=auto tries all three).
  std::optional<DeferW> deferW;
  /// A pipemesh-sim cluster preset or cluster JSON file, for groups=auto and
  /// --explain.
  std::string cluster = "cpu";
  /// Print the chosen plan's predicted step against the best plan of each
  /// other schedule (pipemesh-opt --explain).
  bool explain = false;
  /// ZeRO level over the dp replicas (0..3; nothing is sharded when dp = 1).
  int64_t zero = 0;
  /// Mixed sharding: one level per chunk (`zero=0,1,3,3`), or chosen per
  /// chunk by the simulator within mem-limit (`zero=auto`). Empty and false:
  /// `zero` everywhere.
  std::vector<int64_t> zeroChunks;
  bool zeroAuto = false;
  /// ZeRO-3: how many layers' parameter gathers run ahead of the layer in
  /// use, into the next action's (DeepSpeed's prefetch bucket, counted in
  /// layers). Each costs a layer's whole parameters in memory.
  int64_t prefetch = 1;
  /// prefetch=auto: the depth (1 to 4) whose plan the simulator finds fastest
  /// within mem-limit, for the chosen sharding (needs a ZeRO-3 chunk).
  bool prefetchAuto = false;
  /// Explicit transformer layers per chunk for --pmesh-partition (empty: the
  /// partitioner balances by its cost model).
  std::vector<int64_t> layersPerStage;
  /// Activation recomputation: none, selective (the attention cores), full
  /// (each chunk keeps only its inputs) or auto (per pipeline rank, the
  /// least of those that fits mem-limit).
  std::string recompute = "none";
  /// Bytes one rank's arena may use (0: no limit). A plan over it is an
  /// error naming the rank.
  int64_t memLimit = 0;
  bool shapesOnly = false;
  /// Storage type of activation buffers: "f32", or "bf16" (computed in f32,
  /// rounded to bf16 where stored: half the activation memory and half the
  /// bytes of every pipeline message; parameters, gradients and AdamW state
  /// stay f32).
  std::string activations = "f32";
  /// What the forward and backward read of each trained parameter: "f32"
  /// (the master weight itself), or "bf16" (a bf16 copy of the f32 master
  /// weight that AdamW rounds after each update, as Megatron's and FSDP's
  /// mixed precision keep it: ZeRO gathers move half the bytes, and the
  /// whole parameters of ZeRO-1/2 take half the memory; gradients and AdamW
  /// state stay f32).
  std::string params = "f32";
  /// Element type of the data-parallel gradient reductions: "f32", or
  /// "bf16" (each replica's f32 gradient rounded to bf16 and summed in bf16,
  /// the sum widened back: DeepSpeed's communication_data_type, FSDP's
  /// reduce_dtype; half the bytes, bf16 precision in the sum).
  std::string gradReduce = "f32";
  /// How the data-parallel collectives run: "flat" (one ring or tree over
  /// the dp group) or "hierarchical" (within each node, then between the
  /// nodes: a node's inter-node link carries (nodes - 1) / nodes of a buffer
  /// instead of (dp - 1) / dp; pipemesh-run's CPU backend, and the simulator).
  std::string dpCollectives = "flat";
  /// How the model's own `labels` input relates to the tokens: "next" (labels
  /// are the next tokens), "same" (labels = input ids, shifted inside the
  /// model, HuggingFace style) or "auto" (same when the graph slices labels).
  std::string labels = "auto";
};

/// "40GiB", "512MiB", "1.5GB", "123456": bytes; nullopt for anything else.
std::optional<int64_t> parseByteSize(llvm::StringRef text);

/// Parses "batch=8 seq=1024 pp=1 ..." into `opts`; false with `why`.
bool parseCompileOptions(llvm::StringRef text, CompileOptions &opts, std::string &why);

/// Writes the plan for a module that has been through pmesh-autodiff (and,
/// for pp * vpp > 1, pmesh-partition: every @train_step op carries its
/// `pmesh.stage`). Every plan passes the deadlock check before it is written.
mlir::LogicalResult emitPlan(mlir::ModuleOp module, const CompileOptions &opts,
                             llvm::raw_ostream &os);

/// The largest tag a plan may use (MPI guarantees MPI_TAG_UB >= 32767).
constexpr int64_t kMaxMessageTag = 32767;

/// Prints a plan file as readable text; false with `why` for a bad file.
bool printPlan(llvm::StringRef path, llvm::raw_ostream &os, std::string &why);

} // namespace pipemesh::plan

#endif // PIPEMESH_PLAN_PLAN_H
