"""The option table (mpilaunch/config/options.py) drives argparse, precedence and the option
tables of docs/OPTIONS.md."""
import os
import re

import pytest

from mpilaunch.config import options

from helpers import REPO as ROOT


@pytest.mark.parametrize("command", ["run", "check", "job", "stacks", "top"])   # report: test_report.py
def test_the_options_page_table_is_the_option_table(command):
    text = open(os.path.join(ROOT, "docs", "OPTIONS.md"), encoding="utf-8").read()
    m = re.search(rf"<!-- options:{command} -->\n(.*?)<!-- /options:{command} -->", text, re.S)
    assert m, f"docs/OPTIONS.md has no options:{command} block"
    assert m.group(1) == options.markdown_table(command, only_own=command != "run"), (
        "docs/OPTIONS.md's option table is stale: python3 -m mpilaunch.config.options run check job "
        "report stacks top")


def test_every_flag_of_every_parser_is_in_the_table():
    table_flags = {f for o in options.OPTIONS for f in o.flags}
    for command in ("run", "check", "job"):
        p = options.parser(command)
        flags = {s for a in p._actions for s in a.option_strings} - {"-h", "--help"}
        assert flags <= table_flags
        assert {f for o in options.OPTIONS if command in o.commands for f in o.flags} == flags


def test_precedence_flag_over_variable_over_default():
    p = options.parser("run")
    env = {"SSHD_PORT": "2200", "OPENMPI_BIND_ARGS": "", "MA_NUM_GPUS": " "}
    args = p.parse_args(["--ssh-port", "22", "x.py"])
    assert options.setting(args, env, "ssh_port") == ("22", "--ssh-port")
    args = p.parse_args(["x.py"])
    assert options.setting(args, env, "ssh_port") == ("2200", "SSHD_PORT")
    assert options.setting(args, {}, "ssh_port") == (None, "default")
    # an empty OPENMPI_*_ARGS is a value (no such options); a blank number is unset
    assert options.setting(args, env, "bind_args") == ("", "OPENMPI_BIND_ARGS")
    assert options.setting(args, env, "local_worker_num") == ("1", "default")
    assert options.setting(args, {}, "master_port") == ("8118", "default")


def test_check_and_job_take_the_launch_options_and_their_own():
    check = options.parser("check").parse_args(["--timeout", "3", "-np", "2"])
    assert (check.check_timeout, check.np, check.script) == ("3", "2", None)
    job = options.parser("job").parse_args(["--wait-hosts", "9", "x.py", "--wait-hosts", "1"])
    assert (job.wait_hosts, job.script, job.script_args) == ("9", "x.py", ["--wait-hosts", "1"])
    with pytest.raises(Exception):
        options.parser("run").parse_args(["--wait-hosts", "9", "x.py"])
