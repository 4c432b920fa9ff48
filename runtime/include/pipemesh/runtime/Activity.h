//===- Activity.h - what this rank is doing, for its last words -*- C++ -*-===//
//
// When a rank of a job dies, Open MPI's mpirun ends the others with SIGTERM
// (then SIGKILL) before their own deadlines (--comm-timeout) expire. So that
// those ranks still say where they were, the executor records its current
// activity here (a pointer store per instruction) and a SIGTERM handler
// prints, async-signal-safely:
//   pipemesh-run: error: rank 0: terminated by signal 15 during step 3,
//   instruction 12 (recv from rank 1, tag 3): the launcher ended the job
//   (another rank failed or died; its message or the launcher's comes first)
// and exits with status 1.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_ACTIVITY_H
#define PIPEMESH_RUNTIME_ACTIVITY_H

#include <cstdint>

namespace pipemesh::rt::activity {

/// Records the current activity (a copy of `what`, cut at 255 bytes).
void set(const char *what);
/// The activity recorded last (what the SIGTERM handler prints).
const char *current();
/// The 0-based step being run (-1 outside the step loop); the message
/// numbers it from 1, like the progress lines.
void setStep(int64_t step);
/// Installs the SIGTERM handler (for multi-rank jobs).
void installTerminationHandler(int rank);
/// Restores the default SIGTERM action (a rank that reported its own error
/// and aborts the job has nothing to add).
void disarm();

} // namespace pipemesh::rt::activity

#endif // PIPEMESH_RUNTIME_ACTIVITY_H
