"""Paths that another local user cannot change under hvdrun: the rules the launcher's
--output-filename follows (launcher/output/output_files.cc), for the files the Python package
keeps or loads (the TensorFlow op library's cache, a library named by the environment).

A path is trusted when every component on the way to it belongs to this user (the
effective uid) or root, and a directory writable by group or others has the sticky bit
(its owner, trusted too, is then the only other user who may rename what is in it: /tmp
passes, a 1777 directory of another user's does not). A symbolic link is followed only
when this user or root owns it, and the components it leads to are checked the same way.
Such a chain can be changed by nobody but this user and root, so a path checked here stays
the path that was checked. The directories hvdrun keeps files in must moreover belong to
this user and be writable by nobody else; missing ones are created with mode 0700. Files
in them are opened relative to the directory's descriptor with O_NOFOLLOW and O_NONBLOCK,
and checked on the descriptor (fstat) before they are locked or loaded.

Every refusal is an UnsafePath whose message names the path and what is wrong with it;
the caller adds what the user should do.
"""
import errno
import os
import pwd
import stat

_MAX_LINKS = 40  # as the kernel's limit on links followed in one lookup
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


class UnsafePath(RuntimeError):
    """A path another user could change, or that is not what it must be; str() is
    "'PATH' why"."""

    def __init__(self, path, why):
        super().__init__(f"'{path}' {why}")
        self.path = path
        self.why = why


def user_text(uid):
    """"nobody (uid 65534)", or "uid N" for a uid without a name."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _trusted_owner(uid):
    return uid in (os.geteuid(), 0)


def _refuse_errno(path, doing, err):
    raise UnsafePath(path, f"cannot be {doing} ({os.strerror(err)})") from None


def _check_dir(path, st):
    """A directory on the way: owned by this user or root, and not open to other users'
    renames."""
    if not _trusted_owner(st.st_uid):
        raise UnsafePath(path, f"belongs to another user, {user_text(st.st_uid)}, who could "
                         "replace what is in it")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise UnsafePath(path, f"is writable by other users (mode {stat.S_IMODE(st.st_mode):o}) "
                         "and has no sticky bit, so any of them could replace what is in it")


def _lstat_or_create(path, create):
    """lstat of `path`; a missing one is created (mode 0700) when `create`, else None."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        if not create:
            return None
    except OSError as e:
        _refuse_errno(path, "examined", e.errno)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass  # made meanwhile, perhaps by another user: checked below like any other
    except OSError as e:
        _refuse_errno(path, "created", e.errno)
    try:
        return os.lstat(path)
    except OSError as e:
        _refuse_errno(path, "examined", e.errno)


def _split(path):
    return [c for c in path.split("/") if c not in ("", ".")]


def trusted_path(path, create=False):
    """Checks every directory and link on the way to `path` (made absolute) and returns
    (real, st): the path with its links resolved and its last component's lstat (a last
    component that is not a directory is the caller's to check). With `create`, missing
    directories are made (mode 0700); without, a missing component gives st None.
    Raises UnsafePath."""
    todo = list(reversed(_split(os.path.abspath(path))))
    cur, links = "/", 0
    st = os.lstat("/")
    _check_dir("/", st)
    while todo:
        name = todo.pop()
        if name == "..":  # `cur` holds no link, so its parent is the kernel's `..`
            cur = os.path.dirname(cur)
            st = os.lstat(cur)
            continue
        nxt = os.path.join(cur, name)
        st = _lstat_or_create(nxt, create)
        if st is None:
            return os.path.join(nxt, *reversed(todo)), None
        if stat.S_ISLNK(st.st_mode):
            if not _trusted_owner(st.st_uid):
                raise UnsafePath(nxt, f"is a symbolic link that belongs to another user, "
                                 f"{user_text(st.st_uid)}, and is not followed")
            links += 1
            if links > _MAX_LINKS:
                _refuse_errno(path, "resolved", errno.ELOOP)
            target = os.readlink(nxt)
            if target.startswith("/"):
                cur = "/"
            todo.extend(reversed(_split(target)))
            continue
        if stat.S_ISDIR(st.st_mode):
            _check_dir(nxt, st)
        elif todo:
            raise UnsafePath(nxt, "is not a directory")
        cur = nxt
    return cur, st


def _check_private_dir(path, st):
    """A directory hvdrun keeps files in: this user's and writable by nobody else."""
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(path, "is not a directory")
    if st.st_uid != os.geteuid():
        raise UnsafePath(path, f"belongs to another user, {user_text(st.st_uid)}, who could "
                         "replace what is in it")
    if st.st_mode & 0o022:
        raise UnsafePath(path, f"is writable by other users (mode {stat.S_IMODE(st.st_mode):o}), "
                         "who could replace what is in it")


def open_private_dir(path):
    """Opens the directory `path` (creating it and the missing directories above it, mode
    0700), checked as above; returns (fd, real path). The caller closes fd."""
    real, st = trusted_path(path, create=True)
    _check_private_dir(real, st)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        _refuse_errno(real, "opened as a directory", e.errno)
    return _checked_dir_fd(fd, real), real


def _checked_dir_fd(fd, path):
    try:
        _check_private_dir(path, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refuse_entry(dir_fd, path, name, err):
    """Why `name` in `dir_fd` could not be opened: a link is refused by name."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except OSError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise UnsafePath(path, f"is a symbolic link (owned by {user_text(st.st_uid)}) and is "
                         "not followed; remove it") from None
    _refuse_errno(path, "opened", err)


def private_subdir(dir_fd, dir_path, name):
    """Opens (creating it, mode 0700) the directory `name` in the private directory
    `dir_fd`; it must be this user's and writable by nobody else. The caller closes it."""
    path = os.path.join(dir_path, name)
    try:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    except FileExistsError:
        pass
    except OSError as e:
        _refuse_errno(path, "created", e.errno)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except OSError as e:
        _refuse_entry(dir_fd, path, name, e.errno)
    return _checked_dir_fd(fd, path)


def open_lock_file(dir_fd, dir_path, name):
    """Opens (creating it, mode 0600, never truncating) the lock file `name` in the
    private directory `dir_fd`: a regular file of this user's. The caller closes it."""
    path = os.path.join(dir_path, name)
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o600, dir_fd=dir_fd)
    except OSError as e:
        _refuse_entry(dir_fd, path, name, e.errno)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(path, "is not a regular file; remove it")
        if st.st_uid != os.geteuid():
            raise UnsafePath(path, f"belongs to another user, {user_text(st.st_uid)}; "
                             "remove it")
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_loadable(st, path, root_too):
    """A library that is about to be loaded: a regular file of this user's (or root's,
    with `root_too`) that nobody else may write."""
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(path, "is not a regular file")
    if st.st_uid != os.geteuid() and not (root_too and st.st_uid == 0):
        raise UnsafePath(path, f"belongs to another user, {user_text(st.st_uid)}, and is "
                         "not loaded")
    if st.st_mode & 0o022:
        raise UnsafePath(path, f"is writable by other users (mode {stat.S_IMODE(st.st_mode):o}) "
                         "and is not loaded")


def loadable_in(dir_fd, dir_path, name):
    """Whether the library `name` is in the private directory `dir_fd`: False when it is
    missing; True when it is there and fit to load (check_loadable; this user's); raises
    UnsafePath otherwise."""
    path = os.path.join(dir_path, name)
    try:
        fd = os.open(name, os.O_RDONLY | _OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError as e:
        _refuse_entry(dir_fd, path, name, e.errno)
    try:
        check_loadable(os.fstat(fd), path, root_too=False)
    finally:
        os.close(fd)
    return True


def loadable_path(path):
    """The real path of the library `path` named by the user (HVDRUN_TF_OPS,
    HVDRUN_LIBRARY): every component trusted, the file this user's or root's and writable
    by nobody else. None when it does not exist; raises UnsafePath otherwise."""
    real, st = trusted_path(path)
    if st is None:
        return None
    try:
        fd = os.open(real, os.O_RDONLY | _OPEN_FLAGS)
    except OSError as e:
        _refuse_errno(real, "opened", e.errno)
    try:
        check_loadable(os.fstat(fd), real, root_too=True)
    finally:
        os.close(fd)
    return real
