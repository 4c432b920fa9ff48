//===- Evaluation.h - validation loss from the training program -*- C++ -*-===//
//
// pipemesh-run --val-data evaluates the model with the plan's own training
// program: the forward of every micro-batch, the loss, the pipeline sends and
// the collectives run as in a step; the instructions that only serve the
// update are skipped: the kernels and control instructions of backward,
// weight-gradient and recompute actions (`action` B, W, R), instructions
// that write only gradients, the gradient reductions (allreduce,
// reduce_scatter: every rank skips all of them, so every group keeps one
// order of collectives) and `adamw`. Point-to-point transfers run, moving
// whatever their buffers hold, except the messages whose value is stale in
// every evaluation (the backward's gradients): those are left out on both
// sides (MPI pairs the rest by order as before), and a left-out send still
// counts among the posted ones for `wait_sends keep`. Nothing persistent
// changes: the parameters are not updated,
// the gradients are zeroed by the next step, and a ZeRO gather re-gathers
// the unchanged shards.
//
// evaluationSkips() proves that this is sound for the plan at hand before it
// is used: it follows which buffers hold values an evaluation does not
// compute ("stale": written by a skipped instruction, received from a send
// of a stale buffer, reduced by a collective) through every listed program,
// pairing sends with receives as MPI does, and fails, naming the instruction
// and the buffer, when an instruction evaluation runs (other than a
// communication) reads one. Every rank computes the same verdict.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_EVALUATION_H
#define PIPEMESH_RUNTIME_EVALUATION_H

#include "pipemesh/runtime/Plan.h"

#include <vector>

namespace pipemesh::rt {

/// Per instruction of `rank`'s program: whether an evaluation skips it.
/// UniformError when evaluating with the skips would read a value it does
/// not compute, or when no rank evaluates a loss.
std::vector<bool> evaluationSkips(const Plan &plan, const RankPlan &rank);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_EVALUATION_H
