# Sourced by scripts/lerobot_env.sh and scripts/openpi_client_env.sh: the one way to build, or reuse, an
# environment outside the checkout that is stamped with its requirements.
#
#   reuse_venv VENV REQ...        prints VENV's python and succeeds when its stamp lists exactly REQ...
#   build_venv VENV PYTHON REQ... (re)builds VENV with PYTHON, installs REQ..., stamps it, prints its python
#
# A VENV of the same Python minor version is updated in place when the requirements changed (a LeRobot
# environment holds a few GB of torch: rebuilding it for one new requirement would download them again).
# Progress goes to stderr; the python's path is the last line on stdout.

venv_stamp() { printf '%s\n' "$@"; }

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
  "$venv/bin/python" -m pip install -q "$@" >&2
  venv_stamp "$@" > "$venv/.fasteval-stamp"
  echo "$venv/bin/python"
}
