#!/usr/bin/env bash
# Install the headless OpenGL that MuJoCo's EGL backend renders with (LIBERO, Meta-World, MuJoCo videos):
# Debian's Mesa (EGL and the llvmpipe software rasterizer; a GPU driver's EGL works too).
# Idempotent: does nothing when the packages are installed (or there is no apt-get: then it says what is
# needed). Needs root (or sudo) to install. MUJOCO_GL=egl then renders without a display.
set -euo pipefail

PACKAGES=(libegl1 libegl-mesa0 libgl1-mesa-dri libglx-mesa0 libgl1)

missing=()
if command -v dpkg >/dev/null 2>&1; then
  for pkg in "${PACKAGES[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
else
  if ldconfig -p 2>/dev/null | grep -q 'libEGL.so.1'; then
    echo "no dpkg here; libEGL.so.1 is installed: nothing to do" >&2
    exit 0
  fi
  echo "no dpkg here: install EGL and Mesa's DRI drivers (libEGL.so.1, swrast) with your package manager" >&2
  exit 1
fi
if [ "${#missing[@]}" -eq 0 ]; then
  echo "EGL (Mesa) already installed: ${PACKAGES[*]}" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "no apt-get here: install ${missing[*]} (EGL and Mesa) with your package manager" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "installing ${missing[*]} needs root (apt-get); run this script as root or with sudo" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "installed ${missing[*]}" >&2
