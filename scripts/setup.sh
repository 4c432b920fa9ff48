#!/usr/bin/env bash
# Installs every system dependency PipeMesh needs (Debian bookworm). Idempotent:
# packages already present are skipped, so re-running costs one dpkg query.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache git
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools
  libonnx-dev libprotobuf-dev protobuf-compiler python3-onnx
  libopenmpi-dev openmpi-bin
  # The runtime links OpenBLAS's OpenMP build: BLAS and the kernels share one
  # thread pool (runtime/CMakeLists.txt). Installing it leaves the system's
  # default libblas (the pthread build) as it is.
  libopenblas-dev libopenblas-openmp-dev libgtest-dev
  nlohmann-json3-dev libxxhash-dev
  python3-numpy python3-torch
  clang-14 libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all system packages present"
fi
