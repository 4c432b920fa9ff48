//===- Plugin.cpp - the CUDA backend's plugin entry points -------------------===//
//
// libpipemesh-backend-cuda.so: pipemesh-run dlopens it on `--backend cuda`
// (runtime/lib/exec/Backend.cpp), checks that it comes from the same build,
// then lets it register "cuda" with the backend registry.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/runtime/cuda/CudaBackend.h"

extern "C" {

__attribute__((visibility("default"))) const char *pipemesh_backend_build_id() {
  return PIPEMESH_BUILD_ID;
}

__attribute__((visibility("default"))) void pipemesh_register_backend() {
  pipemesh::rt::cuda::registerCudaBackend();
}

} // extern "C"
