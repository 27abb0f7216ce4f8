"""Every module of the package imports, every ``mpilaunch.*`` name any module imports resolves
(also the imports inside functions: a module moved or renamed must not break only the rare path
that imports it late), and the packages import one way (docs/ARCHITECTURE.md, "The rooms")."""
import ast
import importlib
import os
import subprocess
import sys

import pytest

from helpers import REPO, package

PKG = os.path.join(REPO, "mpilaunch")

# The layers, lowest first: a module may import its own package and the layers below it.
# "root" is the shared modules beside the entry points (contract, errors, net, netif,
# pdeathsig, procstat, rundir, ssh); run, api and cli are the entry points. docs/ARCHITECTURE.md
# says the same order (tests/launcher/test_architecture_map.py holds the two equal).
LAYERS = ("root", "monitor", "rank", "output", "config", "check", "backends", "stacks", "supervise", "attempts",
          "run", "job", "report", "api", "cli")
ENTRY = {"run": "run", "api": "api", "cli": "cli", "__main__": "cli"}
# Imports against the order, each for a reason: the package root loads the Python API on
# first use only (every rank imports the root).
ALLOWED = {("mpilaunch", "mpilaunch.api")}


_modules = package.modules


def _imported(path):
    """(line, module, name or None) of every absolute mpilaunch import in ``path``, at any depth."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("mpilaunch"):
            for a in node.names:
                yield node.lineno, node.module, a.name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("mpilaunch"):
                    yield node.lineno, a.name, None


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "root"
    if len(parts) == 2 and parts[1] in ENTRY:
        return ENTRY[parts[1]]
    return parts[1] if parts[1] in LAYERS else "root"


def _target(module, name, modules):
    sub = f"{module}.{name}" if name else module
    return sub if sub in modules else module


def breaches(graph):
    """``graph``: module -> the mpilaunch modules it imports. -> 'a -> b' against the layers."""
    out = []
    for m, deps in sorted(graph.items()):
        for d in sorted(deps):
            la, lb = _layer(m), _layer(d)
            if la != lb and LAYERS.index(lb) > LAYERS.index(la) and (m, d) not in ALLOWED:
                out.append(f"{m} ({la}) -> {d} ({lb})")
    return out


def test_every_module_imports():
    names = [m for m in _modules() if not m.endswith("__main__")]
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\nprint('ok')"
    proc = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_every_mpilaunch_name_a_module_imports_resolves():
    modules = _modules()
    missing = []
    for m, path in sorted(modules.items()):
        for line, module, name in _imported(path):
            if module not in modules and module != "mpilaunch":
                missing.append(f"{os.path.relpath(path, REPO)}:{line}: no module {module}")
                continue
            if name is None or name == "*" or f"{module}.{name}" in modules:
                continue
            mod = importlib.import_module(module)
            if not hasattr(mod, name) and name not in getattr(mod, "_API", ()):
                missing.append(f"{os.path.relpath(path, REPO)}:{line}: {module} has no {name}")
    assert missing == []


def test_a_moved_module_is_found_even_inside_a_function(tmp_path):
    planted = tmp_path / "late.py"
    planted.write_text("def f():\n    from mpilaunch.launcher import run\n    from mpilaunch.config import nothing_here\n")
    found = list(_imported(str(planted)))
    assert found == [(2, "mpilaunch.launcher", "run"), (3, "mpilaunch.config", "nothing_here")]


def test_the_packages_import_one_way():
    modules = _modules()
    graph = {m: {_target(mod, name, modules) for _, mod, name in _imported(p)} - {m, "mpilaunch"}
             for m, p in modules.items()}
    assert len(graph) > 60
    assert breaches(graph) == []


@pytest.mark.parametrize("graph, expected", [
    ({"mpilaunch.config.options": {"mpilaunch.supervise.starter"}},
     ["mpilaunch.config.options (config) -> mpilaunch.supervise.starter (supervise)"]),
    ({"mpilaunch.net": {"mpilaunch.config.hostfile"}}, ["mpilaunch.net (root) -> mpilaunch.config.hostfile (config)"]),
    ({"mpilaunch.attempts.restart": {"mpilaunch.supervise.starter", "mpilaunch.config.resilience"}}, []),
    ({"mpilaunch.cli": {"mpilaunch.run", "mpilaunch.job.command"}}, []),
])
def test_the_layer_rule_itself(graph, expected):
    assert breaches(graph) == expected


def private_reach(path, modules):
    """'file:line: module._name' where ``path`` imports a private name of another module, or
    reads one off a module it imported (``events._rec``): that state belongs to its module."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    rel, out, aliases = os.path.relpath(path, REPO), [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("mpilaunch"):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    out.append(f"{rel}:{node.lineno}: {node.module}.{a.name}")
                elif f"{node.module}.{a.name}" in modules:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            out.append(f"{rel}:{node.lineno}: {aliases[node.value.id]}.{node.attr}")
    return out


def test_no_module_reaches_into_another_modules_private_state():
    modules = _modules()
    found = [hit for path in modules.values() for hit in private_reach(path, modules)]
    assert found == []


def test_private_reach_finds_a_planted_one(tmp_path):
    planted = tmp_path / "reach.py"
    planted.write_text("from mpilaunch.output import events\nfrom mpilaunch.config.mpi import _X\n"
                       "def f():\n    return events._rec, events.emit\n")
    assert [h.split(": ", 1)[1] for h in private_reach(str(planted), _modules())] == [
        "mpilaunch.config.mpi._X", "mpilaunch.output.events._rec"]


# Underscored names that are public by convention: namedtuple's API, os._exit, ctypes' own.
CONVENTION = {"_replace", "_asdict", "_make", "_fields", "_fields_", "_exit", "_SimpleCData"}


def object_reach(path):
    """'file:line: obj._name' where ``path`` reads an underscored attribute of an object that is
    not its own (``self``, ``cls``, ``super()``): another class's private method called from
    outside (``sup._wait_for(...)``), which a rename there would break only on that path."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    rel, out = os.path.relpath(path, REPO), []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and node.attr not in CONVENTION):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and getattr(owner.func, "id", None) == "super":
                continue
            out.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_module_calls_another_objects_private_methods():
    found = [hit for path in _modules().values() for hit in object_reach(path)]
    assert found == []


def test_object_reach_finds_a_planted_one(tmp_path):
    planted = tmp_path / "reach.py"
    planted.write_text("import os\nclass A:\n    def f(self, sup, t):\n        self._own()\n"
                       "        super()._base()\n        os._exit(t._replace(a=1))\n"
                       "        return sup._wait_for([], 1)\n")
    assert [h.split(": ", 1)[1] for h in object_reach(str(planted))] == ["sup._wait_for"]


def test_no_module_shadows_the_python_api():
    """``mpilaunch.launch()`` and the other names of the Python API are found by the package
    root's ``__getattr__``; a subpackage or module of the same name, once imported, would
    replace it (``mpilaunch.launch(...)``: 'module' object is not callable)."""
    import mpilaunch

    names = {m.split(".")[1] for m in _modules() if m.count(".") >= 1}
    assert names & set(mpilaunch._API) == set()
    code = ("import importlib, sys, mpilaunch\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
            "print(all(callable(getattr(mpilaunch, a)) for a in mpilaunch._API))")
    names = [m for m in _modules() if not m.endswith("__main__")]
    proc = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.stdout.strip() == "True", proc.stderr
