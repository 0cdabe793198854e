"""hvdrun's Python package: `hvdrun.run` launches a function on every rank of a job
through the `hvdrun` launcher, and `hvdrun.torch` is a drop-in for the commonly used
part of `horovod.torch`, bound to libhvdrun's C ABI with ctypes (nothing compiled
against torch).

Importing this package needs neither torch nor libhvdrun.so; both are loaded on first
use.
"""
try:  # the installed distribution's version (pyproject.toml takes it from CMakeLists.txt)
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("hvdrun")
except (ImportError, PackageNotFoundError):  # running from a checkout
    __version__ = "0.1.0"

from hvdrun._lib import HorovodInternalError, HvdrunError  # noqa: E402
from hvdrun.runner import JobFailed, run  # noqa: E402

__all__ = ["__version__", "HorovodInternalError", "HvdrunError", "JobFailed", "run"]
