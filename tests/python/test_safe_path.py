"""What another local user (`nobody`, through runuser) can plant where hvdrun looks for a
library, and that hvdrun neither loads it nor follows its links (hvdrun._safe_path).

The TensorFlow op library's cache is driven through hvdrun._tf_build.library() with a
stand-in for the TensorFlow compile command (`cc` on a one-line C file), so no TensorFlow
is needed: the key the attacker computes comes from the module's own key_name(), as its
inputs are public. Each run loads what library() returned, as hvdrun.tensorflow does, in
a fresh python3; a planted library's constructor writes a marker file, which must stay
absent. tests/tensorflow/test_tf_failures.py plants one for a real hvd.init().
"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap

import pytest

from hvdrun import _tf_build

CACHE_ADVICE = ("set HVDRUN_TF_OPS_CACHE to a directory of your own (hvdrun creates a missing "
                "one with mode 0700)")

# Run in a fresh python3: the cache's library(), then a load of its answer, as
# hvdrun.tensorflow's init() does. argv: the stand-in's C source.
DRIVER = textwrap.dedent("""
    import ctypes, sys
    from hvdrun import _tf_build
    _tf_build._command = lambda output, werror: (
        ["cc", "-shared", "-fPIC", "-o", output, sys.argv[1]], "0.test")
    try:
        path = _tf_build.library()
    except _tf_build.BuildError as e:
        print(e, file=sys.stderr)
        sys.exit(3)
    ctypes.CDLL(path)
    print(path)
""")


def _stand_in(output, werror, source):
    return ["cc", "-shared", "-fPIC", "-o", output, source], "0.test"


def _compile(source, output, marker=None):
    """A shared library from `source`; with `marker`, one whose constructor creates it."""
    with open(source, "w") as f:
        if marker is None:
            f.write("int hvdrun_test_stand_in(void) { return 0; }\n")
        else:
            f.write(textwrap.dedent(f"""\
                #include <fcntl.h>
                #include <unistd.h>
                __attribute__((constructor)) static void planted(void) {{
                  int fd = open("{marker}", O_WRONLY | O_CREAT, 0644);
                  if (fd >= 0) close(fd);
                }}
                """))
    subprocess.run(["cc", "-shared", "-fPIC", "-o", output, source], check=True)


def as_nobody(script):
    p = subprocess.run(["runuser", "-u", "nobody", "--", "sh", "-c", script], cwd="/",
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"as nobody: {script}: {p.stderr}"


class Area:
    """A directory nobody can reach but not write (base), with a root-owned 1777
    `scratch` inside it, as /tmp is; the stand-in's source, a planted library and the
    marker it would write."""

    def __init__(self):
        self.base = tempfile.mkdtemp(prefix="hvdrun-safe-path-")
        os.chmod(self.base, 0o755)
        self.scratch = os.path.join(self.base, "scratch")
        os.mkdir(self.scratch)
        os.chmod(self.scratch, 0o1777)
        self.source = os.path.join(self.base, "stand_in.c")
        _compile(self.source, os.path.join(self.base, "stand_in.so"))
        self.marker = os.path.join(self.base, "planted-library-ran")
        self.planted = os.path.join(self.base, "planted.so")
        _compile(os.path.join(self.base, "planted.c"), self.planted, self.marker)
        os.chmod(self.planted, 0o644)

    def key(self, monkeypatch):
        monkeypatch.setattr(_tf_build, "_command",
                            lambda output, werror: _stand_in(output, werror, self.source))
        return _tf_build.key_name()[0]

    def load(self, **env):
        """Runs DRIVER with `env` added to a copy of this environment."""
        full = dict(os.environ)
        full.pop("HVDRUN_TF_OPS", None)
        full.pop("XDG_CACHE_HOME", None)
        full.update(env)
        return subprocess.run([sys.executable, "-c", DRIVER, self.source], env=full,
                              capture_output=True, text=True, timeout=120)


@pytest.fixture
def area():
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root and runuser to act as another local user (nobody)")
    a = Area()
    yield a
    shutil.rmtree(a.base)


def test_a_library_planted_in_a_cache_directory_of_another_user_is_not_loaded(
        area, monkeypatch):
    # nobody makes the cache directory first, in a shared scratch area, and puts the
    # library where the key (public inputs) says it will be looked for.
    cache = os.path.join(area.scratch, "tf-ops")
    key = area.key(monkeypatch)
    as_nobody(f"mkdir -m 1777 '{cache}' && mkdir -m 755 '{cache}/{key}' && "
              f"cp '{area.planted}' '{cache}/{key}/libhvdrun_tf_ops.so'")
    p = area.load(HVDRUN_TF_OPS_CACHE=cache)
    assert not os.path.exists(area.marker), "the planted library was loaded"
    assert p.returncode == 3, p.stderr
    assert (f"the op library's cache '{cache}' belongs to another user, nobody (uid 65534), "
            "who could replace what is in it; " + CACHE_ADVICE) in p.stderr, p.stderr


def test_a_key_directory_of_another_user_in_a_shared_sticky_cache_is_refused(
        area, monkeypatch):
    # The cache is root's and 1777, as /tmp is: nobody cannot rename root's entries in it
    # but may add its own, here the key directory with a library.
    key = area.key(monkeypatch)
    as_nobody(f"mkdir -m 755 '{area.scratch}/{key}' && "
              f"cp '{area.planted}' '{area.scratch}/{key}/libhvdrun_tf_ops.so'")
    p = area.load(HVDRUN_TF_OPS_CACHE=area.scratch)
    assert not os.path.exists(area.marker), "the planted library was loaded"
    assert p.returncode == 3, p.stderr
    assert (f"the op library's cache '{area.scratch}' is writable by other users (mode 1777), "
            "who could replace what is in it; " + CACHE_ADVICE) in p.stderr, p.stderr


def test_a_key_directory_of_another_user_in_a_private_cache_is_refused(area, monkeypatch):
    cache = os.path.join(area.base, "mine")
    os.mkdir(cache, 0o755)
    key = area.key(monkeypatch)
    os.mkdir(os.path.join(cache, key))
    shutil.copy(area.planted, os.path.join(cache, key, "libhvdrun_tf_ops.so"))
    subprocess.run(["chown", "-R", "nobody", os.path.join(cache, key)], check=True)
    p = area.load(HVDRUN_TF_OPS_CACHE=cache)
    assert not os.path.exists(area.marker), "the planted library was loaded"
    assert p.returncode == 3, p.stderr
    assert (f"the op library's cache '{cache}/{key}' belongs to another user, nobody "
            "(uid 65534)") in p.stderr, p.stderr


def test_a_cache_reached_through_a_link_of_another_user_is_refused(area, monkeypatch):
    mine = os.path.join(area.base, "mine")
    os.mkdir(mine, 0o700)
    link = os.path.join(area.scratch, "tf-ops")
    as_nobody(f"ln -s '{mine}' '{link}'")
    p = area.load(HVDRUN_TF_OPS_CACHE=link)
    assert p.returncode == 3, p.stderr
    assert (f"'{link}' is a symbolic link that belongs to another user, nobody (uid 65534), "
            "and is not followed") in p.stderr, p.stderr
    assert os.listdir(mine) == []


def test_a_lock_file_that_is_a_link_is_not_followed(area, monkeypatch):
    cache = os.path.join(area.base, "mine")
    key = area.key(monkeypatch)
    os.makedirs(os.path.join(cache, key), 0o700)
    victim = os.path.join(area.base, "precious")
    with open(victim, "w") as f:
        f.write("keep me\n")
    os.utime(victim, (1_000_000_000, 1_000_000_000))
    os.symlink(victim, os.path.join(cache, key, ".lock"))
    p = area.load(HVDRUN_TF_OPS_CACHE=cache)
    with open(victim) as f:
        assert f.read() == "keep me\n"
    assert os.stat(victim).st_mtime == 1_000_000_000
    assert p.returncode == 3, p.stderr
    assert (f"the op library's cache '{cache}/{key}/.lock' is a symbolic link (owned by root "
            "(uid 0)) and is not followed; remove it; " + CACHE_ADVICE) in p.stderr, p.stderr


def test_a_missing_cache_is_made_private_and_the_library_is_built_once(area, monkeypatch):
    cache = os.path.join(area.base, "new", "tf-ops")
    key = area.key(monkeypatch)
    old = os.umask(0o002)  # the driver's umask: one that leaves entries group-writable
    try:
        first = area.load(HVDRUN_TF_OPS_CACHE=cache)
    finally:
        os.umask(old)
    library = os.path.join(cache, key, "libhvdrun_tf_ops.so")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == library
    assert "building the op library for TensorFlow 0.test" in first.stderr
    for d in (os.path.dirname(cache), cache, os.path.dirname(library)):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
    built = os.stat(library)
    assert built.st_mode & 0o022 == 0
    second = area.load(HVDRUN_TF_OPS_CACHE=cache)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == library
    assert "building" not in second.stderr
    assert (os.stat(library).st_ino, os.stat(library).st_mtime_ns) == \
        (built.st_ino, built.st_mtime_ns)


def test_hvdrun_tf_ops_of_another_user_is_not_loaded(area):
    as_nobody(f"mkdir -m 755 '{area.scratch}/lib' && "
              f"cp '{area.planted}' '{area.scratch}/lib/libhvdrun_tf_ops.so'")
    path = os.path.join(area.scratch, "lib", "libhvdrun_tf_ops.so")
    p = area.load(HVDRUN_TF_OPS=path)
    assert not os.path.exists(area.marker), "the planted library was loaded"
    assert p.returncode == 3, p.stderr
    assert (f"HVDRUN_TF_OPS={path}: '{area.scratch}/lib' belongs to another user, nobody "
            "(uid 65534), who could replace what is in it; point it at a library of your "
            "own") in p.stderr, p.stderr


def test_hvdrun_library_of_another_user_is_not_loaded(area):
    as_nobody(f"cp '{area.planted}' '{area.scratch}/libhvdrun.so'")
    path = os.path.join(area.scratch, "libhvdrun.so")
    p = subprocess.run([sys.executable, "-c", "from hvdrun import _lib; _lib.lib()"],
                       env=dict(os.environ, HVDRUN_LIBRARY=path), capture_output=True,
                       text=True, timeout=120)
    assert not os.path.exists(area.marker), "the planted library was loaded"
    assert p.returncode != 0
    assert (f"HVDRUN_LIBRARY={path}: '{path}' belongs to another user, nobody (uid 65534), "
            "and is not loaded; point it at a libhvdrun.so in a directory only you (or root) "
            "can change") in p.stderr, p.stderr
