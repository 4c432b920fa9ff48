#!/usr/bin/env bash
# Packs what bench/gpu.sh needs on a GPU machine that cannot build PipeMesh (no MLIR,
# Open MPI, OpenBLAS or protobuf there, and no network to install them): the CUDA
# build's binaries, the shared libraries they load that such a machine may lack, an
# Open MPI tree for single-process runs, and the plans (compiled here: the tiny test
# plan, and shapes-only GPT-2 124M / 350M plans that bench/fill_plan_weights.py gives
# their weights there). cuBLASLt, NCCL and the driver are the machine's own.
#
#   bench/gpu_bundle.sh [BUILD_DIR]      -> .gpu-bundle/bundle.tar.gz (ignored by git)
#
# then, on the GPU machine, from the repository root:
#   BUNDLE=.gpu-bundle/bundle.tar.gz bench/gpu.sh
# BUILD_DIR (default build) must have been configured with the CUDA backend.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
BUILD=${1:-build}
PY=/usr/bin/python3
BINS=(pipemesh-run pipemesh-cuda-kernels-test pipemesh-cuda-bench)
# pipemesh-run loads the CUDA backend from lib/ beside its bin/ (docs/cuda-backend.md).
PLUGIN=$BUILD/lib/libpipemesh-backend-cuda.so
ninja -C "$BUILD" pipemesh-opt "${BINS[@]}" pipemesh-backend-cuda > /dev/null
for f in "${BINS[@]/#/$BUILD/bin/}" "$PLUGIN"; do
  [[ -f $f ]] || { echo "gpu_bundle.sh: $f missing (configure with -DPIPEMESH_ENABLE_CUDA=ON)" >&2; exit 1; }
done
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/bin" "$T/lib" "$T/plans"
cp "${BINS[@]/#/$BUILD/bin/}" "$T/bin/"
cp "$PLUGIN" "$T/lib/"

# Shared libraries: everything ldd resolves except the C/C++ base system (the GPU
# machine's own is newer than Debian 12's) and the CUDA libraries, which are the
# machine's (cuBLASLt alone is 0.5 GB). cudart is small and carried as a fallback.
ldd "${BINS[@]/#/$BUILD/bin/}" "$PLUGIN" | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libz.so*) ;;
    libcublas*|libnccl*|libcuda.so*) ;;
    *) cp -L "$lib" "$T/lib/" ;;
  esac
done
# The plan checksum for bench/fill_plan_weights.py (make_test_plan.checksum64 loads
# it with ctypes; pipemesh-run inlines the same function).
cp -L "$(ldconfig -p | awk '/libxxhash.so.0 /{print $NF; exit}')" "$T/lib/"
# Open MPI's components (dlopened from its package library directory, found through
# OPAL_PREFIX) and their helper libraries; a component whose dependencies are missing
# there (UCX, libfabric, PSM) is skipped by Open MPI.
OMPI_PKGLIB=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
OMPI_PREFIX=$(ompi_info --path prefix --parsable 2>/dev/null | sed -n 's/^path:prefix://p')
[[ -d $OMPI_PKGLIB && -n $OMPI_PREFIX ]] || { echo "gpu_bundle.sh: cannot find Open MPI's components (ompi_info)" >&2; exit 1; }
mkdir -p "$T/ompi/${OMPI_PKGLIB#"$OMPI_PREFIX"/}" "$T/ompi/share/openmpi"
cp -r "$OMPI_PKGLIB/." "$T/ompi/${OMPI_PKGLIB#"$OMPI_PREFIX"/}/"
cp /usr/share/openmpi/help-*.txt "$T/ompi/share/openmpi/" 2>/dev/null || true
for lib in "$(dirname "$(ldconfig -p | awk '/libmpi.so.40 /{print $NF; exit}')")"/libmca_common_*.so.*; do
  [[ $lib =~ \.so\.[0-9]+$ ]] && cp -L "$lib" "$T/lib/"
done

# Plans: the training test's three (compiled by the test itself, as ctest would) and the
# GPT-2 benchmarks' (shapes only: weights are drawn there).
PIPEMESH_OPT=$BUILD/bin/pipemesh-opt $PY runtime/tests/cuda/test_cuda_training.py \
  --write-plans "$T/plans" > /dev/null
rm -f "$T"/plans/*.onnx*
source bench/gpt2_plan.sh
for m in 124M 350M; do
  gpt2_shapes_plan "$m" "$BUILD/bin/pipemesh-opt" "$PY" "$T/plans/gpt2-$m.shapes.plan"
done
git -C "$REPO" rev-parse --short HEAD > "$T/commit"

mkdir -p .gpu-bundle
tar -C "$T" -czf .gpu-bundle/bundle.tar.gz .
echo "gpu_bundle.sh: .gpu-bundle/bundle.tar.gz ($(du -h .gpu-bundle/bundle.tar.gz | cut -f1)," \
     "$(ls "$T/lib" | wc -l) libraries, commit $(cat "$T/commit"))"
