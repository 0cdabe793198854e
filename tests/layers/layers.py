"""The layer rule: a library's sources include only the libraries below it. Every
`#include "folder/..."` of a library's source names a library; the edges allowed are the
ones declared in BELOW, and whatever those may include in turn. A library includes its own
headers freely. Tests, benchmarks, fuzzers and examples are not libraries and are not
checked. The declared graph must have no cycle, and every library folder that holds
sources must be declared, so a new folder states its place.

Usage: layers.py SOURCE_DIR. Prints every include that breaks the rule, with its file and
line, and exits 1; exits 0 when there is none."""
import os
import re
import sys

# Each library and the libraries it may include directly. "hvdrun" is libhvdrun's public
# headers (runtime/include/hvdrun/), which its users include as <hvdrun/...>.
BELOW = {
    "common": [],
    "hostfile": ["common"],
    "ssh": ["common"],
    "rendezvous": ["common"],
    "compat": ["hostfile", "common"],
    "hvdrun": [],
    "runtime/core": ["hvdrun", "rendezvous", "common"],
    "runtime/reduce": ["runtime/core"],
    "runtime/shm": ["runtime/reduce"],
    "runtime/frames": ["runtime/reduce"],
    "runtime/gloo": ["runtime/reduce"],
    "runtime/nccl": ["runtime/core"],
    "runtime/host": ["runtime/shm", "runtime/frames", "runtime/gloo"],
    "runtime/engine": ["runtime/reduce"],
    "runtime/world": ["runtime/host", "runtime/nccl", "runtime/engine"],
    "runtime/semantics": ["runtime/world"],
    "runtime/api": ["runtime/semantics"],
    "runtime": ["runtime/api"],  # libhvdrun.so itself (its anchor file, runtime/empty.cc)
    "launcher/process": ["common"],
    "launcher/topology": ["common"],
    "launcher/plan": ["launcher/topology", "compat", "hostfile", "common"],
    "launcher/agent": ["launcher/plan", "launcher/process"],
    "launcher/output": ["launcher/agent"],
    "launcher/hosts": ["launcher/agent", "ssh", "rendezvous"],
    "launcher/job": ["launcher/hosts", "launcher/output", "rendezvous"],
    "launcher/start": ["launcher/job"],
    "launcher/elastic": ["launcher/start"],
    "cli": ["launcher/elastic"],
    "python": ["hvdrun"],
}
# Folders whose sources are not a library's (build trees, with their CMakeCache.txt, are
# skipped wherever they are).
NOT_LIBRARIES = {"tests", "bench", "fuzz", "examples", "build", "packaging", "cmake"}
# Folders whose sub-folders are libraries of their own.
SPLIT = {"launcher", "runtime"}
SOURCE = re.compile(r'\s*#\s*include\s+"([^"]+)"')


def library_of(path):
    """The library a path (a source's, relative to the tree, or an include's) belongs to,
    or None for one that is no library's."""
    parts = path.split("/")
    if parts[:3] == ["runtime", "include", "hvdrun"]:
        return "hvdrun"
    if parts[0] in SPLIT and len(parts) > 2:
        return parts[0] + "/" + parts[1]
    return parts[0] if len(parts) > 1 else None


def allowed(library, seen=None):
    """Every library `library` may include: BELOW's edges, followed down."""
    seen = set() if seen is None else seen
    for lower in BELOW.get(library, []):
        if lower not in seen:
            seen.add(lower)
            allowed(lower, seen)
    return seen


def cycles():
    """A cycle of BELOW as a list of names, or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in BELOW.get(node, []):
            if state.get(nxt) == "open":
                return path + [nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in BELOW:
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def sources(root):
    for directory, dirs, files in os.walk(root):
        rel = os.path.relpath(directory, root)
        top = rel.split(os.sep)[0]
        build_tree = os.path.exists(os.path.join(root, top, "CMakeCache.txt"))
        if rel.startswith(".") and rel != "." or top in NOT_LIBRARIES or build_tree:
            dirs[:] = []
            continue
        for name in files:
            if name.endswith((".cc", ".h", ".c")):
                yield os.path.normpath(os.path.join(rel, name)).replace(os.sep, "/")


def main(root):
    problems = []
    cycle = cycles()
    if cycle:
        problems.append("the declared layers have a cycle: " + " -> ".join(cycle))
    libraries = set(BELOW) | {"hvdrun"}
    for src in sources(root):
        mine = library_of(src)
        if mine is None:
            continue
        if mine not in libraries:
            problems.append(f"{src}: the folder {mine}/ is no declared library; give it its "
                            "place in tests/layers/layers.py (BELOW)")
            continue
        may = allowed(mine) | {mine}
        with open(os.path.join(root, src), errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = SOURCE.match(line)
                if not m:
                    continue
                target = library_of(m.group(1))
                if target is None or target not in libraries or target in may:
                    continue  # its own header, or not one of this tree's libraries
                problems.append(f"{src}:{number}: {mine} includes {m.group(1)}, of {target}, "
                                f"which is not below it (it may include: "
                                f"{', '.join(sorted(may - {mine})) or 'nothing'})")
    for p in problems:
        print(p)
    print(f"layers: {len(problems)} include(s) against the rule" if problems
          else "layers: every library includes only the libraries below it")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.getcwd()))
