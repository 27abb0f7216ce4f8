"""mypy over the whole of mpilaunch/ finds no error.

The checker and its options are in setup.cfg (``[mypy]``: which options and why; the version
pinned in the ``test`` extra, as a newer mypy finds new errors by itself). The declared
protocols (a backend, a plan, what a function takes and returns) are only worth their
annotations while something holds the code to them: this test does. It runs mypy as the
command a developer would (``python3 -m mypy`` from the repository root, setup.cfg read),
with mypy's cache in .mypy_cache/; its Any report reads every module again each run (~10 s
here)."""
import ast
import configparser
import os
import re
import subprocess
import sys
from importlib import metadata

from helpers import REPO

SETUP_CFG = os.path.join(REPO, "setup.cfg")
# The share of the package's expressions whose type is Any (mypy --any-exprs-report), at most:
# an Any is an expression nothing checks. 13.4 % before the configuration, the backends'
# protocol and the first modules held by disallow_untyped_defs were typed, 9.6 % after;
# 8.0 % once a rank's status line, the loop's config and the output/, attempts/, supervise/ and
# report/ packages were; 7.6 % -> 4.2 % once the rank side's records, the option table, the
# records output/events.py, stacks/server.py and monitor/ read and the rank side's last untyped
# functions were typed; 3.3 % once every function of the package was annotated (setup.cfg's
# disallow_untyped_defs holds them all); lower it as more is typed, never raise it.
ANY_SHARE_CAP = 3.4


def _pinned() -> str:
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    for line in cfg["options.extras_require"]["test"].splitlines():
        if line.strip().startswith("mypy=="):
            return line.strip()[len("mypy=="):]
    raise AssertionError("setup.cfg: the test extra pins no mypy (mypy==X.Y.Z)")


def _modules() -> int:
    return sum(1 for _, _, files in os.walk(os.path.join(REPO, "mpilaunch"))
               for f in files if f.endswith(".py"))


def test_mypy_finds_no_error_in_the_package(tmp_path):
    want = _pinned()
    try:
        got = metadata.version("mypy")
    except metadata.PackageNotFoundError:
        raise AssertionError(f"mypy is not installed: it is a test dependency "
                             f"(pip install -e '.[test]' installs mypy=={want})") from None
    assert got == want, f"mypy {got} is installed, setup.cfg pins {want}: pip install -e '.[test]'"
    # the report reads every module again (~9 s of CPU, the cache does not spare it): one run
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", SETUP_CFG,
                           "--any-exprs-report", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mypy found errors:\n{proc.stdout}{proc.stderr}"
    # every module was checked: setup.cfg's files = mpilaunch, nothing excluded
    m = re.search(r"Success: no issues found in (\d+) source files", proc.stdout)
    assert m and int(m.group(1)) == _modules(), proc.stdout
    total = re.search(r"^\s*Total\s+(\d+)\s+(\d+)", (tmp_path / "any-exprs.txt").read_text(), re.M)
    assert total, (tmp_path / "any-exprs.txt").read_text()
    share = 100.0 * int(total.group(1)) / int(total.group(2))
    assert share <= ANY_SHARE_CAP, (
        f"{share:.2f} % of the package's expressions are Any, over the cap of {ANY_SHARE_CAP} %: "
        "annotate the new code (python3 -m mypy --any-exprs-report DIR lists them by module)")


def _requirement(line: str) -> str:
    """A requirement's distribution name, normalised (``prometheus-client>=0.20`` ->
    ``prometheus_client``)."""
    return re.split(r"[\s<>=!~;\[(]", line.strip(), maxsplit=1)[0].lower().replace("-", "_")


def _needed_distributions() -> set:
    """The package's own and its test extra's distributions, and what they require in turn:
    what a venv made with ``pip install -e '.[test]'`` holds."""
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    todo = [_requirement(line) for key in (("options", "install_requires"),
                                          ("options.extras_require", "test"))
            for line in cfg[key[0]][key[1]].splitlines()
            if line.strip() and not line.strip().startswith("#")]
    seen: set = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_requirement(r) for r in reqs if "extra ==" not in r]
    return seen


def _imported_top_names() -> set:
    names = set()
    for root, _, files in os.walk(os.path.join(REPO, "mpilaunch")):
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(root, f)) as src:
                    tree = ast.parse(src.read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        names |= {a.name.split(".")[0] for a in node.names}
                    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                        names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"mpilaunch"}


def test_mypy_needs_no_optional_framework():
    """A module the package imports that neither the package nor its test extra installs (torch,
    imported by rank/inplace/spare.py only where torch runs) is never read by mypy: setup.cfg
    gives it ``follow_imports = skip`` and ``ignore_missing_imports``, so the check passes in a
    venv without it and answers the same with it installed. A C module no distribution ships
    (``_sha2``) needs only the latter."""
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    skipped, ignored = set(), set()
    for section in cfg.sections():
        if section.startswith("mypy-"):
            mods = {m.strip().split(".")[0] for m in section[len("mypy-"):].split(",")}
            if cfg[section].getboolean("ignore_missing_imports", False):
                ignored |= mods
                if cfg[section].get("follow_imports") == "skip":
                    skipped |= mods
    have = set(_needed_distributions())
    shipped = metadata.packages_distributions()
    wrong = []
    for name in sorted(_imported_top_names()):
        dists = {d.lower().replace("-", "_") for d in shipped.get(name, [])}
        if dists & have:
            continue
        if name not in (skipped if dists else ignored):
            wrong.append(name)
    assert not wrong, (f"mpilaunch imports {wrong}, which pip install -e '.[test]' does not "
                       "install: give each a [mypy-NAME,NAME.*] section in setup.cfg with "
                       "follow_imports = skip and ignore_missing_imports = True (or add it to the "
                       "test extra)")
