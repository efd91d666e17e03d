# Sourced by scripts/lerobot_env.sh and scripts/openpi_client_env.sh: the one way to build, or reuse, an
# environment outside the checkout that is stamped with its requirements.
#
#   reuse_venv VENV REQ...        prints VENV's python and succeeds when its stamp lists exactly REQ...
#   build_venv VENV PYTHON REQ... (re)builds VENV with PYTHON, installs REQ..., stamps it, prints its python
#   torch_first TORCH_REQ...      before build_venv: on a machine without an NVIDIA GPU (no nvidia-smi), makes
#                                 build_venv install TORCH_REQ... from PyTorch's CPU wheel index first, so that
#                                 pip keeps that build instead of pulling the CUDA one (several GB) with REQ...
#                                 FASTEVAL_TORCH=cpu or FASTEVAL_TORCH=cuda overrides the check. An index that
#                                 does not answer in 5 s is passed over at once (pip's configured index then).
#
# A VENV of the same Python minor version is updated in place when the requirements changed (a LeRobot
# environment holds a few GB of torch: rebuilding it for one new requirement would download them again).
# Progress goes to stderr; the python's path is the last line on stdout.

venv_stamp() { printf '%s\n' "$@"; }

TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"
VENV_FIRST=()  # pip arguments build_venv installs before the requirements (not part of the stamp)

index_reachable() {  # index_reachable URL: answers within 5 s (pip would retry an unreachable one for minutes);
  # FASTEVAL_INDEX_REACHABLE=1 or 0 answers without asking (tests, offline mirrors)
  case "${FASTEVAL_INDEX_REACHABLE:-}" in 1) return 0;; 0) return 1;; esac
  python3 - "$1" <<'PY' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/", timeout=5).close()
PY
}

torch_first() {
  local route="${FASTEVAL_TORCH:-auto}"
  if [ "$route" = auto ]; then
    if command -v nvidia-smi >/dev/null 2>&1; then route=cuda; else route=cpu; fi
  fi
  VENV_FIRST=()
  if [ "$route" = cpu ] && ! index_reachable "$TORCH_CPU_INDEX"; then
    echo "torch: $TORCH_CPU_INDEX cannot be reached from here (5 s); torch from pip's configured index." >&2
  elif [ "$route" = cpu ]; then
    VENV_FIRST=("$@" --index-url "$TORCH_CPU_INDEX")
    echo "torch: the CPU build from $TORCH_CPU_INDEX (${FASTEVAL_TORCH:-no nvidia-smi here, so no NVIDIA GPU})." \
         "For the CUDA build, remove the environment and run again with FASTEVAL_TORCH=cuda." >&2
  fi
}

reuse_venv() {
  local venv="$1"; shift
  if [ -x "$venv/bin/python" ] && [ -f "$venv/.fasteval-stamp" ] &&
     [ "$(cat "$venv/.fasteval-stamp")" = "$(venv_stamp "$@")" ]; then
    echo "reusing $venv" >&2
    echo "$venv/bin/python"
    return 0
  fi
  return 1
}

build_venv() {
  local venv="$1" py="$2"; shift 2
  local minor='import sys; print(sys.version_info[:2])'
  if [ -x "$venv/bin/python" ] && [ "$("$venv/bin/python" -c "$minor" 2>/dev/null)" = "$("$py" -c "$minor")" ]; then
    echo "updating $venv (the requirements changed)" >&2
  else
    echo "building $venv with $py" >&2
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip >&2
  fi
  if [ "${#VENV_FIRST[@]}" -gt 0 ] && ! "$venv/bin/python" -m pip install -q "${VENV_FIRST[@]}" >&2; then
    echo "could not install ${VENV_FIRST[*]} first (no access to that index?): the requirements bring their own torch" >&2
  fi
  "$venv/bin/python" -m pip install -q "$@" >&2
  venv_stamp "$@" > "$venv/.fasteval-stamp"
  echo "$venv/bin/python"
}
