"""The rank side's records are namedtuples at run time (typing costs every rank its import) and
typed NamedTuples for the checker only: the two must name the same fields, in the same order,
with the same number of defaults, or mypy checks a record that does not exist."""
import ast
import importlib
import inspect

import pytest

# (module, the checker's class under TYPE_CHECKING, the class the code uses)
RECORDS = [
    ("mpilaunch.rank.identity", "_RankInfo", "RankInfo"),
    ("mpilaunch.rank.options", "_Options", "Options"),
    ("mpilaunch.rank.options", "_Torchrun", "Torchrun"),
    ("mpilaunch.rank.plan", "_ChildSpec", "ChildSpec"),
    ("mpilaunch.rank.plan", "_ExecPlan", "ExecPlan"),
    ("mpilaunch.rank.agree", "Agreement", "Agreement"),
    ("mpilaunch.rank.agree", "Peer", "Peer"),
    ("mpilaunch.rank.flags", "_Flag", "Flag"),
]


@pytest.mark.parametrize("module,typed,real", RECORDS, ids=[r[2] for r in RECORDS])
def test_the_checker_s_view_of_a_record_is_the_namedtuple_it_is(module, typed, real):
    mod = importlib.import_module(module)
    tree = ast.parse(inspect.getsource(mod))
    [cls] = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == typed]
    fields = [a for a in cls.body if isinstance(a, ast.AnnAssign)]
    record = getattr(mod, real)
    assert tuple(a.target.id for a in fields) == record._fields
    assert [ast.literal_eval(a.value) for a in fields if a.value is not None] == \
        list(record._field_defaults.values())


def test_the_checker_s_view_of_the_parsed_flags_is_the_flag_table_s():
    """rank/options.py's _Parsed says what argparse and its fast path make of each flag of
    rank/flags.py: a switch a bool, a value flag a str, Optional where its default is None."""
    from mpilaunch.rank import flags, options

    tree = ast.parse(inspect.getsource(options))
    [cls] = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "_Parsed"]
    said = {a.target.id: ast.unparse(a.annotation) for a in cls.body if isinstance(a, ast.AnnAssign)}
    assert said.pop("command") == "List[str]"
    for dest, annotation in said.items():
        f = next(f for f in flags.FLAGS if f.dest == dest)
        want = "bool" if f.kind == flags.SWITCH else "Optional[str]" if f.default is None else "str"
        assert (dest, annotation) == (dest, want)
