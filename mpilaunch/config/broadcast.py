"""The env broadcast: worker-0's variables to every rank, exactly.

ModelArts writes ``env | grep -E '^MA_|...' | grep -v '=$'`` as bare ``KEY=VALUE`` lines,
which Open MPI reads as MCA parameters: nothing reaches a rank. Open MPI really reads
``-x KEY=VALUE`` lines, but only for a portable subset of values (no whitespace, quotes,
``;``, backslash, non-ASCII, long lines; see docs/OPENMPI_FACTS.md). So each selected variable goes
one of two ways:

* **tune file**: ``-x KEY=VALUE`` line, when the value is in the portable subset and the
  name does not look secret;
* **routed**: the value stays in mpirun's own environment and the command line carries only
  ``-x KEY`` (values travel in the launch message, no shell involved). Every secret-looking
  variable goes this way, so its value is never written to disk or into an argv.
"""
from typing import Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from mpilaunch.config import tuneimport
from mpilaunch.contract import is_secret

DEFAULT_PREFIXES: Tuple[str, ...] = ("MA_", "AWS_", "S3_", "PATH", "VC_WORKER_", "SCC", "CRED")

# Longest tune line we write: PRRTE reads lines into a 2,048-byte buffer; keep a wide margin.
MAX_LINE_BYTES = 1024

# Printable ASCII without space, quotes, ';' and backslash. String methods, not a regex: a
# "$" would also match before a trailing newline, and every launch checks these (no compile
# on the way to the starter's Popen, docs/ARCHITECTURE.md, start-up).
_NOT_PORTABLE = frozenset(" \"';\\")


def is_portable(name: str, value: str) -> bool:
    if not (value and value.isascii() and value.isprintable()) or not _NOT_PORTABLE.isdisjoint(value):
        return False
    return len(f"-x {name}={value}\n".encode("utf-8")) <= MAX_LINE_BYTES


def is_name(name: str) -> bool:
    """``[A-Za-z_][A-Za-z0-9_]*``: a variable name a tune file can carry."""
    return name.isascii() and name.isidentifier()


def select(env: Mapping[str, str], prefixes: Sequence[str]) -> List[Tuple[str, str]]:
    """The variables to broadcast: name starts with a prefix, value non-empty (``grep -v '=$'``)."""
    out = []
    for name in sorted(env):
        value = env[name]
        if value == "" or not is_name(name):
            continue
        if any(name.startswith(p) for p in prefixes):
            out.append((name, value))
    return out


def selection(env: Mapping[str, str], prefixes: Sequence[str],
              imported: Optional[tuneimport.TuneImport] = None) -> Tuple[Dict[str, str], Dict[str, str]]:
    """What every rank gets: the variables ``prefixes`` select, then those of a tune file the
    user wrote (``imported``: this environment's value when set, else the file's).
    -> (selected, only_in_file): the second are the file's variables this environment lacks,
    which the starter's own environment must carry for a ``-x NAME`` (or ``-genvlist``)."""
    selected = dict(select(env, prefixes))
    only_in_file: Dict[str, str] = {}
    if imported is not None:
        for name, value in tuneimport.selected(imported, env):
            selected[name] = value
            if name not in env:
                only_in_file[name] = value
    return selected, only_in_file


class Broadcast(NamedTuple):
    """The variables sent to every rank (a namedtuple: docs/ARCHITECTURE.md, start-up)."""

    in_file: Tuple[Tuple[str, str], ...] = ()   # (name, value) as -x lines of the tune file
    routed: Tuple[str, ...] = ()    # names whose values travel in mpirun's environment

    @property
    def names(self) -> Tuple[str, ...]:
        return tuple(n for n, _ in self.in_file) + self.routed


def split(selected: Iterable[Tuple[str, str]]) -> Broadcast:
    in_file, routed = [], []
    for name, value in selected:
        if not is_secret(name) and is_portable(name, value):
            in_file.append((name, value))
        else:
            routed.append(name)
    return Broadcast(tuple(in_file), tuple(routed))


def render(broadcast: Broadcast) -> str:
    """Exact tune-file text: one ``-x KEY=VALUE`` per line, LF endings."""
    return "".join(f"-x {name}={value}\n" for name, value in broadcast.in_file)
