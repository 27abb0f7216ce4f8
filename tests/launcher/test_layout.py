"""The house rules of mpilaunch/ (docs/ARCHITECTURE.md): no import cycle (lazy imports inside
functions count too: that is how the old cli -> entrypoint -> cli circle hid), no module over
400 lines and no function over 60 (each exception named, with its reason). And of tests/: test modules live in the rooms, import only tests/helpers/ (never each
other), and free_port is written once. That the code and the docs cite only files that exist in
this repository is tests/launcher/test_cited_paths.py's."""
import ast
import os

import pytest

from helpers import REPO as ROOT
from helpers import package

PKG = os.path.join(ROOT, "mpilaunch")
MAX_LINES = 400


_modules = package.modules


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


# A backend is one room (docs/ARCHITECTURE.md, "Adding a backend"): it may use the shared rooms
# and backends.base, never another backend, nor what drives the backends.
DRIVERS = ("mpilaunch.supervise.starter", "mpilaunch.attempts.loop", "mpilaunch.attempts.restart", "mpilaunch.run",
           "mpilaunch.supervise.relays", "mpilaunch.output.outcome", "mpilaunch.cli")
# what every backend shares: the protocol, the rank command, where the ranks go
BACKEND_SHARED = ("mpilaunch.backends", "mpilaunch.backends.base", "mpilaunch.backends.rankcmd",
                  "mpilaunch.backends.placement")


def _backend_breaches(graph):
    out = []
    for m, deps in graph.items():
        if not m.startswith("mpilaunch.backends.") or m in BACKEND_SHARED:
            continue
        own = m.rsplit(".", 1)[1].split("_")[0]      # hydra and hydra_report are one room
        for d in deps:
            other = d.startswith("mpilaunch.backends.") and d not in BACKEND_SHARED and \
                d.rsplit(".", 1)[1].split("_")[0] != own
            if other or d in DRIVERS:
                out.append(f"{m} -> {d}")
    return sorted(out)


def test_a_backend_imports_no_other_backend_and_nothing_that_drives_it():
    assert _backend_breaches(_graph()) == []
    planted = {"mpilaunch.backends.srun": {"mpilaunch.backends.hydra", "mpilaunch.attempts.restart"},
               "mpilaunch.backends.hydra": {"mpilaunch.backends.hydra_report"}}
    assert _backend_breaches(planted) == ["mpilaunch.backends.srun -> mpilaunch.attempts.restart",
                                          "mpilaunch.backends.srun -> mpilaunch.backends.hydra"]


def test_the_launcher_names_no_backend():
    graph = _graph()
    for m in ("mpilaunch.supervise.starter", "mpilaunch.attempts.loop", "mpilaunch.supervise.relays", "mpilaunch.output.outcome",
              "mpilaunch.output.summary"):
        named = sorted(d for d in graph[m] if d.startswith("mpilaunch.backends.")
                       and d not in BACKEND_SHARED)
        assert named == [], m


# What the rank side may import (docs/ARCHITECTURE.md, start-up): every rank pays for each.
RANK_SIDE_MAY_IMPORT = ("mpilaunch.contract", "mpilaunch.errors", "mpilaunch.pdeathsig",
                        "mpilaunch.netif", "mpilaunch.net", "mpilaunch.procstat",
                        # the sample a rank's monitor sends: one definition on both ends
                        "mpilaunch.monitor.model")


def _rank_side(name):
    return name == "mpilaunch.rank" or name.startswith("mpilaunch.rank.")


def test_the_rank_side_imports_only_its_allowed_modules():
    graph = _graph()
    bad = sorted(f"{m} -> {d}" for m, deps in graph.items() if _rank_side(m)
                 for d in deps if not _rank_side(d) and d not in RANK_SIDE_MAY_IMPORT)
    assert bad == []
    for allowed in RANK_SIDE_MAY_IMPORT:   # and those import nothing beyond the list
        assert graph[allowed] <= set(RANK_SIDE_MAY_IMPORT), allowed


# A module may be longer than MAX_LINES only with its own cap and the reason it is one module
# (a table, a protocol read best whole), never by moving code out just to get under the cap:
# {dotted module name: (its cap, why)}.
LONG_MODULES: dict = {
    "mpilaunch.config.options": (440, "THE option table, one row per option, read whole; "
                                      "the parser beside it is about 100 lines"),
}


# The rank side's opt-in features: a sub-package each, imported only inside the function that
# needs it, so a rank that does not use the feature loads none of it (tests/rank/test_options.py
# pins what a plain rank loads).
OPT_IN = ("mpilaunch.rank.inplace", "mpilaunch.rank.binding")


def _top_level_imports(path, name, modules):
    """The mpilaunch modules ``path`` imports in its module body (not inside a function)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    body = ast.Module(body=[n for n in tree.body
                            if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))],
                      type_ignores=[])
    found = set()
    for node in ast.walk(body):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mpilaunch"):
            found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                         else node.module for a in node.names)
    return {m for m in found if m in modules and m != name}


def _eager_opt_in(modules):
    out = []
    for name, path in sorted(modules.items()):
        if not _rank_side(name) or name.startswith(OPT_IN):
            continue
        out += [f"{name} -> {d}" for d in sorted(_top_level_imports(path, name, modules))
                if d.startswith(OPT_IN)]
    return out


def test_the_rank_side_imports_its_opt_in_features_late(tmp_path):
    assert _eager_opt_in(_modules()) == []
    eager = tmp_path / "plan.py"
    eager.write_text("from mpilaunch.rank.binding import affinity\n"
                     "def f():\n    from mpilaunch.rank.inplace import loop\n")
    empty = tmp_path / "empty.py"
    empty.write_text("")
    planted = {"mpilaunch.rank.plan": str(eager), "mpilaunch.rank.binding.affinity": str(empty),
               "mpilaunch.rank.inplace.loop": str(empty)}
    assert _eager_opt_in(planted) == ["mpilaunch.rank.plan -> mpilaunch.rank.binding.affinity"]


@pytest.mark.parametrize("name", sorted(_modules()))
def test_module_size(name):
    path = _modules()[name]
    n = sum(1 for _ in open(path, encoding="utf-8"))
    cap, why = LONG_MODULES.get(name, (MAX_LINES, None))
    assert n <= cap, f"{os.path.relpath(path, ROOT)} has {n} lines (split it by concern" + (
        f"; its own cap is {cap}: {why})" if why else ")")


# A function (its def line to its last line, docstring and comments included) has at most
# MAX_FUNCTION_LINES. Measured over the package's 1027 functions (2026-12-04): median 9 lines,
# 95th percentile 33, 99th 54; six were over 60. Longer only with a reason: a table or a
# dispatch that reads best in one screen. Keys: dotted module name, then the function's
# qualified name (Class.method, outer.inner).
MAX_FUNCTION_LINES = 60
LONG_FUNCTIONS = {
    "mpilaunch.check.agent.serve": "a dispatch: the agent's table of commands and the loop that "
                                   "answers them, closures over the one probe's request",
}


def _function_lengths(source):
    """{qualified name: lines} of every function in ``source``, nested ones too."""
    out = {}

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    out[name] = child.end_lineno - child.lineno + 1
                walk(child, name + ".")
            else:
                walk(child, prefix)
    walk(ast.parse(source), "")
    return out


def _long_functions(modules):
    """{module.function: lines} of every function over MAX_FUNCTION_LINES in ``modules``
    ({dotted name: path})."""
    return {f"{m}.{f}": n for m, path in modules.items()
            for f, n in _function_lengths(open(path, encoding="utf-8").read()).items()
            if n > MAX_FUNCTION_LINES}


def test_the_function_rule_measures_a_planted_function(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    src = tmp_path / "m.py"
    src.write_text(f"class A:\n    def m(self):\n    {body.replace(chr(10) + '    ', chr(10) + '        ')}"
                   f"def short():\n    def inner():\n        pass\n\n\ndef long():\n{body}")
    assert _function_lengths(src.read_text()) == {
        "A.m": MAX_FUNCTION_LINES + 1, "short": 3, "short.inner": 2, "long": MAX_FUNCTION_LINES + 1}
    assert _long_functions({"pkg.m": str(src)}) == {"pkg.m.A.m": MAX_FUNCTION_LINES + 1,
                                                    "pkg.m.long": MAX_FUNCTION_LINES + 1}


def test_no_function_is_longer_than_the_rule_without_its_reason():
    long = _long_functions(_modules())
    unexplained = sorted(f"{name}: {n} lines" for name, n in long.items() if name not in LONG_FUNCTIONS)
    assert unexplained == [], f"over {MAX_FUNCTION_LINES} lines: split them, or name the reason " \
                              "in LONG_FUNCTIONS (a table or a dispatch)"
    # an exception goes once it is not needed
    stale = sorted(set(LONG_FUNCTIONS) - set(long))
    assert stale == [], "no longer over the rule (or gone): take them out of LONG_FUNCTIONS"
    assert all(why.strip() for why in LONG_FUNCTIONS.values())
    for name, (cap, why) in LONG_MODULES.items():
        assert name in _modules() and cap > MAX_LINES and why.strip(), name


# --------------------------------------------------------------------------- tests/ itself

TESTS = os.path.join(ROOT, "tests")
HELPERS = os.path.join(TESTS, "helpers")
ROOMS = ("launcher", "rank", "e2e", "multihost", "slurm")


def _test_files():
    """Every .py under tests/ (relative path -> absolute path)."""
    out = {}
    for dirpath, dirs, files in os.walk(TESTS):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                out[os.path.relpath(path, TESTS)] = path
    return out


def _test_module_imports(source):
    """The imports in ``source`` (at any depth) that name a test module: a module whose
    dotted name has a part starting with ``test_``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [base] if base else []
            names += [f"{base}.{a.name}" if base else a.name for a in node.names]
        else:
            continue
        for name in names:
            if any(part.startswith("test_") for part in name.split(".")):
                found.append(f"line {node.lineno}: {name}")
                break
    return found


def _free_port_defs(source):
    """Lines of ``source`` defining a function named free_port (leading underscores or not)."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.lstrip("_") == "free_port"]


def test_the_test_rules_find_planted_breaches():
    assert _test_module_imports("from test_restart import TRAIN\n") == ["line 1: test_restart"]
    assert _test_module_imports("def f():\n    import launcher.test_plan as p\n") == ["line 2: launcher.test_plan"]
    assert _test_module_imports("from . import test_plan\n") == ["line 1: test_plan"]
    assert _test_module_imports("from helpers.launch import run_cli\nimport testhosts_cli\n") == []
    assert _free_port_defs("def free_port():\n    pass\nclass A:\n    def _free_port(self):\n        pass\n") == [1, 4]
    assert _free_port_defs("from helpers.ports import free_port\nport = free_port()\n") == []


def test_no_test_module_imports_another():
    """Shared values live in tests/helpers/: importing a test module runs its module-level code
    and, under pytest's importlib mode, would be a second copy of it."""
    bad = []
    for rel, path in sorted(_test_files().items()):
        bad += [f"{rel}: {hit}" for hit in _test_module_imports(open(path, encoding="utf-8").read())]
    assert bad == []


def test_free_port_is_written_once_in_helpers():
    defs = {rel: _free_port_defs(open(path, encoding="utf-8").read()) for rel, path in _test_files().items()}
    assert {rel: len(lines) for rel, lines in defs.items() if lines} == {os.path.join("helpers", "ports.py"): 1}


def test_rooms_hold_only_test_modules_and_conftest_is_the_only_one():
    files = sorted(_test_files())
    assert [f for f in files if os.path.basename(f) == "conftest.py"] == ["conftest.py"]
    top = [f for f in files if os.sep not in f]
    assert top == ["conftest.py"]
    outside = [f for f in files if f.split(os.sep)[0] not in ROOMS + ("helpers",) and f != "conftest.py"]
    assert outside == []
    in_rooms = [f for f in files if f.split(os.sep)[0] in ROOMS]
    assert in_rooms and [f for f in in_rooms if not os.path.basename(f).startswith("test_")] == []
