"""Pure rendering: ModelArts-style argument strings -> canonical tokens -> exact mpirun argv.

Canonical spelling is double-dash (``--bind-to``, ``--mca``), which Open MPI 4.x and 5.x both
accept; 5.x rejects the single-dash ModelArts spellings (``-bind-to none`` fails with rc=66,
``-mca`` is a parse error in a tune file). On 5.x the ssh launcher's parameters are PRRTE's
(``--prtemca plm_ssh_*``): 5.x silently drops the ModelArts spelling ``-mca plm_rsh_args``
(and ``--prtemca plm_rsh_args``), losing the ssh port. Measured facts: docs/OPENMPI_FACTS.md
sections 3-5.
"""
import shlex
from typing import TYPE_CHECKING, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from mpilaunch.config.mpi import OMPI4, OMPI5
from mpilaunch.contract import is_secret
from mpilaunch.errors import UsageError

if TYPE_CHECKING:   # what pieces() reads of launchconfig's and tuneimport's records (both import this)
    from typing import Protocol

    class Setting(Protocol):
        @property
        def value(self) -> object: ...
        @property
        def source(self) -> str: ...

    class TuneImport(Protocol):
        @property
        def path(self) -> str: ...
        @property
        def x_tokens(self) -> Tuple[str, ...]: ...
        @property
        def mca_tokens(self) -> Tuple[str, ...]: ...

# Options that may legitimately be written with one dash in Open MPI (no translation).
_SINGLE_DASH_OK = {"-np", "-n", "-c", "-H", "-x", "-q", "-v", "-V", "-h", "-d"}
# Arity (number of values) of options we may meet in OPENMPI_* strings.
_ARITY = {
    "mca": 2, "gmca": 2, "prtemca": 2, "pmixmca": 2, "x": 1, "bind-to": 1, "map-by": 1,
    "rank-by": 1, "tune": 1, "hostfile": 1, "machinefile": 1, "np": 1, "n": 1, "c": 1, "H": 1,
    "host": 1, "output-filename": 1, "npernode": 1, "npersocket": 1, "wdir": 1, "path": 1,
    "prefix": 1, "am": 1, "report-bindings": 0, "display-map": 0, "tag-output": 0,
    "timestamp-output": 0, "oversubscribe": 0, "allow-run-as-root": 0, "output": 1,
    "cpus-per-proc": 1, "cpus-per-rank": 1, "use-hwthread-cpus": 0, "mca-param-file": 1,
}


def split_arg_string(value: str, source: str) -> List[str]:
    """Split an OPENMPI_* style string into tokens (POSIX word rules, no expansion)."""
    try:
        return shlex.split(value, comments=False, posix=True)
    except ValueError as exc:
        raise UsageError(f"{source}: cannot split {value!r}: {exc}") from None


class Piece(NamedTuple):
    """One piece of the user's mpirun arguments, split into words once."""

    tokens: Tuple[str, ...]         # as written
    source: str                     # the variable, flag or tune file it came from, for messages
    default: bool                   # the ModelArts default, not the user's own words


def pieces(settings: "Sequence[Setting]", imported: "Optional[TuneImport]" = None) -> Tuple[Piece, ...]:
    """The user's mpirun pieces in the order mpirun reads them: OPENMPI_BIND_ARGS, _X_ARGS,
    _MCA_ARGS, _EXTRA_ARGS (``settings``: their Settings), then the ``-x``/``-mca`` lines of a
    tune file the user wrote (``imported``: a TuneImport). Every error in them (an unbalanced
    quote, an option without its value) is raised here, while the configuration is built:
    before a log dir or any file exists. Every backend, the preflight and the placement read
    these, never the strings again."""
    out = [Piece(tuple(split_arg_string(str(s.value), s.source)), s.source, s.source == "default")
           for s in settings]
    if imported is not None:
        out.append(Piece(tuple(imported.x_tokens) + tuple(imported.mca_tokens), imported.path, False))
    for p in out:
        normalize(p.tokens, OMPI4, p.source)   # the arity of every option, in any dialect
    return tuple(out)


def words(all_pieces: Sequence[Piece]) -> List[str]:
    """Every token of the pieces, in order."""
    return [tok for p in all_pieces for tok in p.tokens]


SSH_PARAMS = ("plm_rsh_args", "plm_ssh_args")


def ssh_params_given(all_pieces: Sequence[Piece]) -> bool:
    """The user's pieces carry the ssh options themselves (ModelArts' ``-mca plm_rsh_args``)."""
    return any(has_param(normalize(p.tokens, OMPI4, p.source), SSH_PARAMS) for p in all_pieces)


def _canonical_option(token: str) -> Tuple[str, str]:
    """'-bind-to' / '--bind-to' -> ('--bind-to', 'bind-to'); '-x' -> ('-x', 'x')."""
    if token == "--x":  # both Open MPIs accept --x; route it exactly as -x (secrets!)
        return "-x", "x"
    if token.startswith("--"):
        return token, token[2:]
    if token in _SINGLE_DASH_OK:
        return token, token[1:]
    return "-" + token, token[1:]


def normalize(tokens: Sequence[str], dialect: str, source: str) -> List[str]:
    """Translate ModelArts spellings into what this Open MPI reads."""
    out: List[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("-") or token == "-" or token == "--":
            out.append(token)
            i += 1
            continue
        if "=" in token and token.startswith("--"):  # --bind-to=none: leave as written
            out.append(token)
            i += 1
            continue
        spelled, name = _canonical_option(token)
        arity = _ARITY.get(name, 0)
        values = list(tokens[i + 1:i + 1 + arity])
        if len(values) < arity:
            raise UsageError(f"{source}: option {token} needs {arity} value(s)")
        if name == "mca" and dialect == OMPI5 and values[0].startswith("plm_rsh_"):
            spelled, values[0] = "--prtemca", "plm_ssh_" + values[0][len("plm_rsh_"):]
        out.append(spelled)
        out.extend(values)
        i += 1 + arity
    return out


def drop_unset_x(tokens: Sequence[str], env: Mapping[str, str]) -> Tuple[List[str], List[str]]:
    """Remove ``-x NAME`` whose NAME is unset. -> (tokens, dropped). On the command line both
    versions only warn, but in a tune file 5.x fails to start (rc 139/243,
    docs/OPENMPI_FACTS.md section 5); dropping keeps argv and tune file equally safe."""
    out: List[str] = []
    dropped: List[str] = []
    i = 0
    while i < len(tokens):
        if tokens[i] == "-x" and i + 1 < len(tokens):
            value = tokens[i + 1]
            if "=" not in value and value not in env:
                dropped.append(value)
            else:
                out.extend(tokens[i:i + 2])
            i += 2
            continue
        out.append(tokens[i])
        i += 1
    return out, dropped


def route_secret_x(tokens: Sequence[str]) -> Tuple[List[str], dict]:
    """``-x SECRET=value`` -> ``-x SECRET`` with the value moved to mpirun's environment,
    so no secret value ever sits in an argv (visible in ``ps``). -> (tokens, env additions)."""
    out: List[str] = []
    moved: dict = {}
    i = 0
    while i < len(tokens):
        if tokens[i] == "-x" and i + 1 < len(tokens) and "=" in tokens[i + 1]:
            name, _, value = tokens[i + 1].partition("=")
            if is_secret(name):
                moved[name] = value
                out += ["-x", name]
                i += 2
                continue
        out.append(tokens[i])
        i += 1
    return out, moved


def ssh_tokens(ssh_args: Sequence[str], dialect: str) -> List[str]:
    """The ssh options (port, -F config, ...) in the parameter this Open MPI really reads."""
    if not ssh_args:
        return []
    joined = " ".join(ssh_args)
    if dialect == OMPI5:
        return ["--prtemca", "plm_ssh_args", joined]
    return ["--mca", "plm_rsh_args", joined]


KEEPALIVE = (("oob_tcp_keepalive_time", "10"), ("oob_tcp_keepalive_intvl", "3"),
             ("oob_tcp_keepalive_probes", "3"))
# A job that restarts (--max_restarts) trades a restart, not the job, for a false alarm, and
# every second of a lost host's notice is a second of every rank's recovery: its daemons' links
# are given up after ~6 s of silence. Keepalive is the kernel's: a host under CPU load still
# answers it, so only a host that is down or cut off stays silent that long.
FAST_KEEPALIVE = (("oob_tcp_keepalive_time", "3"), ("oob_tcp_keepalive_intvl", "1"),
                  ("oob_tcp_keepalive_probes", "3"))


def keepalive_tokens(dialect: str, tokens: Sequence[str], fast: bool = False) -> List[str]:
    """TCP keepalive on the daemons' links, so a host that vanishes (power, link) is noticed in
    ~20 s (``fast``: ~6 s) instead of never; parameters the user set are left alone."""
    option = "--prtemca" if dialect == OMPI5 else "--mca"
    out: List[str] = []
    for name, value in FAST_KEEPALIVE if fast else KEEPALIVE:
        if not has_param(tokens, (name,)):
            out += [option, name, value]
    return out


def yield_tokens(tokens: Sequence[str], env: Mapping[str, str]) -> List[str]:
    """More ranks than this host's CPUs: the ranks yield the CPU while they wait in MPI. Open
    MPI does so by itself only when the ranks outnumber the slots, and a local launch gives a
    slot per rank (as torchrun's --nproc_per_node does), so its waiting ranks would spin and
    take the CPUs from the ranks they wait for (docs/PERFORMANCE.md, "Oversubscribed"). What
    the user set (option or OMPI_MCA_ variable) is left alone."""
    if has_param(tokens, ("mpi_yield_when_idle",)) or "OMPI_MCA_mpi_yield_when_idle" in env:
        return []
    return ["--mca", "mpi_yield_when_idle", "1"]


def has_param(tokens: Sequence[str], names: Sequence[str]) -> bool:
    for i, token in enumerate(tokens[:-1]):
        if token in ("--mca", "--prtemca", "-mca") and tokens[i + 1] in names:
            return True
    return False


def show(argv: Sequence[str]) -> str:
    """A copy-pasteable rendering for a person (never executed)."""
    return shlex.join(argv)
