#!/usr/bin/env bash
# Installs the system packages memlens needs (Debian/Ubuntu). Runs apt-get only for
# what is missing; uses sudo when not root.
set -euo pipefail
pkgs=()
command -v gcc >/dev/null || pkgs+=(gcc)
command -v g++ >/dev/null || pkgs+=(g++)
command -v clang-22 >/dev/null || pkgs+=(clang-22)
command -v ld.lld-22 >/dev/null || pkgs+=(lld-22)
command -v llvm-nm-22 >/dev/null || pkgs+=(llvm-22)
# The headers memlens's LLVM pass plugin is built against (crates/pass).
[ -f /usr/lib/llvm-22/include/llvm/Plugins/PassPlugin.h ] || pkgs+=(llvm-22-dev)
command -v valgrind >/dev/null || pkgs+=(valgrind)
command -v qemu-x86_64 >/dev/null || pkgs+=(qemu-user)
# Build systems the e2e tests drive (crates/cli/tests/e2e/builds.rs).
command -v libtool >/dev/null || pkgs+=(libtool libtool-bin)
command -v cmake >/dev/null || pkgs+=(cmake)
command -v meson >/dev/null || pkgs+=(meson)
command -v ninja >/dev/null || pkgs+=(ninja-build)
if [ ${#pkgs[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
