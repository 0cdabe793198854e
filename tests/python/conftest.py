"""pytest setup for the Python package's tests: exits 77 (ctest's skip) where torch is
missing, and fills in the build's paths when the tests run outside ctest."""
import sys

import pytest

from _jobs import use_build_tree


def pytest_configure(config):
    try:
        import torch  # noqa: F401
    except ImportError as e:
        pytest.exit(f"skipped: torch is not importable in {sys.executable} ({e}); install "
                    "Debian's python3-torch", returncode=77)
    use_build_tree()


@pytest.fixture
def jobs():
    """Join-mode jobs a test starts (tests/python/_join.py); any node still running at its
    end is killed."""
    started = []
    yield started
    for job in started:
        job.kill()


# A file whose every test was skipped (no GPU, say) is reported to ctest as skipped.
from _outcomes import pytest_runtest_logreport, pytest_sessionfinish  # noqa: E402,F401
