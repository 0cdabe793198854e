"""pytest setup for the Python package's tests: exits 77 (ctest's skip) where torch is
missing, and fills in the build's paths when the tests run outside ctest."""
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_configure(config):
    try:
        import torch  # noqa: F401
    except ImportError as e:
        pytest.exit(f"skipped: torch is not importable in {sys.executable} ({e}); install "
                    "Debian's python3-torch", returncode=77)
    build = os.environ.get("HVDRUN_BUILD_DIR", os.path.join(REPO, "build"))
    os.environ.setdefault("HVDRUN_LIBRARY", os.path.join(build, "runtime", "libhvdrun.so"))
    os.environ.setdefault("HVDRUN_LAUNCHER", os.path.join(build, "cli", "hvdrun"))
    os.environ.setdefault("HVDRUN_TEST_CLUSTER",
                          os.path.join(build, "tests", "support", "hvdrun_test_cluster"))
    if os.path.join(REPO, "python") not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.path.join(REPO, "python"), os.environ.get("PYTHONPATH")) if p)
    sys.path.insert(0, os.path.join(REPO, "python"))


_outcomes = {"passed": 0, "failed": 0, "skipped": 0}


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _outcomes[report.outcome] = _outcomes.get(report.outcome, 0) + 1


def pytest_sessionfinish(session, exitstatus):
    # A file whose every test was skipped (no GPU, say) is reported to ctest as skipped.
    if exitstatus == 0 and _outcomes["skipped"] and not _outcomes["passed"] \
            and not _outcomes["failed"]:
        session.exitstatus = 77
