"""The event record's kinds are spelled once (mpilaunch/output/events.py, ``Kind``): every
emitter names its kind from there, and docs/EVENTS.md documents exactly those kinds."""
import ast
import os
import re

from mpilaunch.output import events

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PACKAGE = os.path.join(ROOT, "mpilaunch")


def _kinds():
    return {v for k, v in vars(events.Kind).items() if k.isupper()}


def _documented():
    """The kinds in the first column of docs/EVENTS.md's kind table."""
    with open(os.path.join(ROOT, "docs", "EVENTS.md"), encoding="utf-8") as f:
        text = f.read()
    table = text[text.index("| kind | written when | fields |"):]
    table = table[:table.index("\n\n")]
    return set(re.findall(r"^\| `([a-z_]+)` \|", table, re.M))


def _literal_kinds(source, bare=True):
    """(line, string) of every emit of the event record whose kind is a string literal:
    ``events.emit("...")``, and with ``bare`` (output/events.py itself) ``emit("...")``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        f = node.func
        ours = (isinstance(f, ast.Attribute) and f.attr == "emit" and isinstance(f.value, ast.Name)
                and f.value.id == "events") or \
            (bare and isinstance(f, ast.Name) and f.id == "emit")
        first = node.args[0]
        if ours and isinstance(first, ast.Constant) and isinstance(first.value, str):
            out.append((node.lineno, first.value))
    return out


def test_every_kind_is_documented_and_every_documented_kind_is_one():
    kinds = _kinds()
    assert len(kinds) >= 25
    assert kinds == _documented()


def test_the_scan_finds_a_kind_written_as_a_string():
    src = 'events.emit("restart", next_attempt=1)\nemit("job_end")\nevents.emit(events.Kind.SHRINK)\n'
    assert _literal_kinds(src) == [(1, "restart"), (2, "job_end")]
    assert _literal_kinds(src, bare=False) == [(1, "restart")]


def test_no_emitter_spells_a_kind_itself():
    found = []
    for dirpath, _, files in os.walk(PACKAGE):
        for fn in files:
            if fn.endswith(".py"):
                path = os.path.join(dirpath, fn)
                with open(path, encoding="utf-8") as f:
                    hits = _literal_kinds(f.read(), bare=path.endswith(os.path.join("output", "events.py")))
                found += [f"{os.path.relpath(path, ROOT)}:{line}: {kind!r}" for line, kind in hits]
    assert found == [], "name the kind from events.Kind"
