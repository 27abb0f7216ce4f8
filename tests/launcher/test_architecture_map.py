"""docs/ARCHITECTURE.md's map ("The rooms") and its layer order say what the tree is: every
module of mpilaunch/ is named in the map, every module the map names exists, and the order the
imports go in is the one tests/launcher/test_imports.py holds (its LAYERS). A module added
without its line fails here, and the message says which line to write where."""
import os
import re

from helpers import REPO

DOC = os.path.join(REPO, "docs", "ARCHITECTURE.md")
PKG = os.path.join(REPO, "mpilaunch")
ENTRY_POINTS = ("__init__", "__main__", "cli", "api", "run")


def _lines():
    with open(DOC, encoding="utf-8") as f:
        return f.read().splitlines()


def _map(lines):
    """The map's block -> (root entries {name.py: line no}, package sections {pkg: [(line no,
    text)]}), line numbers 1-based as an editor shows them."""
    start = lines.index("mpilaunch/")
    roots, sections, current = {}, {}, None
    for no, line in enumerate(lines[start + 1:], start + 2):
        if line and not line.startswith(" "):
            break                                   # tests/: the package's map has ended
        entry = re.match(r"  ([\w.]+)(/?)\s", line + " ")
        if entry and not line.startswith("   "):
            name, is_pkg = entry.groups()
            current = name if is_pkg else None
            if is_pkg:
                sections[name] = [(no, line)]
            elif name.endswith(".py"):
                roots[name] = no
        elif current is not None:
            sections[current].append((no, line))
    return roots, sections


def _tree():
    """-> (root modules, {package: its modules, relative to the package, sub-packages' too});
    a package's own __init__.py is its section's head, not a line of its own."""
    roots = sorted(f for f in os.listdir(PKG) if f.endswith(".py"))
    packages = {}
    for pkg in sorted(os.listdir(PKG)):
        top = os.path.join(PKG, pkg)
        if not os.path.isfile(os.path.join(top, "__init__.py")):
            continue
        mods = []
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for f in sorted(files):
                if f.endswith(".py") and not (f == "__init__.py" and root == top):
                    mods.append(os.path.relpath(os.path.join(root, f), top))
        packages[pkg] = mods
    return roots, packages


def _named(module, text):
    """Does the section's text name ``module`` (``x.py``, or ``sub/x.py`` inside a sub-package:
    a sub-package's modules may stand in its paragraph under their own name)?"""
    base = os.path.basename(module)
    if base == "__init__.py":    # a sub-package: its folder is named
        return re.search(r"(?<![\w/])" + re.escape(os.path.dirname(module)) + "/", text) is not None
    return re.search(r"(?<![\w.])" + re.escape(base) + r"\b", text) is not None


def missing_lines(lines):
    """What the map lacks, each as the line to add and where."""
    roots, sections = _map(lines)
    tree_roots, packages = _tree()
    out = []
    for name in tree_roots:
        if name not in roots:
            shared = [n for n, no in roots.items() if os.path.splitext(n)[0] not in ENTRY_POINTS]
            after = max((roots[n] for n in shared), default=max(roots.values()))
            out.append(f"mpilaunch/{name}: add after line {after} of docs/ARCHITECTURE.md: "
                       f"'  {name:<16} <what it holds>' (and to the layer order's root modules "
                       "if it is a shared module)")
    last = max(no for body in sections.values() for no, _ in body)
    for pkg, mods in packages.items():
        if pkg not in sections:
            out.append(f"mpilaunch/{pkg}/: add after line {last} of docs/ARCHITECTURE.md (the "
                       f"map's last package) a section '  {pkg + '/':<16} <what the package is "
                       f"for>', then a line '    <module>.py       <what it does>' for each of "
                       f"{', '.join(mods)}")
            continue
        body = sections[pkg]
        text = "\n".join(t for _, t in body)
        listed = [no for no, t in body if re.match(r"    [\w]+\.py\s", t)]
        for mod in mods:
            if _named(mod, text):
                continue
            if listed:     # a section of one line per module
                out.append(f"mpilaunch/{pkg}/{mod}: add after line {listed[-1]} of "
                           f"docs/ARCHITECTURE.md: '    {os.path.basename(mod):<16} <what it does>'")
            else:          # a paragraph naming its modules
                out.append(f"mpilaunch/{pkg}/{mod}: name it in the '{pkg}/' paragraph of "
                           f"docs/ARCHITECTURE.md (lines {body[0][0]}-{body[-1][0]}): "
                           f"'{os.path.basename(mod)} (<what it does>)'")
    return out


def stale_names(lines):
    """Modules the map names that are not in the tree: '<line>: <name>'."""
    roots, sections = _map(lines)
    out = [f"line {no}: {name}" for name, no in roots.items()
           if not os.path.isfile(os.path.join(PKG, name))]
    for pkg, body in sections.items():
        here = {os.path.basename(m) for m in _tree()[1].get(pkg, [])} | {"__init__.py"}
        for no, text in body:
            for ref in re.findall(r"(?<![\w.])((?:[\w]+/)*[\w]+\.py)\b", text):
                if "/" in ref:
                    found = os.path.isfile(os.path.join(PKG, ref)) or \
                        os.path.isfile(os.path.join(PKG, pkg, ref))
                else:
                    found = ref in here
                if not found:
                    out.append(f"line {no}: {ref} (in the {pkg}/ section)")
    return out


def layer_order(lines):
    """The doc's sentence 'Imports go one way, down this order: ...' -> (its root modules, its
    layers after the root), as the backticked names stand in it."""
    text = " ".join(lines)
    m = re.search(r"Imports go one way, down this order: the root's shared modules \(([^)]*)\)"
                  r"((?:\s*<\s*`[\w]+`)+)", text)
    assert m, "docs/ARCHITECTURE.md: the sentence 'Imports go one way, down this order: ...' is gone"
    return re.findall(r"`(\w+)`", m.group(1)), re.findall(r"`(\w+)`", m.group(2))


def _layers():
    import ast
    path = os.path.join(REPO, "tests", "launcher", "test_imports.py")
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "LAYERS":
            return list(ast.literal_eval(node.value))
    raise AssertionError("tests/launcher/test_imports.py has no LAYERS")


def test_every_module_is_on_the_map():
    assert missing_lines(_lines()) == []


def test_the_map_names_no_module_that_is_gone():
    assert stale_names(_lines()) == []


def test_the_layer_order_is_the_import_tests():
    """The doc's order is test_imports.py's LAYERS (after "root"), and its root modules are
    the root's shared modules (every root module but the entry points)."""
    roots, layers = layer_order(_lines())
    want = _layers()
    assert layers == want[1:], (f"docs/ARCHITECTURE.md's layer order {' < '.join(layers)}: "
                                f"tests/launcher/test_imports.py's LAYERS say {' < '.join(want[1:])}")
    shared = sorted(os.path.splitext(n)[0] for n in _tree()[0]
                    if os.path.splitext(n)[0] not in ENTRY_POINTS)
    assert sorted(roots) == shared, ("docs/ARCHITECTURE.md's layer order names the root's shared "
                                     f"modules {sorted(roots)}; the tree has {shared}")
    packages = sorted(_tree()[1])
    assert sorted(set(packages) - set(want)) == [], (
        "a package the layers do not place (tests/launcher/test_imports.py's LAYERS counts it "
        "as the root): add it to LAYERS and to docs/ARCHITECTURE.md's layer order")


def test_a_new_module_fails_with_the_line_to_add():
    """The failure says where: a module of a one-line-per-module section, one of a paragraph
    section, a package the map lacks, a root module; a line naming a module that is gone."""
    lines = _lines()
    roots, sections = _map(lines)
    no, first = next((no, t) for no, t in sections["config"] if re.match(r"    \w+\.py\s", t))
    name = first.split()[0]
    cut = [("    xxxx.py" if n == no else t) for n, t in enumerate(lines, 1)]
    got = missing_lines(cut)
    last = max(n for n, t in sections["config"] if re.match(r"    \w+\.py\s", t))
    assert [g for g in got if g.startswith(f"mpilaunch/config/{name}:")] == [
        f"mpilaunch/config/{name}: add after line {last} of docs/ARCHITECTURE.md: "
        f"'    {name:<16} <what it does>'"]
    assert f"line {no}: xxxx.py (in the config/ section)" in stale_names(cut)
    job = {n for n, _ in sections["job"]}
    got = missing_lines([t for n, t in enumerate(lines, 1) if n not in job])
    assert [g for g in got if g.startswith("mpilaunch/job/")] == [
        f"mpilaunch/job/: add after line {max(n for b in sections.values() for n, _ in b) - len(job)}"
        " of docs/ARCHITECTURE.md (the map's last package) a section '  job/             <what "
        "the package is for>', then a line '    <module>.py       <what it does>' for each of "
        "command.py, peer.py, spec.py, waiter.py, worker0.py"]
    para = [t.replace("peer.py", "peer") if n in job else t for n, t in enumerate(lines, 1)]
    assert [g for g in missing_lines(para) if g.startswith("mpilaunch/job/")] == [
        f"mpilaunch/job/peer.py: name it in the 'job/' paragraph of docs/ARCHITECTURE.md (lines "
        f"{min(job)}-{max(job)}): 'peer.py (<what it does>)'"]
    no_net = [t for t in lines if not t.startswith("  net.py ")]
    assert [g for g in missing_lines(no_net) if g.startswith("mpilaunch/net.py: ")] == [
        f"mpilaunch/net.py: add after line {max(roots[n] for n in roots if n[:-3] not in ENTRY_POINTS) - 1}"
        " of docs/ARCHITECTURE.md: '  net.py           <what it holds>' (and to the layer "
        "order's root modules if it is a shared module)"]


# Lines that say "ms" of something that is not a cost: an interval, a threshold, a measurement
# of the spare's garbage collection (rank/inplace/spare.py, its own design note).
NOT_A_COST = ("20 ms apart", "every 5 ms", "0.05 ms round trip", "2.5 ms the first time",
              "0.24 ms", "in its first 10 s", "in its first minute")


def ms_costs_in_code():
    """'path:line: text' of every code line that gives a figure in milliseconds."""
    out = []
    for root, dirs, files in os.walk(PKG):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(root, f)
            with open(path, encoding="utf-8") as src:
                for no, line in enumerate(src, 1):
                    if re.search(r"\d\s?ms\b", line) and not any(n in line for n in NOT_A_COST):
                        out.append(f"{os.path.relpath(path, REPO)}:{no}: {line.strip()}")
    return out


def test_code_points_to_the_costs_instead_of_restating_them():
    """What a piece of code saves is measured once, in docs/ARCHITECTURE.md's start-up section
    (or docs/PERFORMANCE.md, bench/README.md); the code names the place, not the figure, so
    the two cannot disagree."""
    found = ms_costs_in_code()
    assert found == [], ("these lines restate a cost in ms: put the figure in docs/ARCHITECTURE.md"
                         "'s start-up section and write '(docs/ARCHITECTURE.md, start-up)' "
                         "instead:\n" + "\n".join(found))
