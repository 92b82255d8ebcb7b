#!/usr/bin/env bash
# Packs what bench/gpu_check.sh needs on a GPU machine that has CUDA, CMake,
# ninja and PyTorch but none of Debian's packages and no network:
#
#   .gpu/bin/          the GPU tests and tools, built here with nvcc (the
#                      CUDA runtime is linked statically)
#   .gpu/lib/          every shared library they load that is not part of
#                      the C/C++ runtime (RocksDB, abseil, liburing, ...)
#   .gpu/lib/compat/   this machine's libstdc++ and libgcc_s, used there only
#                      when its own are older
#   .gpu/lib/fallback/ compression libraries most machines have (zlib, zstd,
#                      lz4, bzip2), used there only when missing: an older
#                      copy first on the path could break PyTorch there
#   .gpu/python/mlpo/  the PyTorch adapter built for Python 3.12 (the GPU
#                      machine's), when a Python 3.12 with headers is here
#
# Usage: bench/gpu_pack.sh [OUT_DIR]   (default .gpu; git ignores it)
# Then carry OUT_DIR with the working tree and run bench/gpu_check.sh there.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.gpu}
echo "== build (Release, CUDA required)"
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DMLPO_WERROR=ON \
  -DMLPO_WITH_CUDA=ON
py312=${MLPO_PY312:-}
if [ -z "$py312" ]; then
  for c in /usr/bin/python3.12 /root/.pyenv/versions/3.12*/bin/python3.12 \
           python3.12; do
    # A usable interpreter with its headers (pyenv's shims are not).
    if "$c" -c 'import sysconfig, os, sys
sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' \
       >/dev/null 2>&1; then py312=$(command -v "$c"); break; fi
  done
fi
if [ -n "$py312" ]; then
  echo "== the PyTorch adapter for $py312"
  if ! { cmake -S . -B build-py312 -G Ninja -DCMAKE_BUILD_TYPE=Release \
           -DMLPO_WITH_CUDA=ON -DPython_EXECUTABLE="$py312" \
           -DBUILD_TESTING=OFF >build-py312.configure.log 2>&1 &&
         ninja -C build-py312 mlpo_python >/dev/null; }; then
    echo "== the adapter did not build for $py312 (build-py312.configure.log);" \
         "packing without it"
    py312=
  fi
else
  echo "== no Python 3.12 here: the adapter's CUDA test will not run there"
fi
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/compat" "$out/lib/fallback"
bins="build/tests/gpu_backend_test build/tests/device_step_test
  build/tests/buffer_pool_test build/tests/optimizer_test
  build/bench/mlpo-bench build/tools/mlpo"
cp $bins "$out/bin/"
objs="$bins"
if [ -n "$py312" ]; then
  mkdir -p "$out/python"
  cp -r build-py312/python/mlpo "$out/python/"
  objs="$objs $(ls build-py312/python/mlpo/_mlpo*.so)"
fi
# Everything they load, less the C and C++ runtimes the machine has.
for f in $objs; do ldd "$f"; done | awk '/=> \// {print $3}' | sort -u |
  while read -r lib; do
    case $(basename "$lib") in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|\
      libcuda.so*) ;;
      libstdc++.so*|libgcc_s.so*) cp -L "$lib" "$out/lib/compat/" ;;
      libz.so*|libzstd.so*|liblz4.so*|libbz2.so*)
        cp -L "$lib" "$out/lib/fallback/" ;;
      *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
strip --strip-unneeded "$out"/bin/* "$out"/lib/*.so* 2>/dev/null || true
size=$(du -sm "$out" | cut -f1)
echo "== packed $out: ${size} MiB ($(find "$out/lib" -name '*.so*' | wc -l) libraries)"
[ "$size" -lt 60 ] || { echo "$out is over 60 MiB: too big to carry" >&2; exit 1; }
