//===- CudaBackend.h - the CUDA backend's state (private) -------*- C++ -*-===//
//
// One per rank: the device, its streams, the arena allocation, cuBLASLt,
// scratch, the NCCL communicators and the per-instruction events that order
// the communication streams against the compute stream.
//
// Streams: `compute` runs kernels and control instructions in program order;
// point-to-point transfers run on `up` (messages to a higher rank) and `down`
// (to a lower rank), each with its own NCCL communicator, so a send and a
// receive between the same two ranks never queue behind each other; the dp
// and tied collectives run on `dp` and `tied`. A communication instruction's
// stream first waits for everything the compute stream enqueued before it
// (the data it reads is produced, the bytes it overwrites are consumed); the
// compute stream waits for the transfer at the first later instruction that
// touches any byte of the transferred buffers (buffers share memory by
// liveness, so the check is on byte ranges), or at `wait_sends`.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_LIB_CUDA_CUDABACKEND_H
#define PIPEMESH_RUNTIME_LIB_CUDA_CUDABACKEND_H

#include "CudaUtil.h"

#include "pipemesh/runtime/Backend.h"
#include "pipemesh/runtime/Executor.h"
#include "pipemesh/runtime/PlanBytes.h"
#include "pipemesh/runtime/cuda/CudaKernels.h"

#include <nccl.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace pipemesh::rt::cuda {

inline void checkNccl(ncclResult_t r, const char *what) {
  if (r != ncclSuccess)
    fail("NCCL: ", what, ": ", ncclGetErrorString(r));
}

/// A byte range of the arena.
using Range = ByteRange;

class CudaBackend : public ComputeBackend {
public:
  CudaBackend(const Plan &plan, const RankPlan &rank, Arena &host, Communicator &comm,
              const BackendOptions &opts);
  ~CudaBackend() override;

  std::string name() const override;
  Arena &arena() override { return *devArena; }
  const OpTable &ops() const override;
  void upload(const Arena &host) override;
  void download(Arena &host) override;
  void prepare(ExecEnv &env) override;
  void finishStep(ExecEnv &env) override;
  std::string memoryReport() const override;
  std::string profileReport() const override;
  void resetProfile() override { profiled.clear(); }

  /// --profile: device time of parts of instructions by what they are
  /// ("bf16 operand casts"), measured with events around them.
  std::map<std::string, double> profiled;
  /// Runs `work` on the compute stream; with --profile, adds its device time
  /// to profiled[what].
  template <class F> void timed(const char *what, F &&work) {
    if (!opts.profile) {
      work();
      return;
    }
    checkCuda(cudaEventRecord(profileStart, compute), "cudaEventRecord");
    work();
    checkCuda(cudaEventRecord(profileEnd, compute), "cudaEventRecord");
    checkCuda(cudaEventSynchronize(profileEnd), "cudaEventSynchronize");
    float ms = 0;
    checkCuda(cudaEventElapsedTime(&ms, profileStart, profileEnd), "cudaEventElapsedTime");
    profiled[what] += ms;
  }
  cudaEvent_t profileStart = nullptr, profileEnd = nullptr;

  // --- for the binders (CudaOps.cpp) -------------------------------------------
  const Plan &plan;
  const RankPlan &rank;
  Arena &hostArena;
  Communicator &world;
  BackendOptions opts;
  int device = 0;
  cudaStream_t compute = nullptr, up = nullptr, down = nullptr, dpStream = nullptr,
               tiedStream = nullptr;
  std::unique_ptr<Lt> lt;
  bool bf16() const { return opts.precision == "bf16"; }
  /// Fusions disabled with PIPEMESH_CUDA_FUSE=0.
  bool fuse = true;
  /// The bf16 mode's attention kernels (FlashAttention.cu): operands cast
  /// per tile (PIPEMESH_CUDA_STAGED_ATTENTION=1: staged as bf16 copies),
  /// blocks of 64 rows (PIPEMESH_CUDA_ATTENTION_ROWS=128: 128).
  FlashOptions flash;

  /// Shared compute scratch: binders reserve, thunks read scratch() at run
  /// time (allocated in prepare, after every instruction is bound).
  void reserveScratch(size_t bytes) { scratchBytes = std::max(scratchBytes, bytes); }
  void *scratch() const { return scratchPtr; }
  /// Packing space of the dp collectives (used on the dp stream).
  void reserveCommScratch(size_t bytes) { commScratchBytes = std::max(commScratchBytes, bytes); }
  void *commScratch() const { return commScratchPtr; }

  /// Device-side step state.
  double *lossAcc = nullptr, *normSq = nullptr;
  DeviceError *devError = nullptr;
  bool optimizerInPlan = false;

  /// Instructions another one already does (a GELU fused into its GEMM's
  /// epilogue, a cross_entropy_grad fused into its cross_entropy).
  std::set<size_t> fusedAway;
  /// The bf16 copy of the A operand of the bf16 GEMM at `instruction`, left
  /// at scratch offset 0 when its thunk ends: the GEMM right after it that
  /// reads the same bytes as its A or B (the backward's dW after dX, both
  /// reading dY) takes the copy instead of casting again.
  struct Bf16Operand {
    size_t instruction = SIZE_MAX;
    Range src{0, 0};
    int64_t rows = 0, last = 0, pitch = 0, paddedRows = 0;
    size_t bytes = 0;
  };
  Bf16Operand lastGemmA;
  /// `loss` instructions that read a fused cross-entropy's loss value from
  /// where that kernel put it (by instruction index).
  std::map<size_t, const float *> lossFrom;
  /// Device memory a binder needs for the whole run (freed with the backend).
  void *bindAllocation(size_t bytes);
  size_t bindBytes = 0;
  /// What the bf16 attention's forwards keep for their gradients (row
  /// statistics and a copy of the output, FlashSaved), by the gradient's
  /// instruction index; slots are shared by pairs whose spans do not overlap.
  struct AttentionSlot {
    float *base;
    size_t bytes, freeAfter;
  };
  std::vector<AttentionSlot> attentionSlots;
  std::map<size_t, FlashSaved> attentionSaved;
  /// How many times each fusion applied (listed in the banner).
  std::map<std::string, int> fusions;
  /// Op names sent to the host fallback (copy in, CPU kernel, copy out).
  std::set<std::string> hostOps;
  std::unique_ptr<ExecEnv> hostEnv; ///< the CPU binders' view of the host arena

  /// Byte ranges an instruction reads or writes.
  std::vector<Range> touches(const Instruction &inst) const;
  Range rangeOf(int64_t bufferId) const;

  /// Communication ordering: each communication instruction records `done`
  /// on its stream; the compute stream waits for it before instruction
  /// waitAt (computed in prepare) or at wait_sends / the end of the step.
  struct CommEvent {
    size_t instruction;
    cudaEvent_t ready = nullptr, done = nullptr;
    std::vector<Range> bytes;
    bool isSend = false;
    std::string what;
  };
  std::vector<CommEvent> commEvents;
  /// Returns its index in commEvents.
  size_t newCommEvent(size_t instruction, std::vector<Range> bytes, bool isSend,
                      std::string what);
  /// Called by every thunk before its work: the waits due at this instruction.
  void enter(size_t instruction);
  /// After: with --profile, waits for the device so the executor's per-op
  /// times are real.
  void leave();
  /// wait_sends: the compute stream waits for every send issued so far but
  /// the `keep` most recent.
  void waitSends(size_t keep = 0);
  /// wait_collectives: the compute stream waits for the dp and tied streams.
  void waitCollectives();
  std::vector<size_t> sendsOutstanding;

  // NCCL (world size > 1): point-to-point by direction, the gradient-norm
  // all-reduce over the world, the dp and tied groups.
  ncclComm_t ncclUp = nullptr, ncclDown = nullptr, ncclWorld = nullptr, ncclDp = nullptr,
             ncclTied = nullptr;
  int dpSize = 0, dpRankInGroup = 0, tiedSize = 0, tiedRankInGroup = 0;

private:
  std::unique_ptr<Arena> devArena;
  uint8_t *arenaPtr = nullptr;
  size_t scratchBytes = 0, commScratchBytes = 0;
  void *scratchPtr = nullptr, *commScratchPtr = nullptr;
  std::vector<void *> bindAllocations;
  size_t freeAtStart = 0, freeAfterPrepare = 0, totalMem = 0;
  std::string deviceName;
  int smMajor = 0, smMinor = 0;
  std::vector<std::vector<size_t>> waitsAt; ///< per instruction: commEvents indices
  void setUpNccl();
  void checkTransferOrder() const;
  void computeWaits();
  void waitAll();
};

/// The CUDA op table (CudaOps.cpp).
const OpTable &cudaOpTable();

} // namespace pipemesh::rt::cuda

#endif // PIPEMESH_RUNTIME_LIB_CUDA_CUDABACKEND_H
