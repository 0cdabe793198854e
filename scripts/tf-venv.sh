#!/usr/bin/env bash
# Creates (or brings up to date) the virtualenv the TensorFlow tests run in: Debian's
# python3 with tests/tensorflow/requirements.txt from PyPI (tensorflow-cpu, pytest,
# cloudpickle; about 1.6 GB, half a minute on a fast link). It lives outside the checkout,
# so every clone and build directory shares one: $HVDRUN_TF_VENV, default
# ~/.cache/hvdrun/tf-venv (where tests/tensorflow/CMakeLists.txt looks). A venv made from
# the same requirements is left as it is. Run by scripts/install-deps.sh.
#   scripts/tf-venv.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv-common.sh
make_venv tf-venv "${1:-${HVDRUN_TF_VENV:-$HOME/.cache/hvdrun/tf-venv}}" tests/tensorflow/requirements.txt \
  'import tensorflow as tf, keras; print("tf-venv: TensorFlow", tf.__version__, "Keras", keras.__version__)'
