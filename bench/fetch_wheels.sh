#!/usr/bin/env bash
# Download the wheels bench/gpu_check.sh installs offline on a GPU machine without package access
# (Python 3.12, x86-64 Linux, CUDA 13 images): the codec's crc32c, and the GPU peers nvCOMP and DFloat11.
# Run it where pip can reach a registry; the files land in bench/wheels (git-ignored, ~35 MB).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p wheels
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${PYVER:-3.12}" --implementation cp \
  "${plat[@]}" -d wheels crc32c nvidia-nvcomp-cu13 nvidia-libnvcomp-cu13 dfloat11 dahuffman==0.4.2
ls -la wheels
