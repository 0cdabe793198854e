"""The import graph of the hvdrun package (python/hvdrun) is one-way: no module reaches
itself again through the modules it imports. Every import counts, those inside functions
too (a lazy import is a cycle that only waits for its first call), and so does the
package __init__ that Python runs before a submodule: importing hvdrun.tensorflow.mpi_ops
from hvdrun._keras runs hvdrun/tensorflow/__init__.py first. Read with `ast`, nothing is
imported, so it needs neither TensorFlow nor torch nor a build: ctest runs it without
conftest.py."""
import ast
import os

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.normpath(os.path.join(HERE, "..", "..", "python", "hvdrun"))


def modules():
    """{dotted module name: path} of every .py file of the package."""
    found = {}
    root = os.path.dirname(PACKAGE)
    for directory, _, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            parts = os.path.relpath(path, root)[:-len(".py")].split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _ancestors(name):
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _imported(node, module, is_package, known):
    """The package modules one import statement names: `from P import x` names P, and
    P.x as well where that is a module."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        here = here[:len(here) - (node.level - 1)]
        base = ".".join(here + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names
                     if f"{base}.{alias.name}" in known]


def import_graph():
    """{module: set of package modules whose import it starts}, each with the packages
    above it that the importer is not itself inside (those run first)."""
    known = modules()
    graph = {}
    for module, path in known.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        is_package = os.path.basename(path) == "__init__.py"
        edges = set()
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _imported(node, module, is_package, known):
                for name in {target} | _ancestors(target):
                    if name in known and name != module and name not in _ancestors(module):
                        edges.add(name)
        graph[module] = edges
    return graph


def find_cycle(graph):
    """A list [m, ..., m] of modules that import each other in a circle, or None."""
    state = {}  # absent: not seen; 1: on the current path; 2: done
    path = []

    def visit(module):
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def test_the_graph_sees_the_package_and_its_lazy_imports():
    graph = import_graph()
    assert "hvdrun.tensorflow.mpi_ops" in graph["hvdrun.tensorflow"]
    # hvdrun.tensorflow's __getattr__ imports SyncBatchNormalization on first use only.
    assert "hvdrun.tensorflow.sync_batch_norm" in graph["hvdrun.tensorflow"]
    # A submodule's import runs its package's __init__ first.
    assert "hvdrun.tensorflow" in graph["hvdrun._keras.api"]


def test_a_circle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_package_imports_in_one_direction():
    cycle = find_cycle(import_graph())
    assert cycle is None, "modules of python/hvdrun import each other: " + " -> ".join(cycle)
