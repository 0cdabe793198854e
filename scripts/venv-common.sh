# shellcheck shell=bash
# Sourced by scripts/tf-venv.sh and scripts/k8s-venv.sh: make_venv NAME VENV REQUIREMENTS
# CHECK creates (or brings up to date) a virtualenv of Debian's python3 with REQUIREMENTS
# from PyPI, left as it is when it was made from the same requirements (a copy of them is
# kept in it as the stamp), then runs the Python one-liner CHECK in it to say what it holds
# (a CHECK that fails, its import broken, fails the script).
make_venv() {
  local name=$1 venv=$2 req=$3 check=$4
  local stamp=$venv/hvdrun-requirements.txt
  if [[ -x $venv/bin/python ]] && cmp -s "$req" "$stamp"; then
    echo "$name: $venv is up to date"
    return 0
  fi
  echo "$name: creating $venv from $req"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
  cp "$req" "$stamp"
  "$venv/bin/python" -c "$check" 2>/dev/null  # its import warnings are not news
}
