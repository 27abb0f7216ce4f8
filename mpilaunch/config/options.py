"""The option table: every flag of ``mpilaunch``, ``mpilaunch check`` and ``mpilaunch job``,
declared once.

One row per option (torchrun's: config/torchrun.py): its flags, the platform variable that
stands in for it, the default, the help, and the commands that take it. The table drives the
argparse parsers (:func:`parser`), flag > variable > default (:func:`setting`, used by
``launchconfig.build`` and ``job``), ``--help`` and docs/OPTIONS.md (:func:`markdown_table`;
a test keeps the page equal to it). Values are validated in ``launchconfig.py`` /
``contract.py``; argparse only collects strings, so a bad value names where it came from.
"""
from __future__ import annotations

import argparse
from typing import AbstractSet, Any, FrozenSet, Iterable, List, Mapping, NamedTuple, NoReturn, Optional, Sequence, Tuple

from mpilaunch import contract
from mpilaunch.errors import UsageError
from mpilaunch.config.helptext import DESCRIPTIONS, Formatter, epilog, version_text  # noqa: F401 (--dry-run prints it)
from mpilaunch.config.broadcast import DEFAULT_PREFIXES
from mpilaunch.config import torchrun

RUN, CHECK, JOB, REPORT, STACKS, TOP = "run", "check", "job", "report", "stacks", "top"
LAUNCH = (RUN, CHECK, JOB)   # every command that plans a launch takes these
DEFAULT_MONITOR_INTERVAL = 5.0    # docs/MONITOR.md: names a steady straggler within 30 s
MIN_MONITOR_INTERVAL = 5.0        # under it a round holds fewer than 20 stack samples

GROUPS = {
    "hosts": "hosts and processes (ModelArts variables in brackets)",
    "mpirun": "mpirun",
    "rank": "inside every rank (msrun names)",
    "long": "long jobs: restarts, graceful stop, stall watchdog",
    torchrun.GROUP[0]: torchrun.GROUP[1],
    "check": "check",
    "job": "job",
    "report": "report",
    "stacks": "stacks",
    "monitor": "the live view of the job: mpilaunch top, /metrics (docs/MONITOR.md)",
    "top": "top",
}


class Opt(NamedTuple):
    """flags: spellings (the first long one names the option in messages); dest: argparse name;
    var: the variable standing in for the flag (None: flag only); default: the value used when
    neither is given (None: decided elsewhere, described by ``shown``); kind: ``value`` |
    ``switch`` (store_true) | ``hidden`` (accepted, not shown); commands: where it applies."""

    flags: Tuple[str, ...]; dest: str; var: Optional[str]; default: Any; shown: str   # noqa: E702
    help: str; group: str; kind: str; metavar: Optional[str]; commands: Tuple[str, ...]   # noqa: E702

    @property
    def name(self) -> str:
        """The flag as messages name it (the first ``--`` spelling)."""
        return next((f for f in self.flags if f.startswith("--")), self.flags[0])


def _o(flags: Sequence[str], dest: str, help: str, group: str, var: Optional[str] = None,
       default: Optional[str] = None, shown: str = "", kind: str = "value",
       metavar: Optional[str] = None, commands: Sequence[str] = LAUNCH) -> Opt:
    return Opt(tuple(flags), dest, var, default, shown, help, group, kind, metavar, tuple(commands))


OPTIONS = (
    # -- hosts and processes
    _o(("-np", "--np", "-n", "--worker_num"), "np", "number of ranks (workers)", "hosts",
       var="OPENMPI_NP", shown="total slots of the hosts", metavar="N"),
    _o(("-hostfile", "--hostfile", "--machinefile"), "hostfile", "Open MPI or MPICH hostfile",
       "hosts", var="OPENMPI_HOST_FILE_PATH",
       shown="`VC_WORKER_HOSTS` × `MA_NUM_GPUS` slots, else this machine", metavar="FILE"),
    _o(("-H", "--host"), "host", "host list a:2,b:2", "hosts", metavar="HOSTS"),
    _o(("--local_worker_num", "--slots-per-host"), "local_worker_num",
       "slots per host for VC_WORKER_HOSTS, or for this machine", "hosts", var="MA_NUM_GPUS",
       default="1", shown="1 (this machine: -np)", metavar="N"),
    _o(("--oversubscribe",), "oversubscribe", "allow more ranks than slots", "hosts",
       kind="switch"),
    # -- mpirun
    _o(("--mpirun",), "mpirun", "mpirun to use", "mpirun", var="MPILAUNCH_MPIRUN",
       shown="the embedded Open MPI next to this Python, else `mpirun` on PATH", metavar="PATH"),
    _o(("--launcher",), "starter",
       "picks the starter, the program that starts the ranks: mpirun, or srun (inside a Slurm "
       "allocation, no mpirun)", "mpirun",
       var="MPILAUNCH_LAUNCHER", default="mpirun", metavar="mpirun|srun"),
    _o(("--ssh-port",), "ssh_port", "sshd port on the hosts", "mpirun", var="SSHD_PORT",
       shown="ssh's default", metavar="PORT"),
    _o(("--ssh-args",), "ssh_args", "extra ssh options, e.g. '-F cfg'", "mpirun", metavar="ARGS"),
    _o(("--tune-file",), "tune_file", "where to write the env tune file", "mpirun",
       var="TUNE_ENV_FILE", shown="a private 0700 directory, removed at the end", metavar="FILE"),
    _o(("--keep-tune-file",), "keep_tune_file", "do not remove the tune file at the end",
       "mpirun", kind="switch"),
    _o(("--env-prefixes",), "env_prefixes", "comma list of variable prefixes broadcast from this host",
       "mpirun", var="MPILAUNCH_ENV_PREFIXES", shown="`" + ",".join(DEFAULT_PREFIXES) + "`",
       metavar="LIST"),
    _o(("--bind-args",), "bind_args", "mpirun binding options", "mpirun", var="OPENMPI_BIND_ARGS",
       default="-bind-to none -map-by slot", metavar="ARGS"),
    _o(("--x-args",), "x_args", "mpirun -x options", "mpirun", var="OPENMPI_X_ARGS",
       default=("-x LD_LIBRARY_PATH -x HOROVOD_MPI_THREADS_DISABLE=1 -x NCCL_DEBUG=INFO "
                "-x NCCL_SOCKET_IFNAME=ib0,bond0,eth0 -x NCCL_SOCKET_FAMILY=AF_INET "
                "-x NCCL_IB_DISABLE=0"), metavar="ARGS"),
    _o(("--mca-args",), "mca_args", "mpirun MCA options", "mpirun", var="OPENMPI_MCA_ARGS",
       default="-mca pml ob1 -mca btl ^openib -mca plm_rsh_no_tree_spawn true", metavar="ARGS"),
    _o(("--extra-args",), "extra_args", "more mpirun options", "mpirun", var="OPENMPI_EXTRA_ARGS",
       default="", shown="empty", metavar="ARGS"),
    _o(("--python",), "python", "absolute interpreter path for ranks", "mpirun",
       shown="this Python", metavar="PATH"),
    _o(("--dry-run",), "dry_run", "print the mpirun command and tune file; start nothing",
       "mpirun", kind="switch"),
    _o(("--no-preflight",), "no_preflight",
       "skip the ssh preflight run before a multi-host launch (see `mpilaunch check`)", "mpirun",
       kind="switch"),
    _o(("--preflight",), "preflight",
       "what to check before a multi-host launch: ssh (resolve, port, login) or deep (all of "
       "`mpilaunch check --deep` with its defaults, also with --no-preflight: the launch starts "
       "only without an outlier)", "mpirun",
       default="ssh", metavar="ssh|deep", commands=(RUN, JOB)),
    _o(("-v", "--verbose"), "verbose", "print the mpirun command before running it", "mpirun",
       kind="switch"),
    _o(("--version",), "version", "print mpilaunch's version and exit", "mpirun",
       kind="version", commands=LAUNCH + (REPORT, STACKS, TOP)),
    # -- inside every rank
    _o(("--log_dir", "--log-dir"), "log_dir", "worker and scheduler logs", "rank",
       default=contract.DEFAULT_LOG_DIR, metavar="DIR"),
    _o(("--worker_log_name", "--worker-log-name"), "worker_log_name",
       "log name with {rank}, {ip}, {hostname}", "rank", shown="`worker_{rank}.log`",
       metavar="NAME"),
    _o(("--tail_worker_log", "--tail-worker-log"), "tail_worker_log",
       "ranks whose output goes to the console: -1 (all), none, or 0,3", "rank",
       default=contract.DEFAULT_TAIL_SPEC, metavar="SPEC"),
    _o(("--console_collapse", "--console-collapse"), "console_collapse",
       "a line several ranks print shows once with their ranks; a line waits at most SECONDS "
       "(0: off; docs/LOGS.md)", "rank", var="MPILAUNCH_CONSOLE_COLLAPSE", default="2", metavar="SECONDS"),
    _o(("--console_budget", "--console-budget"), "console_budget",
       "above BYTES/s of ranks' lines, the console shows rank 0, failed ranks, lines alike "
       "(0: no cap; docs/LOGS.md)", "rank", var="MPILAUNCH_CONSOLE_BUDGET", default="262144", metavar="BYTES"),
    _o(("--master_addr", "--master-addr"), "master_addr", "scheduler / MASTER_ADDR address",
       "rank", var=torchrun.PET_VARS["master_addr"], shown="rank 0's host address", metavar="ADDR"),
    _o(("--master_port", "--master-port"), "master_port",
       "scheduler / MASTER_PORT port (0 picks a free one)", "rank",
       var=torchrun.PET_VARS["master_port"], default=str(contract.DEFAULT_MASTER_PORT), metavar="PORT"),
    _o(("--cluster_time_out", "--cluster-time-out"), "cluster_time_out",
       "seconds to wait for all workers to join (MS_TOPO_TIMEOUT)", "rank",
       shown="your `MS_TOPO_TIMEOUT`, else 600", metavar="SECONDS"),
    _o(("--bind_core", "--bind-core"), "bind_core",
       "True, or msrun's JSON dict of CPU ranges per device", "rank", shown="no binding",
       metavar="SPEC"),
    _o(("--visible-devices",), "visible_devices", "comma list mapping local rank -> DEVICE_ID",
       "rank", shown="the local rank", metavar="LIST"),
    _o(("--bind_numa", "--bind-numa"), "bind_numa",
       "True, msrun's JSON dict of NUMA nodes per device, or a JSON file of one: binds each "
       "worker's CPUs and memory (numactl where there, else sched_setaffinity + set_mempolicy)",
       "rank", shown="no binding", metavar="SPEC"),
    _o(("--sim_level", "--sim-level"), "sim_level",
       "MindSpore DryRun (MS_SIMULATION_LEVEL 0-3): compile without a cluster, no scheduler",
       "rank", shown="off", metavar="N"),
    _o(("--sim_rank_id", "--sim-rank-id"), "sim_rank_id",
       "with --sim_level: run one process only, simulating this rank (RANK_ID) of -np",
       "rank", shown="every rank", metavar="RANK"),
    _o(("--rank_table_file", "--rank-table-file"), "rank_table_file",
       "Ascend rank table, checked readable, exported as RANK_TABLE_FILE to every process",
       "rank", shown="none", metavar="FILE"),
    _o(("--node_rank", "--node-rank"), "node_rank",
       "msrun's index of this node: accepted; under one mpirun each host's index is the "
       "starter's (a different value is said once on stderr)", "rank", shown="the starter's",
       metavar="N", var=torchrun.PET_VARS["node_rank"]),
    _o(("--scheduler",), "scheduler",
       "start MindSpore's scheduler on rank 0 (default: only when SCRIPT imports mindspore)",
       "rank", kind="switch"),
    _o(("--no-scheduler",), "no_scheduler", "do not start MindSpore's scheduler on rank 0",
       "rank", kind="switch"),
    _o(("--exec",), "exec_mode",
       "the script is an MPI program itself (Horovod, mpi4py): exec it with the derived env",
       "rank", kind="switch"),
    _o(("--no-python", "--no_python"), "no_python", "SCRIPT is an executable, not a Python file", "rank",
       kind="switch"),
    _o(("-m", "--module"), "module", "run library module MODULE (python -m MODULE); ends the options: "
       "-m MODULE [ARGS...]", "rank", metavar="MODULE"),
    _o(("--stdin",), "stdin", "which rank reads mpilaunch's stdin: a rank, all, or none "
       "(mpirun's --stdin)", "rank", shown="0 (none when mpilaunch's stdin is closed or /dev/null)",
       metavar="RANK"),
    _o(("--join",), "join", "msrun compatibility: always joined", "rank", kind="hidden"),
    # -- long jobs (mpilaunch/attempts/restart.py, mpilaunch/rank/resilience.py)
    _o(("--max_restarts", "--max-restarts"), "max_restarts",
       "restart the whole job after a failure, up to N times in all (logs: LOG_DIR/attempt<k>/)",
       "long", var="PET_MAX_RESTARTS", default="0", metavar="N", commands=(RUN, JOB)),
    _o(("--max_no_progress_restarts", "--max-no-progress-restarts"), "max_no_progress_restarts",
       "with --max_restarts: after N attempts in a row failed before any worker made progress "
       "(see docs/LONG_JOBS.md), do not restart again; 0: no limit", "long", default="3",
       metavar="N", commands=(RUN, JOB)),
    _o(("--restart-mode", "--restart_mode"), "restart_mode",
       "in-place: a failed worker restarts inside the running job (mpirun and the adapters stay; "
       "a lost host or a dead adapter relaunches); relaunch: a new mpirun every time", "long",
       default="in-place", shown="in-place (relaunch with --exec or an MPI program)",
       metavar="in-place|relaunch", commands=(RUN, JOB)),
    _o(("--min-hosts", "--min_hosts"), "min_hosts",
       "with --max_restarts: after a host is lost, the next attempt runs on the hosts left "
       "(world size recomputed) while at least M are left", "long", shown="off (every attempt "
       "on every host)", metavar="M", commands=(RUN, JOB)),
    _o(("--host-discovery-script", "--host_discovery_script"), "host_discovery_script",
       "before every attempt, run this executable for the live hosts, one host:slots (or host) "
       "line each (Horovod's contract, mpi-operator's discover_hosts.sh); they replace the "
       "hostfile's; a host that failed twice sits out 300 s, new hosts are preflighted", "long",
       shown="off (the hostfile's hosts)", metavar="PATH", commands=(RUN, JOB)),
    _o(("--restart-delay", "--restart_delay"), "restart_delay",
       "seconds between a failed attempt's teardown and the next start", "long", default="0",
       metavar="SECONDS", commands=(RUN, JOB)),
    _o(("--term-grace", "--term_grace"), "term_grace",
       "on SIGTERM/SIGINT/SIGHUP to mpilaunch: SIGTERM every worker's main process and give it "
       "this long to save before SIGKILL; given, also on a stop signal the ranks get themselves "
       "(scancel); 0: the starter's immediate stop", "long",
       shown="20 (for a stop signal to mpilaunch: inside Slurm's and Kubernetes' 30 s)",
       metavar="SECONDS", commands=(RUN, JOB)),
    _o(("--stall-timeout", "--stall_timeout"), "stall_timeout",
       "end (or restart) the job when no worker logged output or touched "
       "$MPILAUNCH_HEARTBEAT_FILE for this long; stacks to LOG_DIR/stacks_<rank>.txt", "long",
       shown="off", metavar="SECONDS", commands=(RUN, JOB)),
    _o(("--no-span-check",), "no_span_check",
       "do not check that the ranks run on the planned hosts before the script starts", "long",
       kind="switch", commands=(RUN, JOB)),
    # -- the live view (mpilaunch/monitor/)
    _o(("--sample-interval", "--sample_interval"), "monitor_interval",
       "every this many seconds each rank's adapter samples its worker (CPU, RSS, last output; "
       "with py-spy the share of time it waits for the other ranks and its hottest frame) for "
       f"the launcher; 0 = off, else at least {MIN_MONITOR_INTERVAL:g} (fewer stack samples "
       "than the straggler rule judges); not with --exec", "monitor",
       shown=f"{DEFAULT_MONITOR_INTERVAL:g} when py-spy is beside the ranks' Python, else 0",
       metavar="SECONDS", commands=(RUN,)),
    _o(("--monitor-interval", "--monitor_interval"), "torchrun_monitor_interval",
       "torchrun's: how often its agent polls the workers' state; accepted and ignored, as "
       "nothing here polls (each rank's adapter tells the launcher of its worker's exit as it "
       "happens; the live view's sampling is --sample-interval)", "monitor",
       shown="-", metavar="SECONDS", commands=(RUN,)),
    _o(("--metrics-port",), "metrics_port",
       "serve every rank's monitor series to Prometheus at http://ADDR:PORT/metrics (needs "
       "prometheus-client: pip install 'mpilaunch[metrics]')", "monitor",
       var="MPILAUNCH_METRICS_PORT", shown="off", metavar="PORT", commands=(RUN, JOB)),
    _o(("--metrics-addr",), "metrics_addr", "the address /metrics listens on", "monitor",
       var="MPILAUNCH_METRICS_ADDR", default="127.0.0.1", metavar="ADDR", commands=(RUN, JOB)),
    # -- mpilaunch check
    _o(("--timeout",), "check_timeout", "seconds per check and host (ssh gets twice: log in, run)",
       "check", default="10", metavar="SECONDS", commands=(CHECK,)),
    _o(("--parallel",), "check_parallel", "hosts checked at once", "check", default="64",
       metavar="N", commands=(CHECK,)),
    _o(("--ssh-only",), "check_ssh_only",
       "only resolve, ssh port and ssh login (what the launcher checks)", "check",
       kind="switch", commands=(CHECK,)),
    _o(("--table",), "check_table", "print the per-host table always", "check", kind="switch",
       commands=(CHECK,)),
    _o(("--deep",), "check_deep",
       "also measure every host that passed (compute per slot, memory, log dir, devices, the "
       "network ring) and name the outliers against the median (exit 1)", "check",
       kind="switch", commands=(CHECK,)),
    _o(("--deep-budget",), "deep_budget",
       "seconds the --deep measurements may take (their windows shrink to fit the hosts)",
       "check", default="6", metavar="SECONDS", commands=(CHECK,)),
    _o(("--deep-threshold",), "deep_threshold",
       "--deep: a host is an outlier this many times slower than the median", "check",
       default="2.5", metavar="X", commands=(CHECK,)),
    _o(("--deep-min-free",), "deep_min_free", "--deep: GB the log dir must have free",
       "check", default="1", metavar="GB", commands=(CHECK,)),
    _o(("--pairs",), "deep_pairs",
       "--deep: besides the ring, each host also sends to N others (a fixed sample)", "check",
       default="0", metavar="N", commands=(CHECK,)),
    _o(("--collective",), "deep_collective",
       "--deep: also time a torch.distributed allreduce across the hosts (gloo or nccl)",
       "check", shown="off", metavar="gloo|nccl", commands=(CHECK,)),
    # -- mpilaunch report
    _o(("--png",), "report_png",
       "also draw the timeline as LOG_DIR/report.png (needs matplotlib: pip install "
       "'mpilaunch[report]')", "report", kind="switch", commands=(REPORT,)),
    _o(("-o", "--output"), "report_output", "where to write the HTML report", "report",
       shown="`LOG_DIR/report.html`", metavar="FILE", commands=(REPORT,)),
    _o(("--native",), "stacks_native",
       "also the C/C++ frames (py-spy dump --native: a collective's MPI or gloo call)", "stacks",
       kind="switch", commands=(STACKS,)),
    _o(("--timeout",), "stacks_timeout", "seconds to wait for every rank's answer", "stacks",
       default="60", metavar="SECONDS", commands=(STACKS,)),
    _o(("--once",), "top_once", "print the table once and exit (for scripts)", "top",
       kind="switch", commands=(TOP,)),
    # -- mpilaunch job
    _o(("--wait-hosts",), "wait_hosts", "worker-0: seconds to wait for every host to be ready",
       "job", default="300", metavar="SECONDS", commands=(JOB,)),
    _o(("--lost-after",), "lost_after",
       "other hosts: give up after worker-0's sshd has not answered this long", "job",
       default="60", metavar="SECONDS", commands=(JOB,)),
) + torchrun.option_rows(_o, (RUN, JOB))

BY_DEST = {o.dest: o for o in OPTIONS}


class _Parser(argparse.ArgumentParser):
    value_flags: FrozenSet[str] = frozenset()   # the flags that take a value (parser() sets them)

    def error(self, message: str) -> NoReturn:  # one line, no usage dump, exit 2 via UsageError
        raise UsageError(message)

    def parse_known_args(self, args: Optional[Iterable[str]] = None, namespace: Any = None) -> Tuple[Any, List[str]]:
        """``-m MODULE [ARGS...]`` ends the options as in ``python -m``: the module's own
        arguments are never read as ours (``-m mpi4py.bench helloworld -n 2``)."""
        import sys

        args = list(sys.argv[1:] if args is None else args)
        cut = module_index(args, self.value_flags)
        if cut is None:
            ns, extra = super().parse_known_args(args, namespace)
            if getattr(ns, "script", None) == "-m":   # mpilaunch ... -- -m MODULE [ARGS...]
                if not ns.script_args:
                    raise UsageError("-m: give a module name (-m MODULE [ARGS...])")
                ns.module, ns.script, ns.script_args = ns.script_args[0], None, ns.script_args[1:]
            return ns, extra
        tok = args[cut]
        alone = tok in ("-m", "--module")   # the module is the next word (else -mMODULE)
        module = tok[2:] if not alone else (args[cut + 1] if cut + 1 < len(args) else "")
        rest = args[cut + 1 + alone:]
        if not module or module.startswith("-"):
            raise UsageError("-m: give a module name (-m MODULE [ARGS...])")
        ns, extra = super().parse_known_args(args[:cut], namespace)
        ns.module, ns.script, ns.script_args = module, None, rest
        return ns, extra

    def _parse_optional(self, arg_string: str) -> Optional[Tuple[Optional[argparse.Action], str, Optional[str]]]:
        # With "-m" registered, argparse would read a value such as --mca-args "-mca btl tcp"
        # as -m "ca btl tcp"; a single-dash word with a space is a value (as before -m).
        # (the same for torchrun's -r and -t: "-report-bindings -tag-output" is a value)
        if arg_string.startswith(("-m", "-r", "-t")) and " " in arg_string:
            return None
        return super()._parse_optional(arg_string)


def module_index(args: Sequence[str], value_flags: AbstractSet[str]) -> "int | None":
    """Where ``-m`` / ``-mMODULE`` stands among the options (before SCRIPT or ``--``)."""
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--" or not tok.startswith("-") or tok == "-":
            return None
        if tok in ("-m", "--module") or (tok.startswith("-m") and not tok.startswith("--")
                           and tok not in value_flags and "=" not in tok
                           and not any(tok.startswith(f) for f in value_flags
                                       if f.startswith("-m") and f != "-m")):
            return i
        i += 2 if tok in value_flags else 1
    return None


def _help(o: Opt) -> str:
    text = o.help
    if o.var:
        text += f" [{o.var}]"
    if o.default not in (None, "") and o.kind == "value":
        text += f" (default: {o.default})"
    elif o.shown:
        text += f" (default: {o.shown.replace('`', '')})"
    return text.replace("%", "%%")


def parser(command: str = RUN) -> _Parser:
    """The argparse parser of ``command``; every value is left a string (or None when not
    given) so that :func:`setting` can tell a flag from a variable from a default."""
    prog = "mpilaunch" if command == RUN else f"mpilaunch {command}"
    p = _Parser(prog=prog, description=DESCRIPTIONS[command], allow_abbrev=False,
                epilog=epilog(command), formatter_class=Formatter)
    p.value_flags = frozenset(f for o in OPTIONS if command in o.commands and o.kind != "switch"
                              for f in o.flags)
    groups = {}
    for o in OPTIONS:
        if command not in o.commands:
            continue
        if o.group not in groups:
            groups[o.group] = p.add_argument_group(GROUPS[o.group])
        g = groups[o.group]
        if o.kind == "version":   # beside -h: every command answers it
            p.add_argument(*o.flags, action="version", version=version_text(), help=o.help)
        elif o.kind == "switch":
            g.add_argument(*o.flags, dest=o.dest, action="store_true", help=_help(o))
        elif o.kind == "hidden":
            g.add_argument(*o.flags, dest=o.dest, default=None, help=argparse.SUPPRESS)
        else:
            g.add_argument(*o.flags, dest=o.dest, default=None, help=_help(o), metavar=o.metavar)
    if command in (REPORT, STACKS, TOP):
        p.add_argument("log_dir", metavar="LOG_DIR", help="the job's --log_dir")
        return p
    p.add_argument("script", nargs="?", default=None)
    p.add_argument("script_args", nargs=argparse.REMAINDER)
    return p


# Options whose variable, set but empty, is a value ("no such mpirun options"); for every
# other option an empty variable counts as unset (as ModelArts' `grep -v '=$'` treats it).
BLANK_IS_A_VALUE = frozenset({"bind_args", "x_args", "mca_args", "extra_args"})


def setting(args: object, env: Mapping[str, str], dest: str) -> Tuple[Any, str]:
    """(value, source) for option ``dest``: the flag if given, else its variable if set (and
    not blank, but for :data:`BLANK_IS_A_VALUE`), else the table's default. ``source`` names
    the flag or the variable (for messages), or is ``"default"``."""
    o = BY_DEST[dest]
    value = getattr(args, dest, None)
    if value is not None:
        return value, o.name
    if o.var and o.var in env and (dest in BLANK_IS_A_VALUE or str(env[o.var]).strip()):
        return env[o.var], o.var
    return o.default, "default"


def flag_names(commands: Sequence[str]) -> Tuple[str, ...]:
    """Every spelling of the options that take a value / are switches, for argv splitting."""
    return tuple(f for o in OPTIONS if set(o.commands) & set(commands) for f in o.flags)


def markdown_table(command: str = RUN, only_own: bool = False) -> str:
    """docs/OPTIONS.md's table of ``command``'s options: flag, variable, default, what it does
    (``only_own``: just the options no other command takes)."""
    rows = ["| flag | variable | default | what |", "|---|---|---|---|"]
    group = None
    for o in OPTIONS:
        if command not in o.commands or o.kind == "hidden":
            continue
        if only_own and o.commands != (command,):
            continue
        if not only_own and o.group != group:   # the groups of --help
            group = o.group
            rows.append(f"| **{GROUPS[group]}** | | | |")
        flags = ", ".join(f"`{f}`" for f in o.flags)
        var = f"`{o.var}`" if o.var else ""
        if o.kind == "version":
            default = ""
        elif o.kind == "switch":
            default = "off"
        elif o.default not in (None, "") and not o.shown:
            default = f"`{o.default}`"
        else:
            default = o.shown
        rows.append(f"| {flags} | {var} | {default} | {o.help.replace('|', '¦')} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # python3 -m mpilaunch.config.options run check job report stacks top (docs/OPTIONS.md)
    import sys

    for cmd in sys.argv[1:] or [RUN]:
        print(markdown_table(cmd, only_own=cmd != RUN))
