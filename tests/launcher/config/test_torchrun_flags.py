"""torchrun 2.13's whole command line (mpilaunch/config/torchrun.py): every flag of torch's own
parser (``torch.distributed.run.get_args_parser()``) is decided here, with a meaning or a
one-line refusal (exit 2, nothing started), in every spelling, and read from ``PET_<NAME>`` as
torchrun reads it (flag > variable > default). A torchrun flag this table has not decided fails
the walk until it is."""
import subprocess
import sys

import pytest

from helpers.launch import build_config
from mpilaunch.config import options, torchrun
from mpilaunch.errors import UsageError

torch_run = pytest.importorskip("torch.distributed.run")


def build(argv, env, tmp_path):
    return build_config(argv, env, tmp_path, "import torch\n")


def torch_flags():
    """(dest, option strings) of every flag of torch's torchrun parser."""
    return [(a.dest, tuple(a.option_strings)) for a in torch_run.get_args_parser()._actions
            if a.option_strings and a.dest != "help"]


def test_every_torchrun_flag_is_decided_in_every_spelling():
    parser = options.parser()
    ours = {f: a.dest for a in parser._actions for f in a.option_strings}
    undecided = [(d, flags) for d, flags in torch_flags() if d not in torchrun.TORCHRUN_DESTS]
    assert undecided == [], f"new torchrun flags: decide each in config/torchrun.py: {undecided}"
    for dest, flags in torch_flags():
        for flag in flags:
            want = torchrun.TORCHRUN_DESTS[dest]   # None: another part's row, any dest
            assert flag in ours and want in (None, ours[flag]), (flag, ours.get(flag))


# a value torchrun takes for each flag that takes one; each must be taken or refused in one line
VALUES = {"nnodes": "1", "nproc_per_node": "2", "rdzv_backend": "c10d",
          "rdzv_endpoint": "localhost:0", "rdzv_id": "j1", "rdzv_conf": "join_timeout=60",
          "max_restarts": "1", "monitor_interval": "5", "start_method": "spawn",
          "event_log_handler": "null", "role": "trainer", "log_dir": "logs", "redirects": "3",
          "tee": "3", "local_ranks_filter": "0", "duplicate_stdout_filters": "a,b",
          "duplicate_stderr_filters": "a", "node_rank": "0", "master_addr": "127.0.0.1",
          "master_port": "0", "local_addr": "127.0.0.1", "logs_specs": "x",
          "numa_binding": "node", "signals_to_handle": "SIGTERM,SIGUSR1",
          "shutdown_timeout": "15"}


@pytest.mark.parametrize("dest, flags", torch_flags(), ids=[d for d, _ in torch_flags()])
def test_every_torchrun_flag_is_taken_or_refused_in_one_line(dest, flags, tmp_path):
    argv = [flags[-1]] + ([VALUES[dest]] if dest in VALUES else [])
    if dest == "module":
        argv = []   # the switch's meaning: the script is a module (test_module_spellings)
    try:
        build(argv, {}, tmp_path)
    except UsageError as err:
        text = str(err)
        assert dest in torchrun.REFUSED and "\n" not in text and text.startswith(f"{flags[0]}="), text


def test_refusals_say_why_and_what_to_use(tmp_path):
    for argv, message in (
            (["--logs-specs", "x"], "--logs-specs='x': a torchrun plugin (an entry point of torchrun.logs_specs) mpilaunch does not load: every worker logs to LOG_DIR/worker_<rank>.log; --log-dir, --redirects, --tee and --local-ranks-filter choose the rest"),
            (["--duplicate-stdout-filters", "a"], "--duplicate-stdout-filters='a': copies matching console lines to a file of torchrun's: every worker's whole output is in LOG_DIR/worker_<rank>.log already; grep it"),
            (["--event-log-handler", "dynamic_rendezvous"], "--event-log-handler='dynamic_rendezvous': a torch events plugin handler mpilaunch does not load; its own record of the job's events is LOG_DIR/events.jsonl (docs/EVENTS.md); give null or leave it out"),
            (["--numa-binding", "socket"], "--numa-binding='socket': only node is a binding mpilaunch has (each worker's CPUs and memory on its NUMA node: --bind_numa True); for CPUs give --bind_core, for other NUMA layouts --bind_numa's JSON"),
            (["--start-method", "thread"], "--start-method='thread': give one of spawn, fork, forkserver"),
            (["--rdzv-conf", "join_timeout=x"], "--rdzv-conf='join_timeout=x': join_timeout='x': give a number > 0"),
            (["--rdzv-conf", "colour=red"], "--rdzv-conf='colour=red': 'colour=red' is not KEY=VALUE with a key of torch's rendezvous (timeout, join_timeout, read_timeout, last_call_timeout, close_timeout, heartbeat_timeout, keep_alive_interval, keep_alive_max_attempt, is_host, use_libuv, store_type, local_addr)"),
            (["--redirects", "4"], "--redirects='4': give 0 (none), 1 (stdout), 2 (stderr), 3 (both), or LOCAL_RANK:N,... such as 0:1,1:2"),
            (["--tee", "0-1"], "--tee='0-1': give 0 (none), 1 (stdout), 2 (stderr), 3 (both), or LOCAL_RANK:N,... such as 0:1,1:2"),
            (["--signals-to-handle", "SIGFOO"], "--signals-to-handle='SIGFOO': SIGFOO is not a signal name; give names such as SIGTERM,SIGUSR1"),
            (["--shutdown-timeout", "5", "--term-grace", "9"], "--shutdown-timeout=5 and --term-grace=9 disagree; give one"),
    ):
        with pytest.raises(UsageError) as err:
            build(argv, {}, tmp_path)
        assert str(err.value) == message


def test_a_refused_flag_starts_nothing(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mpilaunch", "--logs-specs", "x", "-np", "1",
                          "--log_dir", str(tmp_path / "logs"), "train.py"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.startswith("mpilaunch: error: --logs-specs='x': a torchrun plugin")
    assert not (tmp_path / "logs").exists()


def test_per_worker_flags_reach_the_ranks(tmp_path):
    cfg = build(["-H", "a:2", "--role", "trainer", "--signals-to-handle", "sigterm,SIGUSR1",
                 "--redirects", "1:2,0:1", "--tee", "3", "--local-ranks-filter", "1,0",
                 "--virtual-local-rank"], {}, tmp_path)
    assert cfg.torchrun == ("role=trainer;signals=SIGTERM,SIGUSR1;redirects=0:1,1:2;"
                            "filter=0,1;vlr=1")
    from mpilaunch.backends import rankcmd

    cmd = rankcmd.rank_command(cfg)
    assert cmd[cmd.index("--torchrun") + 1] == cfg.torchrun
    assert build(["--tee", "3", "--redirects", "0", "--role", "default"], {}, tmp_path).torchrun is None


def test_meanings_of_the_other_flags(tmp_path):
    cfg = build(["--shutdown-timeout", "15", "--numa-binding", "node", "--rdzv-conf",
                 "join_timeout=60,read_timeout=30", "--local-addr", "10.0.0.1",
                 "--start-method", "fork", "--event-log-handler", "null"], {}, tmp_path)
    assert cfg.resilience.term_grace == 15 and cfg.resilience.stop_grace == 15
    assert cfg.bind_numa == "True"


def test_nnodes_min_max_runs_on_the_hosts_given_and_shrinks_down_to_min(tmp_path):
    cfg = build(["-H", "a:1,b:1,c:1", "--nnodes", "2:4", "--max-restarts", "2"], {}, tmp_path)
    assert (cfg.np, cfg.resilience.min_hosts) == (3, 2)
    assert build(["-H", "a:1,b:1", "--nnodes", "1:4"], {}, tmp_path).resilience.min_hosts is None
    cfg = build(["-H", "a:1,b:1", "--nnodes", "1:4", "--max-restarts", "1", "--min-hosts", "2"],
                {}, tmp_path)
    assert cfg.resilience.min_hosts == 2      # --min-hosts given wins


@pytest.mark.parametrize("argv", [["-m", "pkg.mod", "--lr", "1"], ["--module", "pkg.mod", "--lr", "1"],
                                  ["-mpkg.mod", "--lr", "1"]])
def test_module_spellings(argv):
    ns = options.parser().parse_args(argv)
    assert (ns.module, ns.script, ns.script_args) == ("pkg.mod", None, ["--lr", "1"])


def test_every_flag_from_its_pet_variable_flag_first(tmp_path):
    env = {"PET_MAX_RESTARTS": "2", "PET_ROLE": "kf", "PET_LOCAL_RANKS_FILTER": "0",
           "PET_REDIRECTS": "3", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "localhost:0",
           "PET_STANDALONE": "1", "PET_SHUTDOWN_TIMEOUT": "7", "PET_NNODES": "1",
           "PET_RUN_PATH": "1"}
    cfg = build([], env, tmp_path)
    assert cfg.resilience.max_restarts == 2 and cfg.resilience.stop_grace == 7
    assert cfg.torchrun == "role=kf;redirects=3;filter=0"
    assert cfg.master_addr == "localhost"
    cfg = build(["--max-restarts", "0", "--role", "mine"], env, tmp_path)
    assert cfg.resilience.max_restarts == 0 and cfg.torchrun.startswith("role=mine;")
    with pytest.raises(UsageError) as err:
        build([], {"PET_MAX_RESTARTS": "x"}, tmp_path)
    assert str(err.value) == "PET_MAX_RESTARTS='x': not a whole number; give a whole number between 0 and 1000"
    with pytest.raises(UsageError) as err:
        build([], {"PET_STANDALONE": "yes"}, tmp_path)
    assert str(err.value) == "PET_STANDALONE='yes': give 1 or 0"


def test_pet_module_makes_the_script_a_module():
    from types import SimpleNamespace

    args = SimpleNamespace(module=None, script="pkg.mod", no_python=False)
    torchrun.apply_pet(args, {"PET_MODULE": "1"}, options.BY_DEST)
    assert (args.module, args.script) == ("pkg.mod", None)
