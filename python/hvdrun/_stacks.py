"""The rank's stack report (docs/diagnosis.md#the-stack-report): when its agent names a stack
file and a signal in the environment (HVDRUN_STACK_FILE, HVDRUN_STACK_SIGNAL), the stacks of
every Python thread are dumped into that file when the signal comes, by faulthandler (in the
signal handler itself, so a rank blocked in C code or holding the GIL answers too).

libhvdrun is loaded first: it installs its own handler for the signal as it loads, and the dump
registered here chains to it, so the file gets the Python threads, then the collectives the rank
waits in and the end line the agent waits for. SIGUSR1 and SIGUSR2 stay the program's."""
import faulthandler
import os
import sys

# The file's descriptor, open for the life of the process: faulthandler writes to it. A bare
# descriptor, not a file object, which Python's exit would report unclosed (ResourceWarning).
_fd = None


def _caught(sig):
    """Whether this process has a handler for `sig` (the library's, installed in C, which
    signal.getsignal does not see): SigCgt of /proc/self/status, a hex mask."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return (int(line.split()[1], 16) >> (sig - 1)) & 1 == 1
    except OSError:
        pass
    return False


def install():
    """Registers the dump, once; does nothing outside hvdrun or when the library cannot load
    (the import that called this reports that itself)."""
    global _fd
    path = os.environ.get("HVDRUN_STACK_FILE")
    number = os.environ.get("HVDRUN_STACK_SIGNAL", "")
    if _fd is not None or not path or not number.isdigit():
        return
    try:
        from hvdrun import _lib
        _lib.lib()  # its handler first: the dump below chains to it
    except Exception:  # the caller's own use of the library says what is wrong
        pass
    sig = int(number)
    # chain=True re-raises the signal to the handler before: only when there is one (the
    # library's), for a re-raised real-time signal without a handler would end the process.
    chain = _caught(sig)
    try:
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        faulthandler.register(sig, file=_fd, all_threads=True, chain=chain)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"hvdrun: no stack report for this rank ({path}): {e}", file=sys.stderr,
              flush=True)
