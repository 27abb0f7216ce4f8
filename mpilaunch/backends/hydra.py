"""Hydra's ``mpiexec`` (MPICH, Intel MPI): the same launch as on Open MPI, in Hydra's words.

The argv: ``mpiexec.hydra -n NP -f|-machinefile HOSTFILE [ssh] [translated OPENMPI_* args]
[-genvlist NAME,...] RANK_COMMAND``, the hostfile in Hydra's ``host:N`` form.

* **Env broadcast**: every selected variable (``--env-prefixes``, a user's tune file, ``-x
  NAME``) is named in ONE ``-genvlist`` (MPICH refuses a second list or ``-genvnone`` beside
  it: "duplicate environment setting") and its value travels in mpiexec's own environment:
  exact bytes (spaces, quotes, ``;``, CR/LF, UTF-8, 3,000 B measured on both), nothing on disk,
  no value in an argv. As on Open MPI, remote ranks get only the listed variables; local ranks
  inherit mpiexec's whole environment. ``-x NAME=VALUE`` becomes ``-genv NAME VALUE`` (a secret's
  value goes to mpiexec's environment and ``-genvlist`` instead). No tune file is needed.
* **ssh options** (``SSHD_PORT``, ``--ssh-args``, ``--mca plm_rsh_args``): MPICH reads
  ``HYDRA_LAUNCHER_EXTRA_ARGS`` from mpiexec's environment; Intel MPI takes
  ``-bootstrap-exec-args``.
* **Binding**: ``--bind-to none`` (ModelArts' default) is ``-bind-to none`` on MPICH and
  ``-genv I_MPI_PIN 0`` on Intel MPI, which pins every rank to one core by default.
* Open MPI options without a Hydra equivalent are a one-line UsageError naming the option and
  what to use instead; the ModelArts defaults of ``OPENMPI_MCA_ARGS`` (``pml``, ``btl``,
  ``plm_rsh_no_tree_spawn``: Open MPI transport choices, and Hydra starts its proxies flat
  from mpiexec anyway) are dropped when they are the default.
* **Running it** (:class:`Hydra`): a rank exiting non-zero does not end a Hydra job (measured:
  mpiexec waits for every other rank, 30 s and more), so the first failure a rank reports ends
  it here, as Open MPI's mpirun would; a host lost mid-job may leave mpiexec waiting forever on
  its proxy, so the proxies' ssh are watched (``hydra_report.ProxyWatch``); Hydra names no lost
  host (MPICH: "control_cb assert (!closed) failed"), so after a failure without a rank's own
  report the remote hosts whose ssh port stopped answering are named.
"""
from __future__ import annotations

import signal
from collections import namedtuple
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from mpilaunch import net, netif
from mpilaunch.backends import hydra_report
from mpilaunch.backends.base import Backend, LaunchPlan, plan_facts, show_files, with_routed
from mpilaunch.backends.hydra_report import ProxyWatch, bad_terminations

if TYPE_CHECKING:
    from mpilaunch.backends.base import RunningJob
    from mpilaunch.config.launchconfig import LaunchConfig
    from mpilaunch.output.summary import Collector
from mpilaunch.backends.rankcmd import rank_command
from mpilaunch.config import broadcast, mpiargs, sshconfig
from mpilaunch.config.hostfile import Host
from mpilaunch.config.mpi import MpiInfo
from mpilaunch.config.mpi import IMPI, MPICH
from mpilaunch.config.mpiargs import normalize, split_arg_string
from mpilaunch.contract import is_secret
from mpilaunch.errors import UsageError
from mpilaunch.output.summary import Event
from mpilaunch.ssh import keepalive_options

# Hydra options a user may write in OPENMPI_EXTRA_ARGS as they are, with their arity.
HYDRA_OPTIONS = {
    "-genv": 2, "-genvlist": 1, "-genvall": 0, "-iface": 1, "-ppn": 1, "-rr": 0,
    "-prepend-rank": 0, "-l": 0, "-verbose": 0, "-v": 0, "-print-all-exitcodes": 0,
    "-launcher": 1, "-launcher-exec": 1, "-bootstrap": 1, "-bootstrap-exec": 1,
    "-bootstrap-exec-args": 1, "-bind-to": 1, "-map-by": 1, "-wdir": 1, "-outfile-pattern": 1,
    "-errfile-pattern": 1, "-prepend-pattern": 1, "-prepend-timestamp": 0, "-cpu-bind": 1,
    "-disable-auto-cleanup": 0, "-localhost": 1,
}
# Open MPI options (canonical spelling, see mpiargs.normalize) and their arity.
_OMPI_ARITY = {"-x": 1, "--mca": 2, "--prtemca": 2, "--gmca": 2, "--pmixmca": 2, "--bind-to": 1,
               "--map-by": 1, "--rank-by": 1, "--oversubscribe": 0, "--allow-run-as-root": 0,
               "--tag-output": 0, "--report-bindings": 0, "--display-map": 0, "--noprefix": 0}
# ModelArts' OPENMPI_MCA_ARGS default: Open MPI transport and daemon-tree choices.
_OMPI_ONLY_DEFAULTS = {("pml", "ob1"), ("btl", "^openib"), ("plm_rsh_no_tree_spawn", "true")}
SSH_PARAMS = ("plm_rsh_args", "plm_ssh_args")
_IFACE_PARAMS = ("btl_tcp_if_include", "oob_tcp_if_include")
_AGENT_PARAMS = ("plm_rsh_agent", "plm_ssh_agent")

USE = ("give Hydra's own option in --extra-args/OPENMPI_EXTRA_ARGS (e.g. -genv NAME VALUE, "
       "-iface IF, -ppn N)")


ENV_END = "MPILAUNCH_HYDRA_ENV_END"   # the last entry of mpiexec's environment (Hydra.env)
HOST_LOST_ESCALATE = 3.0   # a host lost: mpiexec's own teardown waits on the dead proxy


class Hydra(Backend[LaunchPlan]):
    program = "mpiexec"
    lost_why = "its ssh port no longer answers and Hydra lost its proxy there"

    def __init__(self, mpi: MpiInfo) -> None:
        super().__init__(mpi)
        self.mpi: MpiInfo = mpi
        # Measured (docs/OPENMPI_FACTS.md section 16): both forward SIGUSR1 to each rank's
        # process group and die of SIGUSR2; Intel MPI's also forwards SIGTSTP and SIGCONT,
        # MPICH's ignores both.
        if mpi is not None and mpi.dialect == IMPI:
            self.forwards = frozenset((signal.SIGUSR1, signal.SIGTSTP, signal.SIGCONT))
        else:
            self.forwards = frozenset((signal.SIGUSR1,))

    def with_control(self, plan: LaunchPlan, names: Sequence[str]) -> LaunchPlan:
        return with_routed(plan, names)

    def plan(self, cfg: LaunchConfig, env: Mapping[str, str], run_dir: str, euid: int) -> LaunchPlan:
        return LaunchPlan(**plan_fields(cfg, env, self.mpi, run_dir),
                          rank_command=tuple(rank_command(cfg)), stdin=cfg.stdin,
                          scheduler=(cfg.scheduler, cfg.scheduler_why), **plan_facts(cfg))

    def argv(self, plan: LaunchPlan) -> List[str]:
        return argv(plan.mpi.path, plan.np, plan.hostfile_path, plan.ssh, plan.args,
                    plan.broadcast.routed, plan.rank_command, plan.mpi.dialect, plan.stdin)

    def env(self, plan: LaunchPlan) -> Mapping[str, str]:
        """``extra_env``, then ``ENV_END`` last: MPICH 5.0.2's mpiexec does not pass the last
        entry of its environment to remote hosts' ranks even when -genvlist names it (measured
        on two test hosts with ``AA=1 BB=2 CC=3`` appended in that order: the remote rank got
        AA and BB, whatever their order in the list; with ``CC`` first in the environment it
        lost BB; with any unlisted variable after them it got all three). The launcher puts
        the backend's additions last (``supervise.starter.starter_environment``), so a variable of
        ours no rank needs takes that place instead of the control channel's key or a user's
        variable."""
        return {**plan.extra_env, ENV_END: "1"}

    def files(self, plan: LaunchPlan) -> List[Tuple[str, str]]:
        # no tune file: -genvlist
        return [(plan.hostfile_path, render_hostfile(plan.hosts))] + ([plan.ssh_config] if plan.ssh_config else [])

    def show(self, plan: LaunchPlan, env: Mapping[str, str]) -> None:
        print(f"# mpiexec: {plan.mpi.path} ({plan.mpi.name})")
        print(mpiargs.show(self.argv(plan)))
        show_files(plan, env, self.files(plan), "mpiexec's environment (-genvlist)")

    def notices(self, text: str) -> List[Event]:
        return [Event(rank, host, "rank", "exit", code if sig is None else 128 + sig, sig, "self",
                      None, [], float("inf"), message=f"pid {pid} (Hydra's report)")
                for rank, pid, host, sig, code in bad_terminations(text)]

    def watch(self, plan: LaunchPlan, job: RunningJob) -> None:
        if not net.all_here(plan.hosts):
            ProxyWatch(plan, job.pid, lambda lost: job.host_lost(lost, HOST_LOST_ESCALATE)).start()

    def on_rank_failure(self, plan: LaunchPlan, job: RunningJob) -> None:
        job.end()

    def after(self, plan: LaunchPlan, collector: Collector, status: int) -> None:
        if status == 0 or collector.unreachable or net.all_here(plan.hosts):
            return
        if collector.root_cause() is None or hydra_report.proxy_lost(collector.text):
            collector.unreachable = hydra_report.unreachable_hosts(plan)


class Translated(namedtuple("Translated", "args genv_names env ssh_args")):
    """args: Hydra tokens; genv_names: names for -genvlist (values in mpiexec's env);
    env: additions to mpiexec's environment; ssh_args: ssh options found (plm_rsh_args)."""

    __slots__ = ()


def _name(dialect: str) -> str:
    return "Intel MPI" if dialect == IMPI else "MPICH"


def _mca(name: str, value: str, dialect: str, source: str, default: bool,
         out: List[str], ssh: List[str]) -> None:
    if name in SSH_PARAMS:
        ssh += split_arg_string(value, source)
    elif name in _IFACE_PARAMS:
        if "-iface" in out:
            return
        if "," in value or value.startswith("^"):
            raise UsageError(f"{source}: --mca {name} {value}: Hydra takes one interface; "
                             f"give --mca {name} IF (or -iface IF in OPENMPI_EXTRA_ARGS)")
        out += ["-iface", value]
    elif name in _AGENT_PARAMS:
        out += ["-bootstrap-exec" if dialect == IMPI else "-launcher-exec", value]
    elif name.startswith("oob_tcp_keepalive") or (default and (name, value) in _OMPI_ONLY_DEFAULTS):
        return
    else:
        raise UsageError(f"{source}: --mca {name} {value} is an Open MPI parameter; "
                         f"{_name(dialect)} (Hydra) has none: drop it, or {USE}")


def translate(tokens: Sequence[str], dialect: str, source: str, default: bool = False) -> Translated:
    """Canonical Open MPI tokens (``mpiargs.normalize``) or Hydra's own -> Hydra tokens."""
    out: List[str] = []
    names: List[str] = []
    env: Dict[str, str] = {}
    ssh: List[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        arity = HYDRA_OPTIONS.get(tok)
        if arity is None:
            arity = _OMPI_ARITY.get(tok)
        if arity is None:
            raise UsageError(f"{source}: option {tok} is not known for {_name(dialect)} (Hydra's "
                             f"mpiexec); {USE}")
        values = list(tokens[i + 1:i + 1 + arity])
        if len(values) < arity:
            raise UsageError(f"{source}: option {tok} needs {arity} value(s)")
        i += 1 + arity
        if tok == "-x":
            name, eq, value = values[0].partition("=")
            if eq:
                out += ["-genv", name, value]
            else:
                names.append(name)
        elif tok in ("--mca", "--prtemca", "--gmca"):
            _mca(values[0], values[1], dialect, source, default, out, ssh)
        elif tok in ("--bind-to", "-bind-to"):
            if values[0] == "none":
                out += ["-genv", "I_MPI_PIN", "0"] if dialect == IMPI else ["-bind-to", "none"]
            elif dialect == IMPI:
                raise UsageError(f"{source}: {tok} {values[0]}: Intel MPI pins with I_MPI_PIN_DOMAIN; "
                                 "give -genv I_MPI_PIN_DOMAIN core (or -bind-to none) instead")
            else:
                out += ["-bind-to", values[0]]
        elif tok in ("--map-by", "-map-by") and values[0] in ("slot", "core", "node"):
            if values[0] == "node":
                out.append("-rr")   # slot/core: Hydra fills each host's host:N slots in order
        elif tok == "--tag-output":
            out.append("-prepend-rank")
        elif tok in ("--oversubscribe", "--allow-run-as-root", "--noprefix"):
            continue   # Hydra never refuses these cases
        elif tok in HYDRA_OPTIONS and not tok.startswith("--"):
            if tok == "-genvlist":
                names += [n for n in values[0].split(",") if n]
            elif tok == "-genv" and is_secret(values[0]):   # never a secret's value in an argv
                env[values[0]] = values[1]
                names.append(values[0])
            else:
                out += [tok] + values
        else:
            raise UsageError(f"{source}: option {' '.join([tok] + values)} has no {_name(dialect)} "
                             f"(Hydra) equivalent; drop it, or {USE}")
    return Translated(out, names, env, ssh)


def ssh_tokens(ssh_args: Sequence[str], dialect: str) -> Tuple[List[str], Dict[str, str]]:
    """-> (argv tokens, mpiexec env additions) that bring the ssh options (port, -F cfg) to
    the ssh that starts each remote proxy."""
    if not ssh_args:
        return [], {}
    joined = " ".join(ssh_args)
    if dialect == MPICH:
        return [], {"HYDRA_LAUNCHER_EXTRA_ARGS": joined}
    return ["-bootstrap-exec-args", joined], {}


def intel_iface(hosts: Sequence[Host]) -> List[str]:
    """``-iface IF`` for an Intel MPI launch over other hosts: IF = the interface routing to the
    first remote one. Intel's bootstrap proxies connect back to mpiexec by this host's *name*
    (measured on the namespace test hosts, whose names resolve nowhere: every remote proxy failed
    "getaddrinfo returned error -3 ... unable to connect to server mlh-host1"; ``-localhost ADDR``
    did not change it, ``-iface IF`` did; a name resolving to 127.0.1.1 fails the same way).
    MPICH's proxies need nothing. [] for one host or when no route is found."""
    remote = [h.name for h in hosts if not net.is_here(h)]
    src = net.route_source(remote[0]) if remote else None
    if not src or src.startswith("127."):
        return []
    for name, family, address in netif.addresses():
        if name != "lo" and family == netif.AF_INET and address == src:
            return ["-iface", name]
    return []


def render_hostfile(hosts: Sequence[Host]) -> str:
    """Hydra's hostfile: ``host:N`` per line (Open MPI's ``slots=`` form is not read)."""
    return "".join(f"{sshconfig.alias(h)}:{h.slots}\n" for h in hosts)


def genv_tokens(names: Sequence[str]) -> List[str]:
    """One ``-genvlist`` (MPICH: a second one, or -genvnone beside it, is an error); with no
    name, ``-genvnone`` keeps Hydra's default (every variable to remote ranks) away."""
    unique = list(dict.fromkeys(names))
    return ["-genvlist", ",".join(unique)] if unique else ["-genvnone"]


def argv(mpi_path: str, np: int, hostfile_path: str, ssh: Sequence[str], args: Sequence[str],
         names: Sequence[str], rank_command: Sequence[str], dialect: str = MPICH,
         stdin: "str | None" = None) -> List[str]:
    """Intel MPI reads the counts of ``host:N`` only with ``-machinefile``: with ``-f`` it put
    2 ranks on the first host of ``a:1 b:1`` (measured, 2021.18; MPICH's ``-f`` honours them).
    ``stdin``: Intel's ``-s all|N`` (plan_fields refuses what MPICH cannot do)."""
    hostfile = ["-machinefile" if dialect == IMPI else "-f", hostfile_path]
    stdin_tokens = ["-s", stdin] if dialect == IMPI and stdin not in (None, "0", "none") else []
    return [mpi_path, "-n", str(np), *hostfile, *ssh, *args, *stdin_tokens, *genv_tokens(names),
            *rank_command]


def stdin_check(stdin: Optional[str], dialect: str) -> None:
    """MPICH's mpiexec forwards stdin to rank 0 only (no ``-s`` in ``mpiexec.hydra -h``, 5.0.2)."""
    if dialect == MPICH and stdin not in (None, "0", "none"):
        raise UsageError(f"--stdin {stdin}: MPICH's mpiexec forwards stdin to rank 0 only; "
                         "give --stdin 0 or none (Intel MPI and Open MPI take a rank or all)")


def ipv6_check(hosts: Sequence[Host], mpi: MpiInfo) -> None:
    """Hydra cannot start proxies on IPv6-only hosts: UsageError before anything starts.
    Measured on two IPv6-only namespace hosts (docs/NETWORKS.md): MPICH 5.0.2's proxies look
    mpiexec's host up over IPv4 only ("unable to get host address" for a name with only an
    IPv6 address; an IPv6 literal is split at its colons by host:N and -localhost), Intel MPI
    2021's bootstrap proxies the same ("getaddrinfo returned error -3")."""
    for h in hosts:
        if ":" in h.name and not net.is_here(h):
            raise UsageError(f"host {h.name}: {mpi.name} cannot launch on IPv6 hosts (Hydra's "
                             "proxies reach mpiexec over IPv4 only); use Open MPI 4.1 or 5 "
                             "(--mpirun), or give the hosts' IPv4 addresses")


def plan_fields(cfg: LaunchConfig, env: Mapping[str, str], mpi: MpiInfo, run_dir: str) -> Dict[str, Any]:
    """LaunchConfig + env -> the LaunchPlan fields of a Hydra launch (all but rank_command).
    ``broadcast.routed`` holds every broadcast name: each travels via -genvlist."""
    import os


    stdin_check(getattr(cfg, "stdin", None), mpi.dialect)
    ipv6_check(cfg.hosts, mpi)

    args: List[str] = []
    names: List[str] = []
    moved: Dict[str, str] = {}
    ssh_found: List[str] = []
    dropped: List[str] = []
    for raw, source, default in cfg.mpi_pieces:
        canon, more = mpiargs.drop_unset_x(_canonical(raw, source), env)
        dropped += more
        canon, secret_env = mpiargs.route_secret_x(canon)
        t = translate(canon, mpi.dialect, source, default=default)
        moved.update(secret_env)
        moved.update(t.env)
        args += t.args
        names += t.genv_names
        ssh_found += t.ssh_args

    # given twice (here and in the pieces) is refused where the configuration is built
    ssh_args = sshconfig.mpi_ssh_args(cfg, run_dir)   # a port per host: the job's ssh config
    if not net.all_here(cfg.hosts):   # a proxy's ssh ends when its host's link dies (no control master)

        if ssh_found:
            ssh_found = ssh_found + keepalive_options()
        else:
            ssh_args = ssh_args + keepalive_options()
    ssh, ssh_env = ssh_tokens(ssh_args or ssh_found, mpi.dialect)
    if mpi.dialect == IMPI and "-iface" not in args and not env.get("I_MPI_HYDRA_IFACE"):
        args += intel_iface(cfg.hosts)
    elif (mpi.dialect == MPICH and sshconfig.needed(cfg.hosts) and "-iface" not in args
          and not env.get("HYDRA_IFACE")):
        # with the job's aliases no hostfile entry is this host, and MPICH's proxies then
        # connect back to this host's name as Intel's do (measured: "unable to get host address")
        args += intel_iface(cfg.hosts)

    selected, only_in_file = broadcast.selection(env, cfg.env_prefixes, cfg.tune_import)
    moved.update(only_in_file)
    routed = tuple(dict.fromkeys(sorted(selected) + [n for n in names if n not in selected]))
    return dict(
        mpi=mpi, hosts=cfg.hosts, np=cfg.np, oversubscribe=cfg.oversubscribe, run_as_root=False,
        ssh=tuple(ssh), broadcast=broadcast.Broadcast((), routed), args=tuple(args),
        dropped_x=tuple(dict.fromkeys(dropped)), hostfile_path=os.path.join(run_dir, "hostfile"),
        tune_path=cfg.tune_path or os.path.join(run_dir, "tune.env"),
        extra_env={**ssh_env, **moved}, noprefix=False, ssh_config=sshconfig.job_file(cfg, run_dir))


def _canonical(raw: Sequence[str], source: str) -> List[str]:
    """Open MPI spellings -> canonical (``-mca`` -> ``--mca``, ``--x`` -> ``-x``); Hydra's own
    single-dash options are left as written."""
    out: List[str] = []
    i = 0
    while i < len(raw):
        tok = raw[i]
        if tok in HYDRA_OPTIONS and tok not in ("-bind-to", "-map-by"):
            n = HYDRA_OPTIONS[tok]
            out += raw[i:i + 1 + n]
            i += 1 + n
            continue
        j = i + 1
        while j < len(raw) and not (raw[j] in HYDRA_OPTIONS and raw[j] not in ("-bind-to", "-map-by")):
            j += 1
        out += normalize(raw[i:j], MPICH, source)
        i = j
    return out
