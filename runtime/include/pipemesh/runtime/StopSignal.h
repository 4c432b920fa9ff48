//===- StopSignal.h - stop after the step on SIGUSR1 ------------*- C++ -*-===//
//
// A batch system about to end a job (Slurm's `--signal=USR1@120`, a
// preemption) asks pipemesh-run to stop cleanly: SIGUSR1 on any rank makes
// every rank finish the step it is in, write a checkpoint (with
// --checkpoint-dir) and exit 0, so that --resume continues from there. The
// handler only sets a flag; the trainer folds it into the step-end
// all-reduce of the loss, so all ranks stop after the same step.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_STOPSIGNAL_H
#define PIPEMESH_RUNTIME_STOPSIGNAL_H

namespace pipemesh::rt {

/// Installs the SIGUSR1 handler (idempotent).
void installStopSignalHandler();
/// Whether SIGUSR1 arrived since the handler was installed.
bool stopSignalReceived();

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_STOPSIGNAL_H
