"""Builds hvdrun's TensorFlow op library (hvdrun/tensorflow/ops*.cc, SOURCES) against the
TensorFlow installed in this Python, as Horovod builds its own: custom ops must be compiled
with the installed TensorFlow's headers and C++ ABI, so no prebuilt binary can serve every
version.

The library is built once per (sources, TensorFlow version, compiler flags) into a cache
directory and reused: HVDRUN_TF_OPS_CACHE, else $XDG_CACHE_HOME/hvdrun/tf-ops, else
~/.cache/hvdrun/tf-ops. Ranks that start together wait on a lock while one of them builds.
HVDRUN_TF_OPS names a library built elsewhere and skips all of this. The compiler is $CXX,
else c++ (g++ 9 or later, or clang).

The key directory's name is computed from public inputs, so another local user could
create the cache, or the key directory, first in a shared place and put a library there.
hvdrun._safe_path's rules are kept: every directory on the way belongs to this user or
root (one writable by others only with the sticky bit), the cache and the key directory
belong to this user and nobody else may write them (missing ones are created with mode
0700), and the lock and the library are opened without following links and checked on
the descriptor before they are locked or loaded; a library named by HVDRUN_TF_OPS must be
this user's or root's, writable by nobody else, behind trusted directories. Anything else
is refused with a BuildError that says what is wrong and what to do.

    python -m hvdrun._tf_build [--werror] [--cache DIR]   # builds, prints the path
"""
import fcntl
import hashlib
import os
import shlex
import subprocess
import sys
import tempfile

from hvdrun import _safe_path

_HERE = os.path.dirname(os.path.abspath(__file__))
# The op library's translation units (ops.cc opens with what each holds) and the header
# they share; the cache key hashes all of them.
SOURCES = tuple(os.path.join(_HERE, "tensorflow", name)
                for name in ("ops.cc", "ops_submit.cc", "ops_reduce.cc", "ops_move.cc"))
HEADERS = (os.path.join(_HERE, "tensorflow", "ops_internal.h"),)
LIBRARY_NAME = "libhvdrun_tf_ops.so"


class BuildError(RuntimeError):
    """The op library could not be built; the message says why and what to do."""


def _header_dir():
    # Installed package: hvdrun/include (pip installs hvdrun_c.h there); a checkout:
    # runtime/include beside python/.
    for d in (os.path.join(_HERE, "include"),
              os.path.join(os.path.dirname(os.path.dirname(_HERE)), "runtime", "include")):
        if os.path.exists(os.path.join(d, "hvdrun", "hvdrun_c.h")):
            return d
    raise BuildError("hvdrun: hvdrun/hvdrun_c.h not found (neither in the installed package nor "
                     "in a checkout's runtime/include); reinstall hvdrun")


def compile_flags():
    """The flags every source is compiled with: hvdrun_c.h's directory and TensorFlow's
    (scripts/tidy.sh runs clang-tidy with them too)."""
    import tensorflow as tf

    # TensorFlow's headers are system headers to us: their warnings are not ours.
    return ["-I" + _header_dir()] + ["-isystem" + f[2:] if f.startswith("-I") else f
                                     for f in tf.sysconfig.get_compile_flags()]


def _command(output, werror):
    import tensorflow as tf

    warn = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-deprecated-declarations"]
    if werror:
        warn.append("-Werror")
    # One translation unit: ops.cc with the other sources included ahead of it. TensorFlow's
    # headers take most of a source's compile time, so they are parsed once rather than once
    # per source (as pip's unity build of libhvdrun does); the sources therefore must not
    # define one name twice in their anonymous namespaces. scripts/tidy.sh reads each alone.
    unity = [arg for source in SOURCES[1:] for arg in ("-include", source)] + [SOURCES[0]]
    cxx = shlex.split(os.environ.get("CXX", "c++"))
    return (cxx + ["-shared", "-fPIC", "-O2", "-fvisibility=hidden"] + compile_flags() + warn +
            unity + ["-o", output] + tf.sysconfig.get_link_flags()), tf.__version__


def _cache_dir(cache):
    if cache:
        return cache
    if os.environ.get("HVDRUN_TF_OPS_CACHE"):
        return os.environ["HVDRUN_TF_OPS_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hvdrun", "tf-ops")


def key_name():
    """The cache's sub-directory for these sources, headers and TensorFlow:
    tf<version>-<first 16 hex digits of their sha256>."""
    probe, version = _command("OUT", False)  # -Werror changes no byte of the result
    key = hashlib.sha256()
    for name in SOURCES + HEADERS + (os.path.join(_header_dir(), "hvdrun", "hvdrun_c.h"),):
        with open(name, "rb") as f:
            key.update(f.read())
    key.update(" ".join(probe).encode())
    return f"tf{version}-{key.hexdigest()[:16]}", version


def _explicit(path):
    try:
        real = _safe_path.loadable_path(path)
    except _safe_path.UnsafePath as e:
        raise BuildError(f"hvdrun.tensorflow: HVDRUN_TF_OPS={path}: {e}; point it at a "
                         "library of your own in a directory only you (or root) can change, "
                         "or unset it to build the op library on first use") from None
    if real is None:
        raise BuildError(f"hvdrun: HVDRUN_TF_OPS={path} does not exist; unset it to "
                         "build the op library on first use")
    return real


def _refuse_cache(e):
    return BuildError(f"hvdrun.tensorflow: the op library's cache {e}; set HVDRUN_TF_OPS_CACHE "
                      "to a directory of your own (hvdrun creates a missing one with mode "
                      "0700)")


def library(cache=None, werror=False, quiet=False):
    """Path of the op library for this TensorFlow, building it first when needed. The
    path returned is one that only this user and root can change (hvdrun._safe_path)."""
    explicit = os.environ.get("HVDRUN_TF_OPS")
    if explicit:
        return _explicit(explicit)
    name, version = key_name()
    try:
        top, top_path = _safe_path.open_private_dir(_cache_dir(cache))
        try:
            key = _safe_path.private_subdir(top, top_path, name)
        finally:
            os.close(top)
        try:
            return _library_in(key, os.path.join(top_path, name), version, werror, quiet)
        finally:
            os.close(key)
    except _safe_path.UnsafePath as e:
        raise _refuse_cache(e) from None


def _library_in(key, directory, version, werror, quiet):
    """The library in the key directory `key` (its fd), built there first when missing."""
    path = os.path.join(directory, LIBRARY_NAME)
    if _safe_path.loadable_in(key, directory, LIBRARY_NAME):
        return path
    lock = _safe_path.open_lock_file(key, directory, ".lock")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another rank may be building it right now
        if _safe_path.loadable_in(key, directory, LIBRARY_NAME):
            return path
        if not quiet:
            print(f"hvdrun.tensorflow: building the op library for TensorFlow {version} "
                  f"(once; cached in {directory})", file=sys.stderr, flush=True)
        _build(directory, path, werror)
    finally:
        os.close(lock)
    return path


def _build(directory, path, werror):
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".so")
    os.close(fd)
    cmd, _ = _command(tmp, werror)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        os.unlink(tmp)
        raise BuildError(f"hvdrun.tensorflow: cannot run the C++ compiler {cmd[0]!r} ({e}) "
                         "to build the TensorFlow ops; install g++ (or set CXX), or point "
                         "HVDRUN_TF_OPS at a library built on a like machine") from None
    if r.returncode != 0:
        os.unlink(tmp)
        raise BuildError("hvdrun.tensorflow: building the TensorFlow ops failed:\n  " +
                         " ".join(shlex.quote(c) for c in cmd) + "\n" + r.stderr[-4000:])
    # The linker's mode follows the umask; a group-writable library would not be loaded.
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)


def main(argv):
    import argparse

    p = argparse.ArgumentParser(prog="python -m hvdrun._tf_build",
                                description="Build hvdrun's TensorFlow op library.")
    p.add_argument("--werror", action="store_true",
                   help="warnings in the op library's sources are errors")
    p.add_argument("--cache", help="cache directory (default: HVDRUN_TF_OPS_CACHE or "
                   "~/.cache/hvdrun/tf-ops)")
    a = p.parse_args(argv)
    try:
        print(library(a.cache, a.werror, quiet=True))
    except BuildError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
