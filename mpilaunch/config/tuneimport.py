"""A tune file the user already wrote (the ModelArts recipe's ``env | grep ... > $TUNE_ENV_FILE``)
read as what it is: the user's statement of what to broadcast.

Accepted lines (``#`` comments and blank lines ignored):

* ``KEY=VALUE`` (what ``env`` prints): broadcast ``KEY``. Its value is taken from this
  environment when set there (exact bytes: ``env`` output cannot carry a multi-line value
  unambiguously), else from the file. Lines after a ``KEY=VALUE`` that are not themselves an
  assignment are the rest of a multi-line value.
* ``-x NAME`` / ``-x NAME=VALUE`` (also ``--x``): as in ``OPENMPI_X_ARGS``.
* ``-mca KEY VALUE`` / ``--mca KEY VALUE``: as in ``OPENMPI_MCA_ARGS``.

The file itself is never written or removed: mpilaunch writes its own tune file in its private
run dir. Anything else is a one-line error naming the file and line.
"""
import re
from typing import Dict, List, Mapping, NamedTuple, Optional, Tuple

from mpilaunch.config.mpiargs import split_arg_string
from mpilaunch.errors import UsageError

_ASSIGN = r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$"   # compiled when a tune file is read (re caches it)


class TuneImport(NamedTuple):
    """A tune file the user already wrote, read."""

    path: str
    values: Dict[str, str]          # name -> value from the file
    x_tokens: Tuple[str, ...]       # ModelArts-style tokens: -x NAME[=VALUE] ...
    mca_tokens: Tuple[str, ...]     # --mca KEY VALUE ...


def parse(text: str, path: str) -> TuneImport:
    values: Dict[str, str] = {}
    x_tokens: List[str] = []
    mca_tokens: List[str] = []
    last: Optional[str] = None
    for lineno, line in enumerate(text.split("\n"), start=1):
        where = f"{path}:{lineno}"
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            last = None if not stripped else last
            continue
        m = re.match(_ASSIGN, line, re.S)
        if m:
            last = m.group(1)
            values[last] = m.group(2)
            continue
        if stripped.startswith("-"):
            tokens = split_arg_string(stripped, where)
            head = tokens[0]
            if head in ("-x", "--x") and len(tokens) == 2:
                x_tokens += ["-x", tokens[1]]
                last = None
                continue
            if head in ("-mca", "--mca") and len(tokens) == 3:
                mca_tokens += tokens
                last = None
                continue
            raise UsageError(f"{where}: expected KEY=VALUE, -x NAME[=VALUE] or --mca KEY VALUE, "
                             f"got {stripped[:60]!r}")
        if last is not None:       # the next line of a multi-line value, as `env` prints it
            values[last] += "\n" + line
            continue
        raise UsageError(f"{where}: expected KEY=VALUE, -x NAME[=VALUE] or --mca KEY VALUE, "
                         f"got {stripped[:60]!r}")
    return TuneImport(path, values, tuple(x_tokens), tuple(mca_tokens))


def read(path: str, source: str) -> TuneImport:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except IsADirectoryError:
        raise UsageError(f"{source}={path}: is a directory; give a file") from None
    except OSError as exc:
        raise UsageError(f"{source}={path}: cannot read it ({exc.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{source}={path}: not a UTF-8 text file") from None
    return parse(text.rstrip("\n"), path)


def selected(imported: TuneImport, env: Mapping[str, str]) -> List[Tuple[str, str]]:
    """(name, value) to broadcast: this environment's value when set, else the file's."""
    out = []
    for name, file_value in imported.values.items():
        value = env.get(name, file_value)
        if value != "":
            out.append((name, value))
    return out
