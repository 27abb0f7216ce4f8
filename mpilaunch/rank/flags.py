"""The launcher -> adapter contract, declared once: every flag that may stand between the
adapter's entry (``_boot.py`` or ``-m mpilaunch.rank``) and ``--`` in the rank command.

One row per flag: its name, the adapter's attribute (``dest``), its value (``kind``,
``metavar``), the adapter's default, the help, and who writes it. The launcher renders the
rank command from it (mpilaunch/backends/rankcmd.py), every rank parses with it
(mpilaunch/rank/options.py: the fast path and argparse), and docs/ARCHITECTURE.md's section
"The rank command" is generated from it (``python3 -m mpilaunch.rank.flags``).

Every rank imports this module before its script starts, so it imports only
``mpilaunch.contract`` and ``mpilaunch.rank.logs`` (loaded by every rank anyway): no typing,
dataclasses or json.
"""
from collections import namedtuple

from mpilaunch import contract
from mpilaunch.rank import logs

# The value of a flag: how the launcher writes it; the adapter reads a string and checks it.
SWITCH = "switch"      # no value: present means on
TEXT = "text"          # written as it is
WHOLE = "whole"        # an int, written as str(n)
SECONDS = "seconds"    # a float, written with :g (3.0 -> "3", 0.5 -> "0.5")
KIND_TEXT = {TEXT: "text", WHOLE: "whole number", SECONDS: "seconds"}

# Who writes a flag.
CONFIG = "config"      # rankcmd.rank_command, from the LaunchConfig field ``source``
ATTEMPT = "attempt"    # rankcmd.attempt_flags (each attempt of a long job), from its argument
ADAPTER = "adapter"    # nobody: the launcher never writes it, the adapter keeps its default

# When the writer writes it, tested on ``source`` or on the field named after the test
# ("off no_python": only while no_python is false).
ALWAYS, SET, GIVEN, ON, OFF = "always", "set", "given", "on", "off"


TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:   # the checker's view; at run time the namedtuple below (a test holds the two)
    from typing import Any, NamedTuple, Optional, Union

    class _Flag(NamedTuple):
        name: str; dest: str; kind: str; metavar: Optional[str]   # noqa: E702
        default: Union[str, bool, None]; help: str; writer: str   # noqa: E702
        # a str, None on ADAPTER rows: Any while backends/rankcmd.py reads it on written rows
        source: Any = None
        when: str = "always"   # ALWAYS
else:
    _Flag = namedtuple("Flag", "name dest kind metavar default help writer source when",
                       defaults=(None, ALWAYS))


class Flag(_Flag):
    """One flag of the contract. ``default``: what the adapter assumes when the flag is absent
    (a switch: off); ``source``: the LaunchConfig field (CONFIG) or the attempt_flags argument
    (ATTEMPT) written; ``when``: the test that decides whether it is written."""

    __slots__ = ()


# In the order of the rank command: the launcher writes them in this order, the attempt's
# flags (cfg.rank_extra) where the first ATTEMPT row stands.
FLAGS = (
    Flag("--exec", "exec_", SWITCH, None, False,
         "no MPI, scheduler or supervision: set the env and exec the script (a Python script "
         "under python -m mpi4py, so a rank failing after MPI_Init aborts the job)",
         CONFIG, "exec_mode", ON),
    Flag("--log-dir", "log_dir", TEXT, "DIR", contract.DEFAULT_LOG_DIR,
         "directory for worker/scheduler logs", CONFIG, "log_dir"),
    Flag("--worker-log-name", "worker_log_name", TEXT, "NAME", logs.DEFAULT_WORKER_LOG_NAME,
         "worker log file name; {ip}, {hostname}, {rank} are replaced",
         CONFIG, "worker_log_name", SET),
    Flag("--tail-worker-log", "tail_worker_log", TEXT, "SPEC", contract.DEFAULT_TAIL_SPEC,
         "ranks whose output also goes to the console: -1 (every rank), none, or a comma list "
         "of global ranks (the launcher writes the canonical form)", CONFIG, "tail_worker_log"),
    Flag("--master-addr", "master_addr", TEXT, "ADDR", None,
         "scheduler host (default: rank 0's)", CONFIG, "master_addr", SET),
    Flag("--master-port", "master_port", WHOLE, "PORT", str(contract.DEFAULT_MASTER_PORT),
         "scheduler port; 0 = rank 0 picks a free one (all ranks agree via MPI)",
         CONFIG, "master_port"),
    Flag("--cluster-time-out", "cluster_time_out", WHOLE, "SECONDS", None,
         "MS_TOPO_TIMEOUT seconds (absent: the user's MS_TOPO_TIMEOUT, else 600)",
         CONFIG, "cluster_time_out", GIVEN),
    Flag("--bind-core", "bind_core", TEXT, "SPEC", None,
         "True, False, or msrun's JSON dict {\"scheduler\":[\"0-1\"],\"device0\":[...]}",
         CONFIG, "bind_core", SET),
    Flag("--visible-devices", "visible_devices", TEXT, "LIST", None,
         "comma list: DEVICE_ID = list[local rank]", CONFIG, "visible_devices", SET),
    Flag("--bind-numa", "bind_numa", TEXT, "SPEC", None,
         "True, or msrun's JSON dict of NUMA nodes per device (a file's content: the launcher "
         "reads it): each worker's CPUs and memory, through rank/binding/numabind.py",
         CONFIG, "bind_numa", SET),
    Flag("--sim-level", "sim_level", WHOLE, "N", None,
         "MindSpore DryRun: MS_SIMULATION_LEVEL=N, and no MS_ROLE, MS_SCHED_* or MS_TOPO_TIMEOUT "
         "(msrun sets none in a simulation)", CONFIG, "sim_level", GIVEN),
    Flag("--sim-rank-id", "sim_rank_id", WHOLE, "N", None,
         "the one rank DryRun simulates: RANK_ID=N (no MS_NODE_ID)", CONFIG, "sim_rank_id",
         GIVEN),
    Flag("--sim-world", "sim_world", WHOLE, "N", None,
         "with --sim-rank-id: the simulated job's size, RANK_SIZE and MS_WORKER_NUM",
         CONFIG, "sim_world", GIVEN),
    Flag("--rank-table-file", "rank_table_file", TEXT, "PATH", None,
         "RANK_TABLE_FILE for every process (Ascend's rank table)", CONFIG, "rank_table_file",
         SET),
    Flag("--run-id", "run_id", TEXT, "ID", None,
         "the job's id, the same on every rank and attempt: TORCHELASTIC_RUN_ID of a torch "
         "worker (absent: \"none\", torchrun's default --rdzv-id)", CONFIG, "run_id", SET),
    Flag("--torchrun", "torchrun", TEXT, "SPEC", None,
         "torchrun's per-worker flags, role=NAME;signals=LIST;redirects=N|L:N,...;filter=L,...;"
         "vlr=1 (mpilaunch/config/torchworker.py rank_spec; rank/plan.py)", CONFIG, "torchrun", SET),
    Flag("--no-scheduler", "no_scheduler", SWITCH, None, False,
         "do not start the MindSpore scheduler", CONFIG, "scheduler", OFF),
    Flag("--no-port-check", "no_port_check", SWITCH, None, False,
         "--exec: rank 0 does not check --master-port (the launcher chose it)",
         CONFIG, "port_check", OFF),
    Flag("--no-python", "no_python", SWITCH, None, False, "SCRIPT is an executable",
         CONFIG, "no_python", ON),
    Flag("--python", "python", TEXT, "PATH", None, "interpreter for SCRIPT (default: this one)",
         CONFIG, "python", OFF + " no_python"),
    Flag("--restart-count", "restart_count", WHOLE, "N", None,
         "this attempt's number (0 = the first): MPILAUNCH_RESTART_COUNT, "
         "TORCHELASTIC_RESTART_COUNT", ATTEMPT, "restart_count", GIVEN),
    Flag("--max-restarts", "max_restarts", WHOLE, "N", None,
         "restarts the job may have: MPILAUNCH_MAX_RESTARTS, TORCHELASTIC_MAX_RESTARTS",
         ATTEMPT, "max_restarts", GIVEN + " restart_count"),
    Flag("--term-grace", "term_grace", SECONDS, "SECONDS", None,
         "on the launcher's stop (its control channel) or a stop signal: SIGTERM the workers, "
         "wait this long, exit 0",
         ATTEMPT, "term_grace", GIVEN),
    Flag("--stall-timeout", "stall_timeout", SECONDS, "SECONDS", None,
         "watchdog: a status line 'stall' when the worker's log and its heartbeat file "
         "(MPILAUNCH_HEARTBEAT_FILE) have not changed for this long",
         ATTEMPT, "stall_timeout", SET),
    Flag("--expect-ranks", "expect_ranks", TEXT, "SPEC", None,
         "where the launcher planned the ranks, N;MODE;host:count,... (mpilaunch/backends/placement.py): "
         "each rank checks it and takes its node index from it", ATTEMPT, "expect_ranks", SET),
    Flag("--in-place", "in_place", WHOLE, "PORT", None,
         "restart a failed worker (rank 0: and scheduler) in place, up to --max-restarts, "
         "coordinated by rank 0's adapter listening on PORT (mpilaunch/rank/inplace/)",
         ATTEMPT, "in_place", SET),
    Flag("--in-place-no-progress", "in_place_no_progress", WHOLE, "N", None,
         "with --in-place: the N-th attempt in a row that failed within 5 s of its start is not "
         "restarted in place (--max_no_progress_restarts)",
         ATTEMPT, "in_place_no_progress", SET),
    Flag("--monitor-interval", "monitor_interval", SECONDS, "SECONDS", "0",
         "every this many seconds, a sample of the worker (and rank 0's scheduler) to the "
         "launcher over the control channel: CPU, RSS, last output, py-spy's wait share "
         "(mpilaunch/rank/monitor.py); 0 = off", CONFIG, "monitor_interval", SET),
    Flag("--module", "module", SWITCH, None, False,
         "SCRIPT is a module name: run python -m SCRIPT [ARGS...]", CONFIG, "module", SET),
    Flag("--scheduler-grace", "scheduler_grace", SECONDS, "SECONDS", f"{contract.SCHEDULER_GRACE:g}",
         "seconds rank 0 waits for the scheduler after its worker exits 0 (other nodes may "
         "still be finishing)", ADAPTER),
)
BY_NAME = {f.name: f for f in FLAGS}


def condition(flag: "Flag") -> "tuple[str, str]":
    """``flag.when`` split: (the test, the field it tests)."""
    test, _, field = flag.when.partition(" ")
    return test, field or flag.source


def _written(flag: "Flag") -> str:
    """Who writes ``flag``, from what, and when (the doc's column)."""
    if flag.writer == ADAPTER:
        return "nobody: adapter only"
    writer, prefix = (("`rank_command`", "cfg.") if flag.writer == CONFIG
                      else ("`attempt_flags`", ""))
    test, field = condition(flag)
    name = f"`{prefix}{field}`"
    if test in (SET, GIVEN) and field == flag.source and flag.kind != SWITCH:
        cond = "if set" if test == SET else "if not None"
    else:
        cond = {ALWAYS: "always", SET: f"if {name} is set", GIVEN: f"if {name} is not None",
                ON: f"if {name}", OFF: f"if not {name}"}[test]
    if flag.kind == SWITCH:
        return f"{writer}, {cond}"
    return f"{writer}: `{prefix}{flag.source}`, {cond}"


def _synopsis() -> "list[str]":
    """The rank command with every flag the launcher may write, wrapped like the doc's."""
    words, last = [], None
    for f in FLAGS:
        if f.writer == ADAPTER:
            continue
        word = f.name if f.kind == SWITCH else f"{f.name} {f.metavar}"
        if last is not None and condition(f) == (OFF, last.source) and last.when == ON:
            words[-1] = f"({last.name} | {word})"   # written exactly when the other is not
        else:
            words.append(word if f.when == ALWAYS else f"[{word}]")
        last = f
    lines, line = [], "       "
    for word in words + ["-- SCRIPT [ARGS...]"]:
        if len(line) + 1 + len(word) > 90:
            lines.append(line)
            line = "       "
        line += " " + word
    lines.append(line)
    return ["```", "<python> -S <pkg>/rank/_boot.py    (or: <python> -m mpilaunch.rank, for "
            "another --python)"] + lines + ["```"]


def markdown() -> str:
    """docs/ARCHITECTURE.md's generated part of "The rank command": synopsis and table."""
    rows = _synopsis() + ["", "| flag | value | adapter default | written by | what |",
                          "|---|---|---|---|---|"]
    for f in FLAGS:
        value = "switch" if f.kind == SWITCH else f"`{f.metavar}` ({KIND_TEXT[f.kind]})"
        default = "off" if f.kind == SWITCH else ("" if f.default is None else f"`{f.default}`")
        what = f.help.replace("|", "\\|")
        rows.append(f"| `{f.name}` | {value} | {default} | {_written(f)} | {what} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # python3 -m mpilaunch.rank.flags > docs/ARCHITECTURE.md's section
    print(markdown(), end="")
