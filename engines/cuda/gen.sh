#!/usr/bin/env bash
# Regenerates kernels.ptx from kernels.cu with nvcc (engines/cuda/toolchain.sh provides CUDA
# 11.8's). With --check, fails when the committed kernels.ptx differs from what this nvcc writes;
# an nvcc of another release writes other PTX, so the check runs only with the release the
# committed file names, and says so otherwise.
set -euo pipefail
cd "$(dirname "$0")"
release=$(sed -n 's|^// Cuda compilation tools, release \([0-9.]*\),.*|\1|p' kernels.ptx 2>/dev/null || true)
if ! command -v nvcc >/dev/null; then
  echo "gen.sh: no nvcc on PATH (eval \"\$(bash engines/cuda/toolchain.sh)\" provides one)" >&2
  exit 1
fi
have=$(nvcc --version | sed -n 's|.*release \([0-9.]*\),.*|\1|p')
# sm_52 PTX: the lowest target CUDA 11.8 writes by default; a driver JITs it for any newer GPU.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
nvcc -ptx -arch=compute_52 -allow-unsupported-compiler -o "$out" kernels.cu
if [ "${1:-}" = --check ]; then
  if [ "$have" != "$release" ]; then
    echo "gen.sh: nvcc $have is not the $release that wrote kernels.ptx; not checked" >&2
    exit 0
  fi
  if ! cmp -s "$out" kernels.ptx; then
    echo "engines/cuda/kernels.ptx is stale: run bash engines/cuda/gen.sh" >&2
    diff "$out" kernels.ptx | head -20 >&2
    exit 1
  fi
  echo "kernels.ptx is what nvcc $have writes from kernels.cu"
  exit 0
fi
cp "$out" kernels.ptx
echo "wrote kernels.ptx (nvcc $have)"
