#!/usr/bin/env bash
# Makes the folder that carries to the GPU machine what its build lacks (issue 25; docs/cuda.md).
#
# The GPU machine (Ubuntu 24.04, glibc 2.39, gcc 13, CUDA 13, Open MPI, libxxhash, no network) has no
# oneDNN, cJSON, liblbfgs or GSL, and maybe no LAPACK, gfortran runtime or zlib/zstd headers. This
# takes those Debian packages (the versions this machine has: `apt-get download`, or, without a
# network, the files dpkg installed here), unpacks them (`dpkg -x`), keeps the headers and shared
# libraries (no static .a: they are most of the bytes and the build links shared), and packs them as
# OUT/prefix.tar.xz, a CMake prefix (include/, lib/) that scripts/gpu_check.sh unpacks and passes as
# CMAKE_PREFIX_PATH, with lib/ on LD_LIBRARY_PATH.
#
# Compatibility. Libraries built against a newer glibc than the target's do not load there. Every
# shared object is checked with objdump -T: its highest GLIBC_ symbol version must be <= 2.39 and its
# highest GLIBCXX_ <= 3.4.32 (gcc 13's libstdc++); the script fails otherwise. Debian 12's are built
# against glibc 2.36 and gcc 12, so they pass.
#
# Usage: scripts/device-bundle.sh [OUT]   (OUT defaults to .device-bundle, which .gitignore ignores;
#        name it in the device tool's `carry`). Prints the bundle's size and manifest.
set -euo pipefail
out=${1:-.device-bundle}
pkgs=(libdnnl-dev libdnnl2 libcjson-dev libcjson1 liblbfgs-dev liblbfgs0 libgsl-dev libgsl27 libgslcblas0
      liblapack-dev liblapack3 libblas-dev libblas3 libgfortran5 libquadmath0 zlib1g-dev zlib1g
      libzstd-dev libzstd1 libxxhash-dev libxxhash0)
max_glibc=2.39
max_glibcxx=3.4.32

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/root" "$work/prefix/include" "$work/prefix/lib"

# 1. The packages: downloaded .debs, else the installed files of the same packages.
if (cd "$work/debs" && apt-get download "${pkgs[@]}" >/dev/null 2>&1); then
  for d in "$work"/debs/*.deb; do dpkg -x "$d" "$work/root"; done
  how="apt-get download + dpkg -x"
else
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || {
      echo "device-bundle: $p: not downloadable (no network?) and not installed here" >&2; exit 1; }
    dpkg -L "$p" | while read -r f; do
      if [[ -f "$f" || -L "$f" ]] && [[ ! -d "$f" ]]; then
        mkdir -p "$work/root$(dirname "$f")"; cp -a "$f" "$work/root$f"
      fi
    done
  done
  how="installed files (dpkg -L), no network"
fi

# 2. A CMake prefix: headers as they are, shared libraries flattened into lib/ (Debian keeps BLAS and
#    LAPACK in blas/ and lapack/ behind update-alternatives links, which dpkg -x does not make).
cp -a "$work/root/usr/include/." "$work/prefix/include/"
# (zlib1g still ships /lib/x86_64-linux-gnu, and its -dev link is absolute: links are made relative.)
for multi in "$work/root/usr/lib/x86_64-linux-gnu" "$work/root/lib/x86_64-linux-gnu"; do
  [[ -d "$multi" ]] || continue
  find "$multi" \( -name '*.so' -o -name '*.so.*' \) \( -type f -o -type l \) | while read -r f; do
    cp -a "$f" "$work/prefix/lib/"
  done
done
for f in "$work"/prefix/lib/*; do
  if [[ -L "$f" && "$(readlink "$f")" == /* ]]; then ln -sf "$(basename "$(readlink "$f")")" "$f"; fi
done
for l in blas lapack; do
  [[ -e "$work/prefix/lib/lib$l.so.3" ]] && ln -sf "lib$l.so.3" "$work/prefix/lib/lib$l.so"
done
# A dangling link means a runtime package is missing from the list.
bad=$(find "$work/prefix/lib" -xtype l)
if [[ -n "$bad" ]]; then echo "device-bundle: dangling links (a package is missing): $bad" >&2; exit 1; fi

# 3. glibc / libstdc++ symbol versions against Ubuntu 24.04's.
verok() { [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -1)" == "$2" ]]; }
echo "device-bundle: highest symbol versions (target: GLIBC <= $max_glibc, GLIBCXX <= $max_glibcxx)"
fail=0
for f in "$work"/prefix/lib/*.so*; do
  [[ -L "$f" ]] && continue
  g=$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1 || true)
  x=$(objdump -T "$f" | grep -o 'GLIBCXX_[0-9.]*' | sed 's/GLIBCXX_//' | sort -V | tail -1 || true)
  printf '  %-28s GLIBC %-6s GLIBCXX %s\n' "$(basename "$f")" "${g:--}" "${x:--}"
  if [[ -n "$g" ]] && ! verok "$g" "$max_glibc"; then echo "device-bundle: $f needs GLIBC_$g" >&2; fail=1; fi
  if [[ -n "$x" ]] && ! verok "$x" "$max_glibcxx"; then echo "device-bundle: $f needs GLIBCXX_$x" >&2; fail=1; fi
done
[[ $fail -eq 0 ]] || { echo "device-bundle: FAIL: a library is too new for Ubuntu 24.04" >&2; exit 1; }

# 4. Pack it, with a manifest of what is inside.
mkdir -p "$out"
rm -f "$out/prefix.tar.xz" "$out/MANIFEST"
{
  echo "# made $(date -u +%FT%TZ) on $(. /etc/os-release; echo "$PRETTY_NAME"), $(ldd --version | head -1) by $how"
  for p in "${pkgs[@]}"; do dpkg-query -W -f='${Package} ${Version}\n' "$p" 2>/dev/null || echo "$p (downloaded)"; done
} > "$out/MANIFEST"
tar -C "$work" -cJf "$out/prefix.tar.xz" prefix
echo "device-bundle: $out/prefix.tar.xz $(du -h "$out/prefix.tar.xz" | cut -f1) ($(du -sh "$work/prefix" | cut -f1) unpacked) by $how"
