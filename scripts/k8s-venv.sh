#!/usr/bin/env bash
# Creates (or brings up to date) the virtualenv in which tests/manifests checks the
# Kubernetes manifests of docs/kubernetes.md: Debian's python3 with
# tests/manifests/requirements.txt from PyPI (kubernetes-validate, which bundles the
# Kubernetes JSON schemas, and pytest; a few MB). It lives outside the checkout, so every
# clone and build directory shares one: $HVDRUN_K8S_VENV, default ~/.cache/hvdrun/k8s-venv
# (where tests/manifests/CMakeLists.txt looks). A venv made from the same requirements is
# left as it is. Run by scripts/install-deps.sh.
#   scripts/k8s-venv.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-${HVDRUN_K8S_VENV:-$HOME/.cache/hvdrun/k8s-venv}}
req=tests/manifests/requirements.txt
stamp=$venv/hvdrun-requirements.txt
if [[ -x $venv/bin/python ]] && cmp -s "$req" "$stamp"; then
  echo "k8s-venv: $venv is up to date"
  exit 0
fi
echo "k8s-venv: creating $venv from $req"
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
cp "$req" "$stamp"
"$venv/bin/python" -c 'import kubernetes_validate as k; print("k8s-venv: kubernetes-validate", k.__version__ if hasattr(k, "__version__") else "")'
