"""pytest setup for the TensorFlow tests: they run in the TensorFlow virtualenv
(scripts/tf-venv.sh; ctest uses HVDRUN_TF_PYTHON), exit 77 (ctest's skip) where
TensorFlow is missing, and share tests/python's job helpers."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))

from _jobs import use_build_tree  # noqa: E402
from _outcomes import pytest_runtest_logreport, pytest_sessionfinish  # noqa: E402,F401


def pytest_configure(config):
    try:
        import tensorflow  # noqa: F401
    except ImportError as e:
        pytest.exit(f"skipped: tensorflow is not importable in {sys.executable} ({e}); create "
                    "the TensorFlow virtualenv with scripts/tf-venv.sh", returncode=77)
    use_build_tree()
    # Quiet TensorFlow's start-up banner in the ranks' output.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
