//===- CudaBackend.cpp - device, memory, streams, NCCL, step end -----------===//
#include "CudaBackend.h"

#include <cstdio>

#include "pipemesh/runtime/Communicator.h"
#include "pipemesh/runtime/cuda/CudaBackend.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

namespace pipemesh::rt::cuda {

constexpr size_t kLtWorkspace = 32u << 20; // Hopper's GEMM kernels ask for up to 32 MiB
constexpr double MiB = 1024.0 * 1024.0;

int deviceCount(std::string &reason) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    reason = concat("cudaGetDeviceCount: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
    cudaGetLastError();
    return 0;
  }
  if (n == 0)
    reason = "no CUDA device is visible";
  return n;
}

int localRank() {
  int init = 0;
  MPI_Initialized(&init);
  if (init) {
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
      int r = 0;
      MPI_Comm_rank(node, &r);
      MPI_Comm_free(&node);
      return r;
    }
  }
  for (const char *v : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"})
    if (const char *s = std::getenv(v))
      return std::atoi(s);
  return 0;
}

CudaBackend::CudaBackend(const Plan &plan, const RankPlan &rank, Arena &host, Communicator &comm,
                         const BackendOptions &o)
    : plan(plan), rank(rank), hostArena(host), world(comm), opts(o) {
  std::string reason;
  int n = deviceCount(reason);
  if (n == 0)
    fail("backend 'cuda' is not available on this machine: ", reason);
  if (opts.precision != "fp32" && opts.precision != "bf16")
    fail("--precision must be fp32 or bf16");
  if (const char *f = std::getenv("PIPEMESH_CUDA_FUSE"))
    fuse = std::string(f) != "0";
  if (const char *f = std::getenv("PIPEMESH_CUDA_STAGED_ATTENTION"))
    flash.staged = std::string(f) == "1";
  if (const char *f = std::getenv("PIPEMESH_CUDA_ATTENTION_ROWS")) {
    if (std::string(f) != "64" && std::string(f) != "128")
      fail("PIPEMESH_CUDA_ATTENTION_ROWS must be 64 or 128, got '", f, "'");
    flash.blockRows = std::stoi(f);
  }
  device = localRank() % n;
  checkCuda(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  checkCuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  deviceName = prop.name;
  smMajor = prop.major;
  smMinor = prop.minor;
  checkCuda(cudaFree(nullptr), "creating the CUDA context");
  checkCuda(cudaMemGetInfo(&freeAtStart, &totalMem), "cudaMemGetInfo");

  for (cudaStream_t *s : {&compute, &up, &down, &dpStream, &tiedStream})
    checkCuda(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "cudaStreamCreate");
  lt = std::make_unique<Lt>(kLtWorkspace, opts.deterministic);
  attentionInit();
  if (opts.profile)
    for (cudaEvent_t *e : {&profileStart, &profileEnd})
      checkCuda(cudaEventCreate(e), "cudaEventCreate");

  // The plan's arena: one allocation of exactly arena_bytes (cudaMalloc
  // aligns to 256 bytes, more than the plan's 64).
  checkCuda(cudaMalloc(&arenaPtr, std::max<uint64_t>(rank.arenaBytes, 1)),
            "cudaMalloc (the plan's arena)");
  checkCuda(cudaMemset(arenaPtr, 0, rank.arenaBytes), "cudaMemset (arena)");
  devArena = std::make_unique<Arena>(rank, arenaPtr);

  checkCuda(cudaMalloc(&lossAcc, 2 * sizeof(double)), "cudaMalloc (step state)");
  normSq = lossAcc + 1;
  checkCuda(cudaMemset(lossAcc, 0, 2 * sizeof(double)), "cudaMemset");
  checkCuda(cudaMalloc(&devError, sizeof(DeviceError)), "cudaMalloc (error report)");
  DeviceError none{kErrNone, -1, INT64_MAX, 0};
  checkCuda(cudaMemcpy(devError, &none, sizeof none, cudaMemcpyHostToDevice), "cudaMemcpy");

  // The CPU binders validate every instruction against the host arena (same
  // checks, same messages) and run the ops that have no CUDA kernel.
  hostEnv = std::make_unique<ExecEnv>(plan, rank, hostArena);
  hostEnv->comm = &world;
}

CudaBackend::~CudaBackend() {
  cudaDeviceSynchronize();
  for (CommEvent &e : commEvents) {
    if (e.ready)
      cudaEventDestroy(e.ready);
    if (e.done)
      cudaEventDestroy(e.done);
  }
  for (ncclComm_t c : {ncclUp, ncclDown, ncclWorld, ncclDp, ncclTied})
    if (c)
      ncclCommDestroy(c);
  lt.reset();
  for (void *p : bindAllocations)
    cudaFree(p);
  cudaFree(scratchPtr);
  cudaFree(commScratchPtr);
  cudaFree(lossAcc);
  cudaFree(devError);
  devArena.reset();
  cudaFree(arenaPtr);
  for (cudaStream_t s : {compute, up, down, dpStream, tiedStream})
    if (s)
      cudaStreamDestroy(s);
  for (cudaEvent_t e : {profileStart, profileEnd})
    if (e)
      cudaEventDestroy(e);
}

std::string CudaBackend::profileReport() const {
  std::string out;
  for (const auto &[what, ms] : profiled) {
    char line[160];
    std::snprintf(line, sizeof line, "  of which %-32s %10.2f ms (device time, events)\n",
                  what.c_str(), ms);
    out += line;
  }
  return out;
}

void *CudaBackend::bindAllocation(size_t bytes) {
  void *p = nullptr;
  checkCuda(cudaMalloc(&p, bytes), "cudaMalloc (a binder's buffer)");
  bindAllocations.push_back(p);
  bindBytes += bytes;
  return p;
}

std::string CudaBackend::name() const {
  std::string s = concat("cuda (", deviceName, ", sm_", smMajor, smMinor, ", device ", device,
                         "; ", opts.precision, " matmuls");
  if (opts.deterministic)
    s += ", deterministic";
  const char *sep = "; fused:";
  for (const auto &[what, n] : fusions) {
    s += concat(sep, " ", n, " ", what);
    sep = ",";
  }
  if (!hostOps.empty()) {
    s += "; on the host:";
    for (const std::string &op : hostOps)
      s += " " + op;
  }
  return s + ")";
}

const OpTable &CudaBackend::ops() const { return cudaOpTable(); }

/// The buffers whose contents outlive a step or come from the plan (initial
/// weights, checkpoints): the only ones that cross between host and device.
static bool holdsState(const BufferInfo &b) {
  return b.aliasOf < 0 && (b.kind == BufferKind::Param || b.kind == BufferKind::AdamM ||
                           b.kind == BufferKind::AdamV || b.kind == BufferKind::Constant);
}

void CudaBackend::upload(const Arena &host) {
  checkCuda(cudaDeviceSynchronize(), "before the upload");
  // The rest starts zero, as the host arena does (copying it would read every
  // page of a host mirror that is never otherwise touched).
  checkCuda(cudaMemset(arenaPtr, 0, rank.arenaBytes), "cudaMemset (the arena)");
  for (const BufferInfo &b : rank.buffers)
    if (holdsState(b))
      checkCuda(cudaMemcpy(arenaPtr + b.offset, host.base() + b.offset, b.bytes,
                           cudaMemcpyHostToDevice),
                "cudaMemcpy (arena to the device)");
}

void CudaBackend::download(Arena &host) {
  checkCuda(cudaDeviceSynchronize(), "before the download");
  for (const BufferInfo &b : rank.buffers)
    if (holdsState(b))
      checkCuda(cudaMemcpy(host.base() + b.offset, arenaPtr + b.offset, b.bytes,
                           cudaMemcpyDeviceToHost),
                "cudaMemcpy (arena to the host)");
}

Range CudaBackend::rangeOf(int64_t id) const { return bytesOf(rank, id); }

std::vector<Range> CudaBackend::touches(const Instruction &inst) const {
  return namedBytes(rank, inst);
}

size_t CudaBackend::newCommEvent(size_t instruction, std::vector<Range> bytes, bool isSend,
                                 std::string what) {
  CommEvent e;
  e.instruction = instruction;
  e.bytes = std::move(bytes);
  e.isSend = isSend;
  e.what = std::move(what);
  checkCuda(cudaEventCreateWithFlags(&e.ready, cudaEventDisableTiming), "cudaEventCreate");
  checkCuda(cudaEventCreateWithFlags(&e.done, cudaEventDisableTiming), "cudaEventCreate");
  commEvents.push_back(std::move(e));
  return commEvents.size() - 1;
}

void CudaBackend::computeWaits() {
  // For every transfer, the first later instruction of the program touching
  // its bytes waits for it; none: the end of the step does.
  const auto &prog = rank.program;
  waitsAt.assign(prog.size() + 1, {});
  std::vector<std::vector<Range>> touched(prog.size());
  for (size_t i = 0; i < prog.size(); ++i)
    touched[i] = touches(prog[i]);
  for (size_t e = 0; e < commEvents.size(); ++e) {
    const CommEvent &ce = commEvents[e];
    size_t at = prog.size();
    for (size_t j = ce.instruction + 1; j < prog.size() && at == prog.size(); ++j)
      for (const Range &a : touched[j]) {
        bool hit = false;
        for (const Range &b : ce.bytes)
          hit |= a.overlaps(b);
        if (hit) {
          at = j;
          break;
        }
      }
    waitsAt[at].push_back(e);
  }
}

void CudaBackend::enter(size_t instruction) {
  if (instruction < waitsAt.size())
    for (size_t e : waitsAt[instruction])
      checkCuda(cudaStreamWaitEvent(compute, commEvents[e].done, 0), "cudaStreamWaitEvent");
}

void CudaBackend::leave() {
  if (opts.profile)
    checkCuda(cudaStreamSynchronize(compute), "an instruction (--profile)");
}

void CudaBackend::waitSends(size_t keep) {
  // The `keep` most recent sends stay outstanding (wait_sends "keep").
  size_t done = sendsOutstanding.size() > keep ? sendsOutstanding.size() - keep : 0;
  for (size_t i = 0; i < done; ++i)
    checkCuda(cudaStreamWaitEvent(compute, commEvents[sendsOutstanding[i]].done, 0),
              "cudaStreamWaitEvent");
  sendsOutstanding.erase(sendsOutstanding.begin(), sendsOutstanding.begin() + done);
}

void CudaBackend::waitCollectives() {
  for (cudaStream_t s : {dpStream, tiedStream}) {
    if (!s)
      continue;
    cudaEvent_t ev;
    checkCuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    checkCuda(cudaEventRecord(ev, s), "cudaEventRecord");
    checkCuda(cudaStreamWaitEvent(compute, ev, 0), "cudaStreamWaitEvent");
    checkCuda(cudaEventDestroy(ev), "cudaEventDestroy"); // released once it completes
  }
}

void CudaBackend::checkTransferOrder() const {
  // NCCL matches the messages between two ranks in issue order (it has no
  // tags). The plan pairs them per (sender, receiver, tag); NCCL needs the
  // sends from a to b, in a's program order, to equal b's receives from a in
  // b's program order, tags and sizes included. Checked on the listed
  // programs: in an elided plan replica d's transfers are its listed
  // program's between the peers' replicas d (validateParallelPlan made sure
  // every peer is listed), so this rank's pairs are its listed rank's shifted.
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, uint64_t>>> sends, recvs;
  for (const RankPlan &r : plan.listed)
    for (const Instruction &inst : r.program) {
      if (inst.op != "send" && inst.op != "recv")
        continue;
      int64_t peer = inst.json.value("peer", (int64_t)-1), tag = inst.json.value("tag", (int64_t)-1);
      int64_t id = inst.op == "send" ? (inst.in.empty() ? -1 : inst.in[0])
                                     : (inst.out.empty() ? -1 : inst.out[0]);
      uint64_t bytes = id >= 0 ? r.buffer(id).bytes : 0;
      if (inst.op == "send")
        sends[{r.rank, peer}].push_back({tag, bytes});
      else
        recvs[{peer, r.rank}].push_back({tag, bytes});
    }
  const int64_t listedRank = plan.listedOf(rank.rank).rank, d = rank.rank - listedRank;
  for (const auto &[pair, s] : sends) {
    if (pair.first != listedRank && pair.second != listedRank)
      continue;
    auto it = recvs.find(pair);
    if (it == recvs.end() || it->second != s)
      fail("the transfers from rank ", replica::rank(pair.first, d), " to rank ",
           replica::rank(pair.second, d),
           " are not received in the order they are sent (tags and sizes in program order); "
           "the cuda backend's NCCL point-to-point matches messages in issue order, so it "
           "needs that order (the CPU backend matches by tag)");
  }
}

void CudaBackend::setUpNccl() {
  const int n = world.size(), me = world.rank();
  // Three world communicators from three unique ids rank 0 broadcasts over MPI.
  ncclUniqueId ids[3];
  if (me == 0)
    for (ncclUniqueId &id : ids)
      checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (MPI_Bcast(ids, (int)sizeof ids, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
    fail("MPI_Bcast of the NCCL unique ids failed");
  checkNccl(ncclGroupStart(), "ncclGroupStart");
  checkNccl(ncclCommInitRank(&ncclUp, n, ids[0], me), "ncclCommInitRank (point-to-point up)");
  checkNccl(ncclCommInitRank(&ncclDown, n, ids[1], me), "ncclCommInitRank (point-to-point down)");
  checkNccl(ncclCommInitRank(&ncclWorld, n, ids[2], me), "ncclCommInitRank (world)");
  checkNccl(ncclGroupEnd(), "ncclGroupEnd (communicator creation)");
  // The dp and tied groups: split off the world communicator (collective
  // over the world; ranks outside a group pass NCCL_SPLIT_NOCOLOR).
  auto split = [&](const std::vector<int64_t> &members, ncclComm_t *out, int &size,
                   int &pos, const char *what) {
    int color = NCCL_SPLIT_NOCOLOR, key = 0;
    auto it = std::find(members.begin(), members.end(), (int64_t)me);
    if (it != members.end()) {
      color = (int)*std::min_element(members.begin(), members.end());
      key = (int)(it - members.begin());
      size = (int)members.size();
      pos = key;
    }
    checkNccl(ncclCommSplit(ncclWorld, color, key, out, nullptr), what);
  };
  split(rank.dpGroup, &ncclDp, dpSize, dpRankInGroup, "ncclCommSplit (dp group)");
  split(rank.tiedGroup, &ncclTied, tiedSize, tiedRankInGroup, "ncclCommSplit (tied group)");

  // Warm-up: one tiny all-reduce on each collective communicator, so that the
  // first step does not pay for connection set-up.
  float *tiny = nullptr;
  checkCuda(cudaMalloc(&tiny, 64), "cudaMalloc");
  checkNccl(ncclAllReduce(tiny, tiny, 1, ncclFloat32, ncclSum, ncclWorld, compute), "warm-up");
  if (ncclDp)
    checkNccl(ncclAllReduce(tiny, tiny, 1, ncclFloat32, ncclSum, ncclDp, dpStream), "warm-up");
  if (ncclTied)
    checkNccl(ncclAllReduce(tiny, tiny, 1, ncclFloat32, ncclSum, ncclTied, tiedStream),
              "warm-up");
  checkCuda(cudaDeviceSynchronize(), "the NCCL warm-up");
  cudaFree(tiny);
}

void CudaBackend::prepare(ExecEnv &) {
  if (world.size() > 1) {
    checkTransferOrder();
    setUpNccl();
  } else {
    dpSize = rank.dpGroup.size() == 1 ? 1 : 0;
    tiedSize = rank.tiedGroup.size() == 1 ? 1 : 0;
  }
  if (scratchBytes)
    checkCuda(cudaMalloc(&scratchPtr, scratchBytes), "cudaMalloc (kernel scratch)");
  if (commScratchBytes)
    checkCuda(cudaMalloc(&commScratchPtr, commScratchBytes), "cudaMalloc (collective packing)");
  computeWaits();
  checkCuda(cudaDeviceSynchronize(), "start-up");
  size_t total = 0;
  checkCuda(cudaMemGetInfo(&freeAfterPrepare, &total), "cudaMemGetInfo");
}

void CudaBackend::waitAll() {
  // Everything the other streams hold joins the compute stream.
  for (cudaStream_t s : {up, down, dpStream, tiedStream}) {
    cudaEvent_t ev;
    checkCuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    checkCuda(cudaEventRecord(ev, s), "cudaEventRecord");
    checkCuda(cudaStreamWaitEvent(compute, ev, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ev);
  }
}

void CudaBackend::finishStep(ExecEnv &env) {
  waitAll();
  sendsOutstanding.clear();
  cudaEvent_t end;
  checkCuda(cudaEventCreateWithFlags(&end, cudaEventDisableTiming), "cudaEventCreate");
  checkCuda(cudaEventRecord(end, compute), "cudaEventRecord");
  // Bounded wait: a peer that stopped answering leaves a transfer pending
  // forever; report the first one not done (after --comm-timeout).
  using clock = std::chrono::steady_clock;
  const auto deadline =
      clock::now() + std::chrono::duration<double>(std::max(1.0, opts.commTimeoutSeconds));
  for (;;) {
    cudaError_t q = cudaEventQuery(end);
    if (q == cudaSuccess)
      break;
    if (q != cudaErrorNotReady) {
      cudaEventDestroy(end);
      checkCuda(q, "the step's device work");
    }
    if (clock::now() > deadline) {
      std::string pending = "the compute stream";
      for (const CommEvent &e : commEvents)
        if (cudaEventQuery(e.done) == cudaErrorNotReady) {
          pending = concat("instruction ", e.instruction, " (", e.what, ")");
          break;
        }
      fail("the device work of the step did not finish within --comm-timeout (",
           opts.commTimeoutSeconds, " s); first unfinished: ", pending);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  cudaEventDestroy(end);
  double state[2];
  checkCuda(cudaMemcpy(state, lossAcc, sizeof state, cudaMemcpyDeviceToHost), "cudaMemcpy");
  DeviceError err{};
  checkCuda(cudaMemcpy(&err, devError, sizeof err, cudaMemcpyDeviceToHost), "cudaMemcpy");
  env.state.loss = state[0];
  if (optimizerInPlan) {
    env.state.gradNorm = std::sqrt(state[1]);
    env.state.optimizerRan = true;
  }
  checkCuda(cudaMemset(lossAcc, 0, 2 * sizeof(double)), "cudaMemset");
  if (err.code != kErrNone) {
    const Instruction &inst = rank.program.at((size_t)err.instruction);
    const BufferInfo &ids = rank.buffer(inst.in.size() > 1 ? inst.in[1] : inst.in[0]);
    if (err.code == kErrTokenId)
      fail("instruction ", err.instruction, " (", inst.op, "): token id ", err.value,
           " at position ", err.position, " of ids buffer ", ids.id,
           ids.name.empty() ? "" : " '" + ids.name + "'", " is out of range [0, ",
           rank.buffer(inst.in[0]).shape.at(0), ")");
    const BufferInfo &tg = rank.buffer(inst.in.back());
    fail("instruction ", err.instruction, " (", inst.op, "): target ", err.value,
         " at position ", err.position, " of buffer ", tg.id,
         tg.name.empty() ? "" : " '" + tg.name + "'", " is out of range");
  }
}

std::string CudaBackend::memoryReport() const {
  const double used = (double)(freeAtStart - std::min(freeAtStart, freeAfterPrepare));
  return concat("device memory on rank ", rank.rank, ": plan arena ", rank.arenaBytes / MiB,
                " MiB (planned ", rank.arenaBytes, " bytes, allocated exactly); runtime extra ",
                (kLtWorkspace + scratchBytes + commScratchBytes + bindBytes) / MiB,
                " MiB (cuBLASLt workspace 32, kernel scratch ", scratchBytes / MiB,
                ", collective packing ", commScratchBytes / MiB,
                ", kept across instructions (attention statistics) ", bindBytes / MiB,
                "); measured in use after start-up ", used / MiB,
                " MiB (arena + extra + NCCL + cuBLASLt's own) of ", totalMem / MiB, " MiB");
}

/// The mixed-precision compile options this backend does not run yet: its
/// kernels read and write f32 buffers (bf16 is an operand format of its
/// GEMMs, --precision) and its NCCL sums are f32. The CPU backend runs them.
static void refuseBf16Storage(const Plan &p) {
  struct Option {
    const char *name;
    const std::string &value;
  };
  for (const Option &o : {Option{"activations", p.model.activations},
                          Option{"params", p.model.paramDtype},
                          Option{"grad-reduce", p.model.gradReduce}})
    if (o.value != "f32")
      fail("backend 'cuda' runs f32 buffers and f32 gradient sums; this plan was compiled with ",
           o.name, "=", o.value,
           " (compile without it, and use --precision bf16 for bf16 GEMMs; the cpu backend "
           "runs it)");
}

void registerCudaBackend() {
  registerBackend("cuda", [](const Plan &p, const RankPlan &r, Arena &host, Communicator &c,
                             const BackendOptions &o) -> std::unique_ptr<ComputeBackend> {
    refuseBf16Storage(p);
    if (p.parallel.hierarchicalDp && p.parallel.dp > 1)
      fail("backend 'cuda' runs the dp group's collectives as NCCL's flat rings; this plan was "
           "compiled with dp-collectives=hierarchical (compile without it; the cpu backend "
           "runs it)");
    return std::make_unique<CudaBackend>(p, r, host, c, o);
  });
}

} // namespace pipemesh::rt::cuda
