"""Writes this rank's environment as JSON to DIR/LABEL-RANK.json (DIR and LABEL from the
arguments, or from ENV_DUMP_DIR and ENV_DUMP_LABEL when run as a module without them), for
tests/python/test_torchrun_compat.py. Needs no torch."""
import json
import os
import sys


def main():
    out = sys.argv[1] if len(sys.argv) > 2 else os.environ["ENV_DUMP_DIR"]
    label = sys.argv[2] if len(sys.argv) > 2 else os.environ["ENV_DUMP_LABEL"]
    with open(os.path.join(out, f"{label}-{os.environ['RANK']}.json"), "w") as f:
        json.dump(dict(os.environ), f)


if __name__ == "__main__":
    main()
