#!/usr/bin/env python3
"""Fails when a Python function or method is longer than the limit (default 100 lines, the
size the C++ code keeps to; from its `def` line to its last line, docstring included), so
that long functions get split into named steps. Prints each offender as
path:line: name is N lines. scripts/test.sh's tidy stage runs it.

Usage: scripts/py_function_size.py [--max N] [FILE...]   (default: every tracked .py)
"""
import argparse
import ast
import os
import subprocess
import sys


def long_functions(path, limit):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            size = node.end_lineno - node.lineno + 1
            if size > limit:
                yield node.lineno, node.name, size


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=100, help="most lines a function may have")
    parser.add_argument("files", nargs="*", help="files to check (default: every tracked .py)")
    opts = parser.parse_args()
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    files = opts.files or subprocess.run(["git", "ls-files", "*.py"], capture_output=True,
                                         text=True, check=True).stdout.split()
    found = []
    for path in files:
        try:
            found += [f"{path}:{line}: {name} is {size} lines"
                      for line, name, size in long_functions(path, opts.max)]
        except (OSError, SyntaxError) as e:
            found.append(f"{path}: cannot be read as Python: {e}")
    if found:
        print(f"py_function_size: {len(found)} functions over {opts.max} lines "
              "(split them into named steps):")
        print("\n".join("  " + f for f in found))
        return 1
    print(f"py_function_size: {len(files)} files, every function within {opts.max} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
