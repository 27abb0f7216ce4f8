"""The launcher -> adapter contract (mpilaunch/rank/flags.py): every flag the launcher can
write is read back by the adapter as it was meant, a flag the table has but a writer or the
reader does not handle fails here, and docs/ARCHITECTURE.md shows the table."""
import os
import re
from unittest import mock

import pytest

from helpers import REPO
from mpilaunch.backends import rankcmd
from mpilaunch.config.launchconfig import LaunchConfig
from mpilaunch.rank import flags, options
from mpilaunch.rank.resilience import ResilienceFlags

PY = "/usr/bin/python3"
SPEC = "4;exact;localhost:4"
ATTEMPT = (2, 3, 2.5, 60.0, SPEC, 4242, 3)    # attempt_flags(restart_count, max_restarts, ...)


def full_config(no_python=False):
    """A LaunchConfig with every field the rank command reads set so that its flag is written
    (--no-python and --python exclude each other: one config for each)."""
    base = LaunchConfig(**dict.fromkeys(LaunchConfig._fields))
    return base._replace(
        python=PY, exec_mode=True, log_dir="/logs", worker_log_name="w_{rank}.log",
        tail_worker_log="0,3", master_addr="10.0.0.1", master_port=29500, cluster_time_out=77,
        bind_core="True", visible_devices="1,3", scheduler=False, port_check=False,
        no_python=no_python, module="pkg.mod", script=None, script_args=("--lr", "0.1"),
        bind_numa='{"device0":[0]}', sim_level=1, sim_rank_id=3, sim_world=8,
        rank_table_file="/rt.json", rank_extra=tuple(rankcmd.attempt_flags(*ATTEMPT)),
        run_id="job-1", monitor_interval=4.0, torchrun="role=r;filter=0")


# what the adapter must read from full_config(no_python) (vars of the parsed namespace)
def expected(no_python):
    return {
        "exec_": True, "log_dir": "/logs", "worker_log_name": "w_{rank}.log",
        "tail_worker_log": "0,3", "master_addr": "10.0.0.1", "master_port": "29500",
        "cluster_time_out": "77", "bind_core": "True", "visible_devices": "1,3",
        "no_scheduler": True, "no_port_check": True, "no_python": no_python,
        "python": None if no_python else PY, "restart_count": "2", "max_restarts": "3",
        "term_grace": "2.5", "stall_timeout": "60", "expect_ranks": SPEC, "in_place": "4242", "in_place_no_progress": "3",
        "module": True,
        "scheduler_grace": "300", "bind_numa": '{"device0":[0]}', "sim_level": "1",
        "sim_rank_id": "3", "sim_world": "8", "rank_table_file": "/rt.json", "run_id": "job-1",
        "monitor_interval": "4", "torchrun": "role=r;filter=0", "command": []}


def adapter_argv(cfg):
    """The flags of the rank command, between the interpreter's entry and '--'."""
    cmd = rankcmd.rank_command(cfg, launcher_python=PY)
    assert cmd[:3] == [PY, "-S", rankcmd.BOOT]
    return cmd[3:cmd.index("--")]


@pytest.mark.parametrize("no_python", [False, True])
def test_every_written_flag_round_trips(no_python):
    cfg = full_config(no_python)
    argv = adapter_argv(cfg)
    fast = options._fast(argv)
    assert fast is not None, "the launcher's own spelling must take the fast path"
    assert vars(fast) == vars(options._parser().parse_args(argv)) == expected(no_python)
    opts = options.parse_args(argv + ["--", "pkg.mod", "--lr", "0.1"], 8)
    assert (opts.master_port, opts.cluster_time_out, opts.visible_devices, opts.tail) == (
        29500, 77, ("1", "3"), frozenset({0, 3}))
    assert (opts.exec_, opts.module, opts.port_check, opts.no_scheduler) == (True, True, False, True)
    assert opts.resilience == ResilienceFlags(2, 3, 2.5, 60.0, SPEC, 4242, 3)
    assert opts.command == ["pkg.mod", "--lr", "0.1"]
    assert (opts.numa, opts.sim_level, opts.sim_rank_id, opts.sim_world, opts.rank_table_file,
            opts.run_id, opts.monitor) == ('{"device0":[0]}', 1, 3, 8, "/rt.json", "job-1", 4.0)


def unwritten(table):
    """Rows with a writer that the writer, given every field set, does not write (or fails
    on): each row checked alone in the table, so a failure names its flag."""
    bad = []
    for f in table:
        if f.writer == flags.ADAPTER:
            continue
        with mock.patch.object(flags, "FLAGS", (f,)):
            written = []
            try:
                extra = rankcmd.attempt_flags(*ATTEMPT)
                for no_python in (False, True):
                    cfg = full_config(no_python)._replace(rank_extra=tuple(extra))
                    written += rankcmd.rank_command(cfg, launcher_python=PY)
            except (AttributeError, KeyError, TypeError, ValueError):
                pass
        if f.name not in written or f.writer not in (flags.CONFIG, flags.ATTEMPT):
            bad.append(f.name)
    return bad


class _Reads:
    """A parsed namespace that records which attributes parse_args reads."""

    def __init__(self, ns):
        self.ns, self.read = ns, set()

    def __getattr__(self, name):
        self.read.add(name)
        return getattr(self.ns, name)


def unread(table, argv):
    """Rows whose value parse_args never looks at (given ``argv``, the launcher's flags)."""
    seen = []
    real_fast = options._fast

    def fast(a):
        seen.append(_Reads(real_fast(a)))
        return seen[-1]

    with mock.patch.object(flags, "FLAGS", table), \
            mock.patch.object(flags, "BY_NAME", {f.name: f for f in table}), \
            mock.patch.object(options, "_fast", fast):
        options.parse_args(argv + ["--", "pkg.mod"], 8)
    return [f.name for f in table if f.dest not in seen[0].read]


def test_every_flag_is_written_and_read():
    assert unwritten(flags.FLAGS) == []
    assert unread(flags.FLAGS, adapter_argv(full_config())) == []


@pytest.mark.parametrize("planted, gaps", [
    # a flag the table declares but no LaunchConfig field feeds, nor parse_args reads
    (flags.Flag("--new-thing", "new_thing", flags.TEXT, "X", None, "new", flags.CONFIG,
                "new_thing", flags.SET), ["--new-thing"]),
    # an attempt flag attempt_flags has no argument for
    (flags.Flag("--new-attempt", "new_attempt", flags.WHOLE, "N", None, "new", flags.ATTEMPT,
                "new_attempt", flags.GIVEN), ["--new-attempt"]),
    # written from a real field, but the adapter ignores it
    (flags.Flag("--tail-again", "tail_again", flags.TEXT, "SPEC", None, "new", flags.CONFIG,
                "tail_worker_log"), []),
])
def test_a_flag_nobody_handles_is_caught(planted, gaps):
    argv = adapter_argv(full_config())
    table = flags.FLAGS + (planted,)
    assert unwritten(table) == gaps
    assert unread(table, argv) == [planted.name]


def test_written_order_is_the_table_order():
    """Attempt flags (cfg.rank_extra) stand where the table's attempt rows do."""
    argv = adapter_argv(full_config())
    names = [a for a in argv if a in flags.BY_NAME]
    table = [f.name for f in flags.FLAGS if f.name in names]
    assert names == table


def test_architecture_section_is_the_flag_table():
    text = open(os.path.join(REPO, "docs", "ARCHITECTURE.md"), encoding="utf-8").read()
    m = re.search(r"<!-- rank-flags -->\n(.*?)<!-- /rank-flags -->", text, re.S)
    assert m, "docs/ARCHITECTURE.md has no rank-flags block"
    assert m.group(1) == flags.markdown(), (
        "ARCHITECTURE's rank command section is stale: python3 -m mpilaunch.rank.flags")
