"""The rank's error file: an uncaught exception in a rank that imported hvdrun.torch or
hvdrun.tensorflow is written, before Python prints it and exits, to the file its agent named
in TORCHELASTIC_ERROR_FILE (HVDRUN_ERROR_FILE is the same path), as torchelastic's JSON:

    {"message": {"message": "ValueError: ...",
                 "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1764400000"}}}

which is what torch's @record decorator writes (torch.distributed.elastic.multiprocessing.
errors.ErrorHandler.record_exception); a file @record already wrote is left as it is. The
launcher quotes the traceback in its failure message and --result-file
(docs/diagnosis.md#error-files)."""
import json
import os
import sys
import time
import traceback

_installed = False


def error_file_path():
    """Where this rank's error file goes, or None outside hvdrun (or torchrun)."""
    return os.environ.get("TORCHELASTIC_ERROR_FILE") or os.environ.get("HVDRUN_ERROR_FILE")


def write_error_file(kind, value, tb):
    """Writes the exception (`kind`, `value`, `tb`) to the error file, unless there is none,
    it is no Exception (KeyboardInterrupt, as torch's @record), or @record wrote it first."""
    path = error_file_path()
    if not path or not issubclass(kind, Exception):
        return
    if os.path.exists(path) and os.path.getsize(path) > 0:
        return
    data = {
        "message": {
            "message": f"{kind.__name__}: {value}",
            "extraInfo": {
                "py_callstack": "".join(traceback.format_exception(kind, value, tb)),
                "timestamp": str(int(time.time())),
            },
        }
    }
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def install():
    """Chains write_error_file in front of sys.excepthook, once."""
    global _installed
    if _installed:
        return
    _installed = True
    previous = sys.excepthook

    def hook(kind, value, tb):
        try:
            write_error_file(kind, value, tb)
        except Exception as e:  # the traceback below matters more than the file
            print(f"hvdrun: cannot write the error file: {e}", file=sys.stderr)
        previous(kind, value, tb)

    sys.excepthook = hook
