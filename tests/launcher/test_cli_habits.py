"""The small habits of a command-line tool: ``--version`` on every command (and as the first
line of ``--dry-run``), ``--help`` grouped as docs/OPTIONS.md's table is, its epilogue listing the
exit statuses that outcome.py decides."""
import configparser
import os
import re
import subprocess
import sys

import pytest

from helpers import REPO
from mpilaunch import __version__
from mpilaunch.config import options
from mpilaunch.output import outcome


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "mpilaunch", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd or REPO, stdin=subprocess.DEVNULL)


def test_the_version_is_the_package_metadata_version():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(REPO, "setup.cfg"))
    assert cfg["metadata"]["version"] == __version__


@pytest.mark.parametrize("command", [[], ["check"], ["job"], ["report"]])
def test_every_command_answers_version(command):
    p = _cli(*command, "--version")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"mpilaunch {__version__} (Python ")
    assert p.stdout.count("\n") == 1 and p.stderr == ""


def test_version_stops_before_anything_else_is_read():
    p = _cli("--version", "-np", "zero", "missing.py")
    assert p.returncode == 0 and p.stdout.startswith(f"mpilaunch {__version__}")


def test_dry_run_says_which_mpilaunch_made_the_command(tmp_path):
    (tmp_path / "x.py").write_text("")
    p = _cli("--dry-run", "-np", "2", "x.py", cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "# " + options.version_text()


def test_help_groups_the_options_as_the_readme_table_does():
    text = _cli("--help").stdout
    titles = [options.GROUPS[g] for g in ("hosts", "mpirun", "rank", "long", "monitor", "torchrun")]
    at = [text.index(f"\n{t}:\n") for t in titles]
    assert at == sorted(at)
    table = options.markdown_table("run")
    assert [m for m in re.findall(r"^\| \*\*(.+?)\*\* \|", table, re.M)] == titles
    # each flag sits under its group's title, in --help and in the table alike
    for o in options.OPTIONS:
        if "run" not in o.commands or o.kind in ("hidden", "version"):
            continue
        title = options.GROUPS[o.group]
        block = text[text.index(f"\n{title}:\n"):]
        nxt = [block.index(f"\n{t}:\n", 1) for t in titles if f"\n{t}:\n" in block[1:]]
        block = block[:min(nxt)] if nxt else block
        assert f"  {o.flags[0]}" in block, (o.flags[0], title)


def test_help_ends_with_the_exit_statuses_outcome_decides():
    text = _cli("--help").stdout
    tail = text[text.index("\nexit status:\n"):]
    codes = re.findall(r"^  (\S+)\s{2,}", tail, re.M)
    assert codes == ["0", "1", "2", str(outcome.STALL_STATUS), "128+N", str(outcome.LOST_HOST_STATUS), "other"]
    assert "with --max_restarts" in tail
    check = _cli("check", "--help").stdout
    assert "exit status: 0 every check passed, 1 a check failed, 2 a usage error." in check
