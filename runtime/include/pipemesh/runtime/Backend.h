//===- Backend.h - compute backends behind the executor --------*- C++ -*-===//
//
// The executor interprets a rank's program by binding every instruction to a
// thunk through an op table (one binder per op name). The CPU backend is the
// default table (runtime/lib/exec/*Ops.cpp) over the host arena. Another
// backend (CUDA: runtime/lib/cuda) brings its own arena in device memory and
// its own op table; the executor, the training loop, checkpoints and the
// world communicator (MPI) stay the same.
//
// Backends other than the CPU are plugins, so that pipemesh-run does not link
// them (a CPU run of a CUDA build neither loads nor needs the CUDA libraries):
// loadBackend("cuda") dlopens lib/libpipemesh-backend-cuda.so beside the
// executable's bin/, checks that the plugin comes from the same build
// (pipemesh_backend_build_id) and calls its pipemesh_register_backend, which
// registers a factory (registerBackend).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_BACKEND_H
#define PIPEMESH_RUNTIME_BACKEND_H

#include "pipemesh/runtime/Arena.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace pipemesh::rt {

class Communicator;
class OpContext;
struct ExecEnv;

using Thunk = std::function<void()>;
using OpBinder = Thunk (*)(OpContext &);
using OpTable = std::map<std::string, OpBinder>;

/// The CPU op table (every op the runtime knows).
const OpTable &opTable();

/// What a backend is asked for on the command line.
struct BackendOptions {
  std::string precision = "fp32"; ///< fp32 | bf16 (matmul operands)
  bool deterministic = true;      ///< bit-identical runs (no split-K atomics etc.)
  bool profile = false;           ///< synchronize after every instruction (--profile)
  double commTimeoutSeconds = 300;
};

class ComputeBackend {
public:
  virtual ~ComputeBackend();
  /// For the banner: "cuda (NVIDIA H200, sm_90, fp32, deterministic)".
  virtual std::string name() const = 0;
  /// The arena instructions bind to (buffers at the plan's offsets).
  virtual Arena &arena() = 0;
  /// The op table of this backend.
  virtual const OpTable &ops() const = 0;
  /// Host arena -> backend arena, all bytes (start, after a resume).
  virtual void upload(const Arena &host) = 0;
  /// Backend arena -> host arena: the persistent buffers (parameters,
  /// moments, constants), before a checkpoint or an export.
  virtual void download(Arena &host) = 0;
  /// After binding: creates what the program needs (communicators, scratch).
  virtual void prepare(ExecEnv &env) = 0;
  /// After the last instruction of a step: waits for the device (bounded by
  /// the communication deadline), fills env.state (loss, gradient norm) and
  /// raises errors the device found (a token id out of range).
  virtual void finishStep(ExecEnv &env) = 0;
  /// Planned versus actual memory, for the banner.
  virtual std::string memoryReport() const = 0;
  /// --profile: lines on parts of ops the per-op times cannot separate (a
  /// device backend's operand casts inside its GEMMs); empty by default.
  virtual std::string profileReport() const { return ""; }
  /// --profile: forget what profileReport counted so far (with the executor's
  /// times, after the first step).
  virtual void resetProfile() {}
};

using BackendFactory = std::function<std::unique_ptr<ComputeBackend>(
    const Plan &, const RankPlan &, Arena &host, Communicator &, const BackendOptions &)>;

void registerBackend(const std::string &name, BackendFactory factory);
/// Null when no backend of that name was registered.
const BackendFactory *findBackend(const std::string &name);
/// The registered backend, else the one its plugin registers; an error that
/// names what is missing (no such plugin in this build, a library the plugin
/// needs, a plugin of another build) otherwise.
const BackendFactory &loadBackend(const std::string &name);
/// "cpu", every registered backend and every plugin beside the executable,
/// as one comma-separated list for messages ("cpu, cuda").
std::string availableBackends();

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_BACKEND_H
