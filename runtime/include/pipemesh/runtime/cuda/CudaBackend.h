//===- CudaBackend.h - the CUDA compute backend ----------------*- C++ -*-===//
//
// `pipemesh-run --backend cuda` (docs/cuda-backend.md): the plan's arena is
// one cudaMalloc, every kernel instruction runs on the GPU (cuBLASLt GEMMs,
// the kernels of CudaKernels.h), communication instructions on NCCL
// communicators bootstrapped over MPI, on their own streams ordered by events.
// Compiled only where the CUDA toolkit is found (PIPEMESH_ENABLE_CUDA).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_CUDA_CUDABACKEND_H
#define PIPEMESH_RUNTIME_CUDA_CUDABACKEND_H

#include <string>

namespace pipemesh::rt::cuda {

/// Registers "cuda" with the backend registry (pipemesh/runtime/Backend.h).
void registerCudaBackend();

/// Number of usable CUDA devices; 0 with `reason` saying why (no driver, no
/// device, a driver older than the runtime).
int deviceCount(std::string &reason);

/// The device a rank uses: its node-local rank (MPI_Comm_split_type, else
/// OMPI_COMM_WORLD_LOCAL_RANK / SLURM_LOCALID / MPI_LOCALRANKID) modulo the
/// device count. Call after MPI_Init.
int localRank();

} // namespace pipemesh::rt::cuda

#endif // PIPEMESH_RUNTIME_CUDA_CUDABACKEND_H
