#!/usr/bin/env bash
# The GPU check of the CUDA engine, in two halves: `build` on any machine with Go (no GPU
# needed; the CUDA headers come from toolchain.sh) and `run` on a GPU machine, which needs only
# the NVIDIA driver and a cuBLAS (11, 12 or 13): no Go, no network.
#
#   bash engines/cuda/gpucheck.sh build            # writes .gpucheck/ (about 15 MB)
#   # carry .gpucheck to the GPU machine, then, in the repository's root there:
#   bash engines/cuda/gpucheck.sh run [OUTDIR]     # about 20 s on an H200
#
# `run` checks the GPU models against the CPU reference (simple, identity_fp32, the dense
# network, a CUDA IPC handle from another process, ModelInfer over gRPC), then measures
# host-device bandwidth against cuMemcpy's peak, the dense layer's GEMM against cuBLAS's own,
# and ModelInfer on the GPU against the CPU at 1 and 16 in flight. Its output goes to
# OUTDIR/gpucheck.txt (OUTDIR: $OUT when set, else .gpucheck).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=.gpucheck

case "${1:-}" in
build)
  eval "$(bash engines/cuda/toolchain.sh)"
  rm -rf "$dir" && mkdir -p "$dir"
  go test -c -tags cuda -trimpath -ldflags='-s -w' -o "$dir/cuda.test" ./engines/cuda
  gzip -9 "$dir/cuda.test"
  git rev-parse HEAD >"$dir/commit" 2>/dev/null || true
  ls -la "$dir"
  ;;
run)
  out=${2:-${OUT:-$dir}}
  mkdir -p "$out"
  exec > >(tee "$out/gpucheck.txt") 2>&1
  echo "commit $(cat "$dir/commit" 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
  # cuBLAS: wherever the machine has it (a CUDA toolkit, or the nvidia-cublas wheel).
  if [ -z "${INFERGATE_LIBCUBLAS:-}" ]; then
    for f in $(ldconfig -p 2>/dev/null | awk '/libcublas\.so\.1[1-3] /{print $NF}') \
      /usr/local/cuda/lib64/libcublas.so.1[1-3] /usr/local/cuda/targets/x86_64-linux/lib/libcublas.so.1[1-3] \
      $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null | tr ' ' '\n' | sed 's|$|/libcublas.so.1[1-3]|'); do
      for g in $f; do
        if [ -f "$g" ]; then export INFERGATE_LIBCUBLAS=$g LD_LIBRARY_PATH="$(dirname "$g")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break 2; fi
      done
    done
  fi
  echo "cuBLAS: ${INFERGATE_LIBCUBLAS:-not found}"
  bin=$(mktemp -d)/cuda.test
  gunzip -c "$dir/cuda.test.gz" >"$bin" && chmod +x "$bin"
  cd engines/cuda
  export INFERGATE_REQUIRE_GPU=1
  status=0
  "$bin" -test.v -test.timeout 5m -test.run '.' || status=$?
  "$bin" -test.run '^$' -test.bench 'BenchmarkCopy|BenchmarkGEMM' -test.benchtime 20x -test.timeout 5m || status=$?
  "$bin" -test.run '^$' -test.bench 'BenchmarkModelInfer' -test.benchtime 1x -test.timeout 5m || status=$?
  echo "gpucheck: exit $status"
  exit $status
  ;;
*)
  echo "usage: $0 build | run [OUTDIR]" >&2
  exit 2
  ;;
esac
