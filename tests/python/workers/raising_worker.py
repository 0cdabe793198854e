"""Rank 1 raises ValueError after importing hvdrun.torch, from main() decorated with torch's
@record (argument "record") or not ("plain"); rank 0 waits to be stopped. The launcher must
quote the traceback of the rank's error file (TORCHELASTIC_ERROR_FILE) once."""
import os
import sys
import time

import hvdrun.torch as hvd  # noqa: F401 (installs the error file hook)
from torch.distributed.elastic.multiprocessing.errors import record


def main():
    if os.environ["HVDRUN_RANK"] == "1":
        raise ValueError("deliberate failure from rank 1")
    time.sleep(120)


if __name__ == "__main__":
    (record(main) if sys.argv[1] == "record" else main)()
