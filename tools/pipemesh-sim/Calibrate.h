//===- Calibrate.h - measure this machine into a cluster file ---*- C++ -*-===//
//
// `pipemesh-sim --calibrate -o C.json` times the runtime's own CPU kernels
// (pipemesh_cpu_kernels: sgemm through the matmul kernel at several shapes,
// axpy for bandwidth, gelu for vector throughput) and fits the Device of
// Hardware.h to them, and times the kernel of every op with a per-op row
// (gelu, transpose, layer_norm, attention and attention_grad apart, ...) at
// three sizes for its row of Device::kernels (bandwidth or flop rate, and
// overhead); launched under mpirun with two or more ranks it also
// times MPI point-to-point messages (alpha and bandwidth from a ping-pong at
// two sizes) and an all-reduce, every rank measuring at once so the kernel
// numbers include the sharing of the cores. Rank 0 writes the cluster JSON,
// with the raw measurements under "calibration".
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_TOOLS_SIM_CALIBRATE_H
#define PIPEMESH_TOOLS_SIM_CALIBRATE_H

#include <string>

namespace pipemesh::sim {

/// Runs the measurements and writes `outPath` (on rank 0). Returns the
/// process exit code; prints what it measured to stdout (rank 0).
int runCalibration(const std::string &outPath, bool quick);

} // namespace pipemesh::sim

#endif // PIPEMESH_TOOLS_SIM_CALIBRATE_H
