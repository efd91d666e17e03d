#!/usr/bin/env bash
# Install headless Chromium for the report's browser tests (tests/test_report_browser.py).
# Idempotent: does nothing when a chromium binary is already on PATH (or FASTEVAL_CHROMIUM is set).
# Debian/Ubuntu: the distribution's chromium and chromium-driver packages. Needs root (or sudo).
# The tests drive Chromium over the DevTools protocol on a pipe (--remote-debugging-pipe), so no
# Python package is needed; chromium-driver is installed too, for anyone who prefers selenium.
# Prints the path of the chromium binary on its last line.
set -euo pipefail

find_chromium() {
  if [ -n "${FASTEVAL_CHROMIUM:-}" ] && [ -x "${FASTEVAL_CHROMIUM}" ]; then
    echo "${FASTEVAL_CHROMIUM}"; return 0
  fi
  for name in chromium chromium-browser google-chrome-stable google-chrome; do
    if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  done
  return 1
}

if path=$(find_chromium); then
  echo "chromium already installed: $path" >&2
  echo "$path"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "no apt-get here: install Chromium with your package manager, or set FASTEVAL_CHROMIUM=/path/to/chromium" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "installing Chromium needs root (apt-get); run this script as root or with sudo" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
path=$(find_chromium)
"$path" --version >&2
echo "$path"
