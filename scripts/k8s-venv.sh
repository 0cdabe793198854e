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
. scripts/venv-common.sh
make_venv k8s-venv "${1:-${HVDRUN_K8S_VENV:-$HOME/.cache/hvdrun/k8s-venv}}" tests/manifests/requirements.txt \
  'import kubernetes_validate as k; print("k8s-venv: kubernetes-validate", k.__version__ if hasattr(k, "__version__") else "")'
