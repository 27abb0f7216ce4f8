"""The house rules of mpilaunch/ (docs/ARCHITECTURE.md): no import cycle (lazy imports inside
functions count too: that is how the old cli -> entrypoint -> cli circle hid), no module over
400 lines, and the code cites only files in this repository."""
import ast
import os
import re

import pytest

from helpers import REPO as ROOT

PKG = os.path.join(ROOT, "mpilaunch")
MAX_LINES = 400
# The names of the documents outside this repository, spelled in pieces so that this file,
# which looks for them, does not itself cite them.
OUTSIDE = re.compile("|".join(["FIELD" + "_NOTES", "shared" + "/docs", "shared" + "/seeds"]))


def _modules():
    out = {}
    for dirpath, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                name = rel[: -len(".__init__")] if rel.endswith(".__init__") else rel
                out[name] = path
    return out


def _imports(path, name, modules):
    """Every mpilaunch module ``path`` imports, at any depth of the file."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    is_pkg = path.endswith("__init__.py")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("mpilaunch"):
                    found.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                if not is_pkg:
                    parts = parts[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            if not base.startswith("mpilaunch"):
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in modules else base)
    # the package root only holds __version__; importing a parent package is implicit
    return {m for m in found if m in modules and m != name and not name.startswith(m + ".")}


def _graph():
    modules = _modules()
    return {name: _imports(path, name, modules) for name, path in modules.items()}


def _find_cycle(graph):
    state, stack = {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_cycle_finder_finds_a_planted_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_the_package():
    graph = _graph()
    assert "mpilaunch.cli" in graph and len(graph) > 20
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_nothing_imports_the_dispatcher():
    graph = _graph()
    users = sorted(m for m, deps in graph.items() if "mpilaunch.cli" in deps and m != "mpilaunch.__main__")
    assert users == []


@pytest.mark.parametrize("name", sorted(_modules()))
def test_module_size(name):
    path = _modules()[name]
    n = sum(1 for _ in open(path, encoding="utf-8"))
    assert n <= MAX_LINES, f"{os.path.relpath(path, ROOT)} has {n} lines (split it by concern)"


def test_code_and_docs_cite_only_this_repository():
    bad = []
    for top in ("mpilaunch", "tests", "docs", "bench", "scripts", "examples", "README.md"):
        base = os.path.join(ROOT, top)
        paths = [base] if os.path.isfile(base) else [
            os.path.join(d, f) for d, _, fs in os.walk(base) for f in fs
            if f.endswith((".py", ".md", ".sh"))]
        for path in paths:
            if os.path.abspath(path) == os.path.abspath(__file__):
                continue
            text = open(path, encoding="utf-8", errors="replace").read()
            for m in OUTSIDE.finditer(text):
                bad.append(f"{os.path.relpath(path, ROOT)}: {m.group(0)}")
    assert bad == []

