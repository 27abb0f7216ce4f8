"""Every repository path the code, the tests and the docs name exists.

What counts as a cited path (decided here, one place):

- a token that starts with one of the repository's top-level folders (``mpilaunch/``,
  ``tests/``, ``docs/``, ``scripts/``, ``bench/``, ``examples/``, ``hostfiles/``), not preceded
  by a word character, ``/``, ``.`` or ``$`` (so ``/opt/mpilaunch/ms-venv``,
  ``~/.cache/mpilaunch/...`` and ``<pkg>/rank/_boot.py`` are not this repository's paths);
  trailing punctuation and a pytest node id (``::test_x``) are cut off; a token holding a
  placeholder (``<package>``, ``{rank}``, ``*``, ``...``, ``$``) is skipped;
- a dotted module name ``mpilaunch.x.y`` (``python3 -m mpilaunch.config.options``,
  ``mpilaunch.check.run_checks``): its longest prefix that is a module must exist and, when
  a name follows, that module must define it at its top level (``mpilaunch.launch()`` is the
  package's own ``launch``);
- in README.md and docs/*.md, a Markdown link or image target that is not a URL or an anchor,
  relative to the page;
- in the prose of Markdown pages (not their fenced code blocks: example code, whose ``job`` is
  a variable) and of Python files (comments and docstrings: in mpilaunch/'s code a ``job.wait()``
  is a variable's), a short name that starts with one of the package's own modules:
  ``supervise.starter.run_attempt``, ``config.sshconfig``, ``contract.whole`` (resolved as
  ``mpilaunch.`` + it, the rule above) and ``supervise/starter.run_attempt`` (the module's file,
  then the name in it). Not a short name: one whose last part is a file suffix (``run.py``,
  ``run.sh``: a file), nor, after a root module that is not a package, a lower-case second part
  followed by more (``net.ipv4.ip_local_port_range`` is a sysctl; ``net.Host.x`` would be ours).

Scanned: mpilaunch/, tests/, docs/, README.md, scripts/, bench/ (not bench/report/: historical
measurement records, left as they were written) and examples/. In tests/, a Python file is held
to its comments and docstrings only (its other string literals are data: a test plants stale
paths there to show that a checker reports them) and .txt files are recorded data, not read.
The other rule about citations, that nothing names the documents outside this repository,
lives here too (it was test_layout.py's ``test_code_and_docs_cite_only_this_repository``)."""
import ast
import functools
import os
import re

from helpers import REPO as ROOT

TOPS = ("mpilaunch", "tests", "docs", "scripts", "bench", "examples", "hostfiles")
SCANNED = ("mpilaunch", "tests", "docs", "scripts", "bench", "examples", "README.md")
NOT_SCANNED = (os.path.join("bench", "report"),)
# What the code writes at run time, not part of the repository (.gitignore: /bench/out/).
GENERATED = ("bench/out/",)
SUFFIXES = (".py", ".md", ".sh", ".txt", ".cfg", ".toml")

PATH = re.compile(r"(?<![\w/.$~-])(?:" + "|".join(TOPS) + r")/[\w./<>{}*$+-]*")
MODULE = re.compile(r"(?<![\w/.$-])mpilaunch(?:\.[A-Za-z_]\w*)+")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FILE_SUFFIXES = {"py", "sh", "md", "txt", "json", "jsonl", "log", "html", "cfg", "toml", "yaml",
                 "yml", "env", "csv", "gz", "so", "c"}
PLACEHOLDER = re.compile(r"[<>{}*$]|\.\.\.|/\.\.?(?:/|$)")
# The names of the documents outside this repository, spelled in pieces so that this file,
# which looks for them, does not itself cite them.
OUTSIDE = re.compile("|".join(["FIELD" + "_NOTES", "shared" + "/docs", "shared" + "/seeds"]))


def _clean(token):
    return token.rstrip(".")


def paths_in(text):
    """The repository paths ``text`` names, as written (placeholders left out)."""
    out = []
    for m in PATH.finditer(text):
        token = _clean(m.group(0))
        if PLACEHOLDER.search(token) or token.startswith(GENERATED):
            continue
        out.append(token)
    return out


def links_in(text):
    """Markdown link targets of ``text`` that name a file (no URL, no anchor, no mail)."""
    out = []
    for m in LINK.finditer(text):
        target = m.group(1).split("#", 1)[0]
        if not target or re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue
        out.append(target)
    return out


@functools.lru_cache(maxsize=None)
def _top_names(path):
    """Names a module defines at its top level (defs, classes, assignments, imports)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                    names.add(sub.name)
                elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.add(sub.id)
                elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                    names.update((a.asname or a.name).split(".")[0] for a in sub.names)
    if "__getattr__" in names:      # a lazy attribute is named as a string (mpilaunch._API)
        names.update(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                     and isinstance(n.value, str) and n.value.isidentifier())
    return names


def _module_file(root, dotted):
    base = os.path.join(root, *dotted.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def module_problem(root, dotted):
    """Why the dotted name ``mpilaunch.x.y...`` names nothing in ``root`` (None: it does)."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        path = _module_file(root, ".".join(parts[:n]))
        if path is None:
            continue
        if n == len(parts) or parts[n] in _top_names(path) or os.path.isdir(
                os.path.join(root, *parts[:n + 1])):
            return None
        return f"{'.'.join(parts[:n])} has no {parts[n]}"
    return "no such module"


def _own_roots(root):
    """(subpackages, root modules) of ``root``'s mpilaunch/, by name."""
    base = os.path.join(root, "mpilaunch")
    names = sorted(os.listdir(base)) if os.path.isdir(base) else []
    pkgs = [n for n in names if os.path.isfile(os.path.join(base, n, "__init__.py"))]
    mods = [n[:-3] for n in names if n.endswith(".py") and n[:-3].isidentifier()
            and not n.startswith("_")]
    return pkgs, mods


@functools.lru_cache(maxsize=None)
def _short_forms(root):
    """The regular expressions of the short names (dotted, and package/module.name)."""
    pkgs, mods = _own_roots(root)
    if not pkgs and not mods:
        return None, None
    first = "|".join(pkgs + mods)
    dotted = re.compile(r"(?<![\w/.$~-])(?:" + first + r")(?:\.[A-Za-z_]\w*)+")
    pathy = re.compile(r"(?<![\w/.$~-])(?:" + "|".join(pkgs or ["(?!)"]) +
                       r")/[A-Za-z_]\w*\.[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
    return dotted, pathy


def short_name_problems(root, line):
    """``what (why)`` for each short name in ``line`` (prose) that names nothing in ``root``."""
    dotted, pathy = _short_forms(root)
    if dotted is None:
        return []
    _, mods = _own_roots(root)
    out = []
    for m in dotted.finditer(line):
        parts = m.group(0).split(".")
        if parts[-1] in FILE_SUFFIXES or line[m.end():m.end() + 1] in ("(", "/"):
            continue
        if parts[0] in mods and len(parts) > 2 and parts[1][:1].islower():
            continue
        why = module_problem(root, "mpilaunch." + m.group(0))
        if why:
            out.append(f"{m.group(0)} ({why})")
    for m in pathy.finditer(line):
        folder, rest = m.group(0).split("/", 1)
        parts = rest.split(".")
        if parts[-1] in FILE_SUFFIXES or line[m.end():m.end() + 1] in ("(", "/"):
            continue
        why = module_problem(root, ".".join(["mpilaunch", folder] + parts))
        if why:
            out.append(f"{m.group(0)} ({why})")
    return out


def _prose(rel, text):
    """{line: text} of what ``text`` says in words: a Python file's comments and docstrings, a
    Markdown page outside its fenced code blocks; nothing of other files."""
    if rel.endswith(".py"):
        return sorted(prose_lines(text).items())
    if not rel.endswith(".md"):
        return []
    out, fenced = [], False
    for no, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            out.append((no, line))
    return out


def scanned_files(root):
    for top in SCANNED:
        base = os.path.join(root, top)
        if os.path.isfile(base):
            yield base
            continue
        for dirpath, dirs, files in os.walk(base):
            rel = os.path.relpath(dirpath, root)
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.endswith(".egg-info")
                             and os.path.join(rel, d) not in NOT_SCANNED)
            for f in sorted(files):
                # tests/'s .txt files are recorded data (py-spy dumps), not prose
                if f.endswith(SUFFIXES) and not (top == "tests" and f.endswith(".txt")):
                    yield os.path.join(dirpath, f)


def prose_lines(source):
    """The comments and docstrings of a Python source, as {line number: text}: what a test
    cites. Its other string literals are data: a test plants stale paths there on purpose, to
    show that a checker reports them."""
    import io
    import tokenize

    lines = source.splitlines()
    out = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(
                node.value.value, str):
            for no in range(node.lineno, node.end_lineno + 1):
                out[no] = out.get(no, "") + " " + lines[no - 1]
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = out.get(tok.start[0], "") + " " + tok.string
    return out


def _lines_of(rel, text):
    if rel.startswith("tests" + os.sep) and rel.endswith(".py"):
        return sorted(prose_lines(text).items())
    return enumerate(text.splitlines(), 1)


def stale_citations(root, files=None):
    """``file:line: what`` for every cited path, module or link that does not exist (in
    tests/'s Python files, in their comments and docstrings only: :func:`prose_lines`)."""
    bad = []
    for path in files if files is not None else scanned_files(root):
        rel = os.path.relpath(path, root)
        text = open(path, encoding="utf-8", errors="replace").read()
        for no, line in _lines_of(rel, text):
            for token in paths_in(line):
                if not os.path.exists(os.path.join(root, token)):
                    bad.append(f"{rel}:{no}: {token}")
            for dotted in MODULE.findall(line):
                why = module_problem(root, dotted)
                if why:
                    bad.append(f"{rel}:{no}: {dotted} ({why})")
            if rel.endswith(".md"):
                for target in links_in(line):
                    if not os.path.exists(os.path.join(os.path.dirname(path), target)):
                        bad.append(f"{rel}:{no}: link {target}")
        for no, line in _prose(rel, text):
            bad += [f"{rel}:{no}: {what}" for what in short_name_problems(root, line)]
    return bad


def test_the_scanner_reports_a_planted_stale_path(tmp_path):
    (tmp_path / "mpilaunch" / "supervise").mkdir(parents=True)
    (tmp_path / "mpilaunch" / "__init__.py").write_text("def launch():\n    pass\n")
    (tmp_path / "mpilaunch" / "supervise" / "__init__.py").write_text("")
    (tmp_path / "mpilaunch" / "supervise" / "starter.py").write_text("def run_attempt():\n    pass\n")
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "PAGE.md"
    page.write_text(
        "the starter: mpilaunch/supervise/starter.py, `mpilaunch/supervise/starter.py::run_attempt`.\n"
        "stale: (mpilaunch/launcher.py), mpilaunch/stall.py: and docs/GONE.md\n"
        "placeholders: mpilaunch/<package>/x.py, tests/launcher/test_{name}.py, "
        "/opt/mpilaunch/ms-venv, <pkg>/rank/_boot.py\n"
        "modules: mpilaunch.supervise.starter.run_attempt, mpilaunch.launch(),"
        " mpilaunch.supervise.starter.gone, mpilaunch.tune\n"
        "links: [ok](PAGE.md), [web](https://example.org/x.md), [anchor](#top), [gone](OLD.md)\n")
    assert stale_citations(str(tmp_path), [str(page)]) == [
        "docs/PAGE.md:2: mpilaunch/launcher.py",
        "docs/PAGE.md:2: mpilaunch/stall.py",
        "docs/PAGE.md:2: docs/GONE.md",
        "docs/PAGE.md:4: mpilaunch.supervise.starter.gone (mpilaunch.supervise.starter has no gone)",
        "docs/PAGE.md:4: mpilaunch.tune (mpilaunch has no tune)",
        "docs/PAGE.md:5: link OLD.md",
    ]


def test_short_names_resolve_against_the_package(tmp_path):
    (tmp_path / "mpilaunch" / "supervise").mkdir(parents=True)
    (tmp_path / "mpilaunch" / "__init__.py").write_text("")
    (tmp_path / "mpilaunch" / "net.py").write_text("class Host:\n    pass\ndef is_here():\n    pass\n")
    (tmp_path / "mpilaunch" / "supervise" / "__init__.py").write_text("")
    (tmp_path / "mpilaunch" / "supervise" / "starter.py").write_text(
        "def run_attempt():\n    pass\nclass Job:\n    def end(self):\n        pass\n")
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "PAGE.md"
    page.write_text(
        "ok: supervise.starter.run_attempt, `supervise/starter.run_attempt`, net.is_here, "
        "net.Host.x, supervise.starter.Job.end\n"
        "not names: run.py, supervise/starter.py, net.ipv4.ip_local_port_range, job.wait(), "
        "self.supervise.gone, mpilaunch/supervise/starter.py\n"
        "stale: supervise.starter.gone, supervise.launcher, net.gone, supervise/starter.gone, "
        "supervise/launcher.run\n"
        "```\nsupervise.in_a_code_block\n```\n")
    assert stale_citations(str(tmp_path), [str(page)]) == [
        "docs/PAGE.md:3: supervise.starter.gone (mpilaunch.supervise.starter has no gone)",
        "docs/PAGE.md:3: supervise.launcher (mpilaunch.supervise has no launcher)",
        "docs/PAGE.md:3: net.gone (mpilaunch.net has no gone)",
        "docs/PAGE.md:3: supervise/starter.gone (mpilaunch.supervise.starter has no gone)",
        "docs/PAGE.md:3: supervise/launcher.run (mpilaunch.supervise has no launcher)",
    ]
    code = tmp_path / "mpilaunch" / "supervise" / "user.py"
    code.write_text('"""Calls supervise.starter.gone."""\nsupervise = object()\n'
                    'supervise.starter.gone  # see net.gone\n')
    assert stale_citations(str(tmp_path), [str(code)]) == [
        "mpilaunch/supervise/user.py:1: supervise.starter.gone (mpilaunch.supervise.starter has no gone)",
        "mpilaunch/supervise/user.py:3: net.gone (mpilaunch.net has no gone)",
    ]


def test_a_test_is_held_to_its_comments_and_docstrings(tmp_path):
    (tmp_path / "tests").mkdir()
    test = tmp_path / "tests" / "test_x.py"
    test.write_text('"""Checks docs/GONE.md."""\n'
                    'PLANTED = "from mpilaunch.launcher import run"   # data, not a citation\n'
                    'def test_f():\n'
                    '    """A docstring naming mpilaunch/stall.py."""\n'
                    '    x = "tests/nowhere.py"\n'
                    '    return x  # see scripts/gone.sh\n')
    assert stale_citations(str(tmp_path), [str(test)]) == [
        "tests/test_x.py:1: docs/GONE.md",
        "tests/test_x.py:4: mpilaunch/stall.py",
        "tests/test_x.py:6: scripts/gone.sh",
    ]


def test_every_cited_path_exists():
    # this file is left out: it plants stale paths on purpose
    files = [f for f in scanned_files(ROOT) if os.path.abspath(f) != os.path.abspath(__file__)]
    assert any(f.endswith(os.path.join("docs", "ARCHITECTURE.md")) for f in files)
    assert not any(os.sep + os.path.join("bench", "report") + os.sep in f for f in files)
    bad = stale_citations(ROOT, files)
    assert bad == [], "stale paths (point each at the file that now holds it):\n" + "\n".join(bad)


def test_nothing_cites_the_documents_outside_this_repository():
    bad = []
    for path in scanned_files(ROOT):
        if os.path.abspath(path) == os.path.abspath(__file__):
            continue
        text = open(path, encoding="utf-8", errors="replace").read()
        bad += [f"{os.path.relpath(path, ROOT)}: {m.group(0)}" for m in OUTSIDE.finditer(text)]
    assert bad == []
