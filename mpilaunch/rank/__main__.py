"""``python -m mpilaunch.rank [opts] -- SCRIPT [ARGS...]``: the rank adapter's entry point.

Only doing; every decision is made elsewhere: options.py (argv -> validated Options),
identity.py (who am I), agree.py (scheduler address/port, node index; MPI only when needed),
plan.py (the children / the exec, pure), runner.py + supervisor.py (start and watch them). Here: set
PDEATHSIG, read the identity, create the log directory, agree, look up what the plan needs
(``{ip}``, the interface towards rank 0, CPUs), then supervise or exec. A UsageError becomes
one line ``mpilaunch.rank: error: ...`` on stderr, a status line ``role: adapter`` and exit 2.
Imports are lazy: mpi4py only when the agreement needs MPI, psutil only when used.
"""
from __future__ import annotations

import os
import _signal as signal   # not signal: its enums cost every rank (docs/ARCHITECTURE.md, start-up)
import sys

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

    from mpilaunch.rank.agree import Agreement
    from mpilaunch.rank.identity import RankInfo
    from mpilaunch.rank.options import Options
    from mpilaunch.rank.plan import ChildSpec
    from mpilaunch.rank.resilience import ResilienceFlags
    from mpilaunch.rank.runner import Inbox

from mpilaunch.errors import UsageError
from mpilaunch.rank import options as rank_options
from mpilaunch.rank import frameworkenv, plan

PROG = rank_options.PROG
USER_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


def _for_the_worker(signum: int, frame: object) -> None:
    """A user signal the starter forwarded to the whole group: the worker has its own copy."""


def _guess_rank(env: Mapping[str, str]) -> Optional[int]:
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "PMIX_RANK"):
        try:
            return int(env[name])
        except (KeyError, ValueError):
            continue
    return None


def _cpus(opts: Options) -> Tuple[Sequence[int], Sequence[Sequence[int]]]:
    """(available CPUs, NUMA nodes) when --bind-core needs them, else empty."""
    if opts.bind is None:
        return (), ()
    from mpilaunch.rank.binding import affinity

    return affinity.available_cpus(), affinity.read_numa_nodes()


def _make_log_dir(log_dir: str) -> None:
    try:
        os.makedirs(log_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--log-dir {log_dir!r} cannot be created: {exc.strerror}") from None
    if not os.access(log_dir, os.W_OK | os.X_OK):
        raise UsageError(f"--log-dir {log_dir!r} is not writable")


def run(opts: Options, info: RankInfo, user_env: Dict[str, str], hostname: str) -> int:
    from mpilaunch.rank import control

    channel = control.take(user_env)   # the launcher's key never reaches a worker (control.py)
    plan.check(opts, info, user_env)
    if opts.resilience is not None:   # span check, restart count, heartbeat
        from mpilaunch.rank import resilience

        resilience.prepare(opts, info, user_env)
    argv = rank_options.worker_argv(opts, user_env.get("PATH"))
    if opts.exec_:
        return exec_script(opts, info, user_env, argv)

    _make_log_dir(opts.log_dir)
    from mpilaunch.rank import agree

    if opts.resilience is not None and opts.resilience.expect is not None:
        # the node index from the launcher's plan, when it matches what the starter says
        # here: ranks across hosts then need no MPI_Init just to learn it
        from mpilaunch.rank import span

        info = agree.node_from_plan(info, span.parse(opts.resilience.expect))
    ag = agree.agree(info, opts.master_addr, opts.master_port)
    info = ag.info
    if user_env.get("MPILAUNCH_DEBUG_AGREE"):   # tests and bench/: did this adapter load MPI?
        sys.stderr.write(f"{PROG}: rank {info.rank} node {info.node_index} agreement: used_mpi="
                         f"{ag.used_mpi} mpi4py_loaded={'mpi4py' in sys.modules} "
                         f"at {ag.sched_addr}:{ag.sched_port}\n")
    ip = agree.local_ip(ag.sched_addr) if plan.needs_local_ip(opts) else ""
    ifname = (agree.interface_towards(ag.sched_addr)
              if plan.needs_gloo_ifname(info, user_env) else None)
    cpus, numa = _cpus(opts)
    specs = plan.children(opts, info, ag.sched_addr, ag.sched_port, user_env, argv, hostname,
                          ip=ip, gloo_ifname=ifname, cpus=cpus, numa_nodes=numa)
    specs = _pass_starter_fds(specs, ag.used_mpi, user_env)
    for spec in specs:
        if os.path.dirname(spec.log_path):
            os.makedirs(os.path.dirname(spec.log_path), exist_ok=True)
    _no_stale_error_file(specs)
    if info.rank == 0 and not (opts.resilience and opts.resilience.restart_count):
        note = frameworkenv.omp_note(user_env, specs[-1].env)   # torchrun's warning, once
        if note:
            sys.stderr.write(note)

    restarts = _restarts(opts, info, ag, user_env, argv, hostname, ip, ifname, cpus, numa)
    from mpilaunch.rank.runner import supervise

    return supervise(specs, opts, info.rank, hostname, local_size=info.local()[1],
                     channel=channel, restarts=restarts)


def _attempt_specs(opts: Options, lr: ResilienceFlags, info: RankInfo, ag: Agreement,
                   user_env: Dict[str, str], argv: List[str], hostname: str, ip: str,
                   ifname: Optional[str], cpus: Sequence[int], numa: Sequence[Sequence[int]],
                   k: int, port: int) -> List[ChildSpec]:
    """The children of attempt ``k`` restarted in place (rank/inplace/): its log dir
    (LOG_DIR/attempt<k>, beside this attempt's), restart count and rendezvous port."""
    from mpilaunch.rank import resilience
    from mpilaunch.rank.inplace.loop import attempt_dir

    opts = opts._replace(log_dir=attempt_dir(opts.log_dir, k), master_port=port,
                         resilience=lr._replace(restart_count=k))
    env = dict(user_env)
    resilience.prepare(opts, info, env, span_check=False)
    _make_log_dir(opts.log_dir)
    specs = plan.children(opts, info, ag.sched_addr, port, env, argv, hostname, ip=ip,
                          gloo_ifname=ifname, cpus=cpus, numa_nodes=numa)
    specs = _pass_starter_fds(specs, ag.used_mpi, user_env)
    _no_stale_error_file(specs)
    return specs


def _no_stale_error_file(specs: Sequence[ChildSpec]) -> None:
    """An error file left by an earlier job in the same log dir would be read as this
    worker's exception after a failure (contract.error_file_path)."""
    for spec in specs:
        path = spec.env.get("TORCHELASTIC_ERROR_FILE")
        # ours only: beside the log (a MindSpore worker keeps a value the user gave)
        if path and os.path.dirname(path) == os.path.abspath(os.path.dirname(spec.log_path)):
            try:
                os.unlink(path)
            except OSError:
                pass


def _pass_starter_fds(specs: List[ChildSpec], used_mpi: bool,
                      user_env: Mapping[str, str]) -> List[ChildSpec]:
    """The worker keeps the starter's fds when the adapter did not speak PMI itself: the
    worker is then the first in this process to."""
    if used_mpi:
        return specs
    from mpilaunch.rank.identity import starter_fds

    fds = starter_fds(user_env)
    return [s._replace(pass_fds=fds) if s.role == "worker" else s for s in specs]


def _restarts(opts: Options, info: RankInfo, ag: Agreement, user_env: Dict[str, str],
              argv: List[str], hostname: str, ip: str, ifname: Optional[str],
              cpus: Sequence[int], numa: Sequence[Sequence[int]]
              ) -> Optional[Callable[[Inbox, Options], object]]:
    """runner.supervise's in-place hooks (rank/inplace/loop.py), None without --in-place."""
    lr = opts.resilience
    if lr is None or not lr.in_place:
        return None
    size = info.size
    if size is None:   # the agreed RankInfo is complete
        raise ValueError("in-place restarts need the world size (an incomplete RankInfo)")

    def specs_for(k: int, port: int) -> List[ChildSpec]:
        return _attempt_specs(opts, lr, info, ag, user_env, argv, hostname, ip, ifname, cpus,
                              numa, k, port)

    def restarts(inbox: Inbox, opts: Options) -> object:   # rank/inplace/loop.Restarts, opt-in
        from mpilaunch.rank.inplace import loop

        return loop.Restarts(inbox, opts, info.rank, hostname, ag.sched_addr, size, argv,
                             specs_for)
    return restarts


def exec_script(opts: Options, info: RankInfo, user_env: Dict[str, str], argv: List[str]) -> int:
    """``--exec``: no MPI, no scheduler, no supervision, no log files: derive the env and
    ``execvpe`` the script (it inherits the adapter's PDEATHSIG, so losing mpirun ends it).
    What is allowed: :func:`mpilaunch.rank.plan.exec_check`. Rank 0 checks the port only when
    the user gave it (the launcher sends ``--no-port-check`` otherwise: an MPI program does its
    own rendezvous)."""
    from mpilaunch.rank.agree import LOOPBACK, check_port, master_address

    plan.exec_check(opts, info)
    addr = master_address(opts.master_addr, not info.single_node) if opts.master_addr else LOOPBACK
    if info.rank == 0 and opts.port_check:
        check_port(addr, opts.master_port, info.hostname)
    cpus, numa = _cpus(opts)
    own = os.path.realpath(argv[0]) == os.path.realpath(sys.executable)
    todo = plan.exec_plan(opts, info, addr, user_env, argv, own, cpus=cpus, numa_nodes=numa)
    if todo.cpus:
        os.sched_setaffinity(0, todo.cpus)
    sys.stdout.flush()
    sys.stderr.flush()
    from mpilaunch.rank import status   # the program runs in this process: its pid is ours

    status.life(info.rank, info.hostname, "worker", "started", pid=os.getpid())
    try:
        os.execvpe(todo.argv[0], todo.argv, todo.env)
    except OSError as exc:
        raise UsageError(f"cannot exec {todo.argv[0]!r}: {exc.strerror}") from None
    return 0  # pragma: no cover


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    from mpilaunch.rank import status

    # First of all: a SIGUSR1/SIGUSR2 forwarded to the rank's process group (Open MPI, Hydra,
    # srun) is for the worker, which gets it too; the adapter must survive it and not pass it
    # on. A Python handler, not SIG_IGN: exec resets a handled signal to its default in the
    # children, but would hand them an ignored one.
    for sig in USER_SIGNALS:
        signal.signal(sig, _for_the_worker)
    hostname = os.uname().nodename     # what socket.gethostname() returns, without socket
    rank = _guess_rank(os.environ)
    status.life(rank, hostname, "adapter", "up", pid=os.getpid())   # the launcher's event record
    try:
        opts = rank_options.parse_args(argv, os.cpu_count())
        if opts.resilience is not None:   # --term-grace needs the supervised mode
            from mpilaunch.rank import resilience

            resilience.early(opts)
        # Losing our parent (mpirun/orted/prted) must end us, and through us our children.
        parent = os.getppid()
        from mpilaunch.pdeathsig import set_parent_death_signal

        set_parent_death_signal(signal.SIGTERM)
        if os.getppid() != parent:
            return 128 + signal.SIGTERM
        user_env = dict(os.environ)          # taken before agree.py tunes OMPI_MCA_btl
        from mpilaunch.rank.identity import read_identity

        info = read_identity(user_env, hostname)
        rank = info.rank
        return run(opts, info, user_env, hostname)
    except UsageError as exc:
        status.write_stderr(f"{PROG}: error: {exc}\n")
        status.emit(rank, hostname, "adapter", "error", 2, None, "self", None, [], message=str(exc))
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # agree.PeerFailed, without importing agree when not needed
        from mpilaunch.rank.agree import PeerFailed

        if isinstance(exc, PeerFailed):
            status.emit(rank, hostname, "adapter", "error", 2, None, "terminated", None, [],
                        message=exc.message)
            return 2
        raise


def leave(code: int) -> None:
    """Exit with ``code``; after a success through ``pdeathsig.exit_now`` (no finalisation).
    Any other status exits the usual way: torn down by the starter, Open MPI's daemon can drop
    the rank's last output (its status line) when the process is gone at once (seen 1 in 6 on
    a 3-rank teardown), and the finalisation's milliseconds keep that race as it always was.
    First the adapter's last word to the launcher (rank/control.py: without it, a dead adapter)."""
    link = sys.modules.get("mpilaunch.rank.control")
    if link is not None:
        link.bye()
    if code != 0:
        sys.exit(code)
    from mpilaunch.pdeathsig import exit_now

    exit_now(0)


if __name__ == "__main__":
    leave(main())
