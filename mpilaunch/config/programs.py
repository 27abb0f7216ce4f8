"""What kind of program the user brought, told from its source (launcher side; reads files,
never imports or runs them).

* A **MindSpore job** (imports ``mindspore`` / ``mindformers``): rank 0 also runs MindSpore's
  scheduler. Any other program gains nothing from a scheduler copy of itself (a PyTorch script
  dies with EADDRINUSE on MASTER_PORT, a plain script runs a third time, an MPI program calls
  MPI_Init twice as rank 0), so the scheduler runs only for MindSpore jobs.
* An **MPI program** (imports ``mpi4py`` / ``horovod``): it needs ``--exec`` (or a launch where
  the adapter never initialises MPI itself).

The scan: the entry file (SCRIPT, the file of ``-m MODULE``, or for ``--no-python`` the
executable and its file arguments when they are text), and transitively the modules it
imports that resolve to files *next to it* (the script's directory, the module's package root,
relative imports): ``train.py`` doing ``from src.net import Net`` where ``src/net.py`` imports
mindspore counts. Installed packages other than the entry's own are not followed. A shell
script's ``*.py`` arguments (``python train.py``) are followed too. Imports are found by a
line regex (``import a, b as c``, ``from a.b import``, ``__import__('a')``,
``import_module("a")``), so a file with syntax errors or of another Python version is still
read; an import inside a function counts (it would run).
"""
import os
import re
import sys
from typing import Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

from mpilaunch.contract import which

MINDSPORE = ("mindspore", "mindformers")
MPI = ("mpi4py", "horovod")
# Variables only a MindSpore dynamic-cluster launch sets: the user means a MindSpore job.
MS_INTENT_VARS = ("MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM")

MAX_FILES = 200
MAX_BYTES = 2 << 20

_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import\b|import[ \t]+([^#;\n\\]+))"
    r"|(?:__import__|import_module)\([ \t]*['\"](\w[\w.]*)", re.M)
_PY_ARG = r"[\w./-]+\.py\b"   # only a shell wrapper's: compiled when one is read (re caches it)


class Found(NamedTuple):
    """A watched package (``module``) imported by the file ``path``."""

    module: str
    path: str


class Program(NamedTuple):
    """What the scan found."""

    entry: Optional[str]            # the file the scan started from (None: not found)
    mindspore: Optional[Found]
    mpi: Optional[Found]
    scanned: int                    # how many files were read


def _read(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES)
    except OSError:
        return None
    if b"\0" in data[:4096]:
        return None      # a binary executable
    return data.decode("utf-8", "replace")


def imported_modules(source: str) -> List[Tuple[int, str]]:
    """(level, dotted name) of every import in ``source``; level > 0 for relative imports."""
    out = []
    for m in _IMPORT.finditer(source):
        frm, names, dynamic = m.groups()
        if frm is not None:
            level = len(frm) - len(frm.lstrip("."))
            out.append((level, frm.lstrip(".")))
        elif dynamic is not None:
            out.append((0, dynamic))
        else:
            for item in names.strip().strip("()").split(","):
                name = item.strip().split()[0] if item.strip() else ""
                if re.fullmatch(r"\w+(?:\.\w+)*", name):
                    out.append((0, name))
    return out


def _module_file(root: str, dotted: str) -> Optional[str]:
    """The file of module ``dotted`` under ``root`` (``a/b.py``, ``a/b/__init__.py``)."""
    if not dotted:
        return None
    base = os.path.join(root, *dotted.split("."))
    for cand in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(cand):
            return cand
    return None


def find_module(module: str, search: Sequence[str]) -> Optional[Tuple[str, str]]:
    """(file ``python -m module`` runs, the sys.path root it was found under), without
    importing anything: ``pkg/mod.py``, ``pkg/mod/__main__.py``, a package's ``__main__``;
    None when no root holds it."""
    parts = module.split(".")
    for root in search:
        base = os.path.join(root or ".", *parts)
        for cand in (base + ".py", os.path.join(base, "__main__.py")):
            if os.path.isfile(cand):
                return cand, root or "."
    return None


def _watch(dotted: str, level: int) -> Optional[str]:
    top = dotted.split(".")[0] if not level else ""
    if top in MINDSPORE:
        return "mindspore"
    if top in MPI:
        return "mpi"
    return None


def scan(entries: Iterable[str], roots: Sequence[str],
         within: Optional[Sequence[str]] = None) -> Program:
    """Breadth-first over ``entries`` and the local modules they import (resolved under
    ``roots`` and, for relative imports, next to the importing file); only files under
    ``within`` (default: ``roots``) are followed."""
    entries = [os.path.abspath(e) for e in entries]
    within = tuple(os.path.join(os.path.abspath(w), "") for w in (within or roots))
    todo: List[str] = list(entries)
    seen: Set[str] = set()
    found: Dict[str, Optional[Found]] = {"mindspore": None, "mpi": None}
    while todo and len(seen) < MAX_FILES:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.add(path)
        source = _read(path)
        if source is None:
            continue
        here = os.path.dirname(path)
        if not path.endswith(".py") and not source.startswith("#!") or _is_shell(source):
            # a shell wrapper (python train.py ...): follow its .py files
            for rel in re.findall(_PY_ARG, source):
                for base in (here, os.getcwd()):
                    cand = os.path.join(base, rel)
                    if os.path.isfile(cand):
                        todo.append(os.path.abspath(cand))
                        break
            if not path.endswith(".py"):
                continue
        for level, dotted in imported_modules(source):
            kind = _watch(dotted, level)
            if kind and found[kind] is None:
                found[kind] = Found(dotted.split(".")[0], path)
            if level:
                base = here
                for _ in range(level - 1):
                    base = os.path.dirname(base)
                cands = [(base, dotted)] if dotted else []
            else:
                cands = [(r, dotted) for r in (here, *roots)]
            for root, name in cands:
                # a.b.c: a/__init__.py, a/b/__init__.py and a/b/c.py all run
                parts = name.split(".")
                for i in range(1, len(parts) + 1):
                    f = _module_file(root, ".".join(parts[:i]))
                    if f is not None and os.path.abspath(f).startswith(within):
                        todo.append(os.path.abspath(f))
        if found["mindspore"] and found["mpi"]:
            break
    return Program(entries[0] if entries else None, found["mindspore"], found["mpi"], len(seen))


def _is_shell(source: str) -> bool:
    first = source.split("\n", 1)[0]
    return first.startswith("#!") and "python" not in first


def inspect(script: Optional[str], module: Optional[str], script_args: Sequence[str],
            no_python: bool, path_env: Optional[str] = None) -> Program:
    """The program of a launch: ``-m module``, a Python SCRIPT, or (``--no-python``) an
    executable and its arguments that are files (``bash run.sh``, ``python3 train.py``)."""
    if module:
        search = [os.getcwd()] + [p for p in sys.path[1:] if p]
        where = find_module(module, search)
        if where is None:
            return Program(None, None, None, 0)
        entry, root = where
        top = os.path.join(root, module.split(".")[0])
        inits = [os.path.join(top, "__init__.py")] if os.path.isdir(top) else []
        # the module's own package is followed (mpi4py.bench -> mpi4py), not all site-packages
        within = [root] if os.path.abspath(root) == os.getcwd() else [top if inits else entry]
        return scan([entry] + inits, [root], within)
    if not no_python:
        return scan([script], [os.path.dirname(os.path.abspath(script))]) if script else \
            Program(None, None, None, 0)
    entries = []
    exe = script if os.sep in (script or "") else (which(script, path_env) if script else None)
    if exe and os.path.isfile(exe):
        entries.append(exe)
    entries += [a for a in script_args if os.path.isfile(a)]
    if not entries:
        return Program(None, None, None, 0)
    return scan(entries, [os.getcwd()])


def ms_intent(env: Mapping[str, str]) -> Optional[str]:
    """The first MindSpore dynamic-cluster variable set in ``env`` (the user's intent)."""
    return next((n for n in MS_INTENT_VARS if env.get(n)), None)
