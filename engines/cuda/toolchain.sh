#!/usr/bin/env bash
# Fetches what building the cuda-tagged engine needs, from Debian bookworm's contrib and non-free
# components (CUDA 11.8): cuda.h and cuBLAS's headers (nvidia-cuda-dev), and nvcc with what it
# runs to write PTX (nvidia-cuda-toolkit). Nothing is linked: the engine opens libcuda and
# cuBLAS at run time. The result is cached (INFERGATE_CUDA_HOME, default
# ~/.cache/infergate/cuda-11.8) and the script prints the variables to export:
#
#   eval "$(bash engines/cuda/toolchain.sh)"   # sets CGO_CFLAGS and puts nvcc on PATH
#
# Cold, it took 75 s here (2026-11-29: 858 MB downloaded in 19 s, the rest unpacking); warm, none.
set -euo pipefail
home=${INFERGATE_CUDA_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/infergate/cuda-11.8}
if [ ! -f "$home/.complete" ]; then
  started=$(date +%s)
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  list=/etc/apt/sources.list.d/infergate-cuda.sources
  if [ ! -f "$list" ]; then
    cat >"$list" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  apt-get update -qq >/dev/null
  (cd "$work" && apt-get download -qq nvidia-cuda-dev nvidia-cuda-toolkit 2>/dev/null)
  rm -rf "$home.tmp" && mkdir -p "$home.tmp"/{bin,include,nvvm/libdevice}
  # Headers only from the 774 MB package (the libraries are not needed), then it goes.
  dpkg-deb --fsys-tarfile "$work"/nvidia-cuda-dev_*.deb | tar -x -C "$work" ./usr/include
  cp -r "$work"/usr/include/. "$home.tmp/include/"
  rm -f "$work"/nvidia-cuda-dev_*.deb
  dpkg-deb --fsys-tarfile "$work"/nvidia-cuda-toolkit_*.deb | tar -x -C "$work" \
    ./usr/lib/nvidia-cuda-toolkit/bin/nvcc ./usr/lib/nvidia-cuda-toolkit/bin/cicc \
    ./usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc ./usr/bin/ptxas ./usr/bin/fatbinary
  cp "$work"/usr/lib/nvidia-cuda-toolkit/bin/{nvcc,cicc} "$work"/usr/bin/{ptxas,fatbinary} "$home.tmp/bin/"
  cp "$work"/usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc "$home.tmp/nvvm/libdevice/"
  cat >"$home.tmp/bin/nvcc.profile" <<'PROFILE'
TOP = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
PATH += $(TOP)/bin:
INCLUDES += "-I$(TOP)/include" $(_SPACE_)
PROFILE
  touch "$home.tmp/.complete"
  rm -rf "$home" && mv "$home.tmp" "$home"
  echo "CUDA toolchain cached in $home in $(( $(date +%s) - started )) s" >&2
fi
echo "export CGO_CFLAGS='-I$home/include'"
echo "export PATH='$home/bin':\"\$PATH\""
