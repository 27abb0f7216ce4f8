"""Hostfile parsing: both dialects, -H lists, VC_WORKER_HOSTS, and every error names file:line."""
import pytest

from mpilaunch.config import hostfile as hf
from mpilaunch.errors import UsageError

from helpers import REPO


def test_openmpi_format_with_comments_and_blank_lines(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# cluster\n\nnode-a slots=8 max_slots=16\nnode-b slots=8  # rack 2\n10.0.0.3\n")
    assert hf.read_hostfile(str(path)) == [
        hf.Host("node-a", 8, 16), hf.Host("node-b", 8, None), hf.Host("10.0.0.3", 1, None),
    ]


def test_mpich_format():
    assert hf.parse_text("a:4\nb:2\n", "f") == [hf.Host("a", 4), hf.Host("b", 2)]


def test_host_list_and_vc_worker_hosts():
    assert hf.parse_host_list("a:2,b") == [hf.Host("a", 2), hf.Host("b", 1)]
    assert hf.hosts_from_vc_worker_hosts("w0,w1,w2", 8) == [hf.Host("w0", 8), hf.Host("w1", 8), hf.Host("w2", 8)]


def test_render_normalised_hostfile():
    assert hf.render_hostfile([hf.Host("a", 2), hf.Host("b", 4, 8)]) == "a slots=2\nb slots=4 max_slots=8\n"


@pytest.mark.parametrize("text, message", [
    ("a slots=4\na slots=2\n", "f:2: host 'a' is listed twice (first at f:1)"),
    ("a slots=0\n", "f:1: slots must be at least 1, got 0"),
    ("a slots=-3\n", "f:1: slots must be at least 1, got -3"),
    ("a slots=four\n", "f:1: slots must be a whole number, got 'four'"),
    ("\na slots=2 max_slots=1\n", "f:2: max_slots=1 is smaller than slots=2"),
    ("a colour=red\n", "f:1: unknown hostfile key 'colour' (expected slots= or max_slots=)"),
    ("a 4\n", "f:1: expected key=value after the host name, got '4'"),
    ("a:0\n", "f:1: slot count must be at least 1, got 0"),
    ("a:2 b\n", "f:1: unexpected 'b' after 'a:2'"),
    ("bad;host\n", "f:1: 'bad;host' is not a valid host name"),
    ("# only a comment\n", "f: the hostfile lists no hosts"),
])
def test_errors_name_file_and_line(text, message):
    with pytest.raises(UsageError) as err:
        hf.parse_text(text, "f")
    assert str(err.value) == message


def test_missing_file_error(tmp_path):
    with pytest.raises(UsageError, match=r"hostfile .*/nope: no such file"):
        hf.read_hostfile(str(tmp_path / "nope"))


def test_host_list_errors():
    with pytest.raises(UsageError, match=r"^-H item 2: host 'a' is listed twice"):
        hf.parse_host_list("a:1,a:2")
    with pytest.raises(UsageError, match=r"^-H item 2: empty host name"):
        hf.parse_host_list("a,,b")


def test_example_hostfiles_in_the_repository_parse():
    import os
    root = os.path.join(REPO, "hostfiles")
    parsed = {name: hf.read_hostfile(os.path.join(root, name)) for name in sorted(os.listdir(root))}
    assert parsed == {
        "localhost": [hf.Host("localhost", 4)],
        "one-node": [hf.Host("node-0", 8)],
        "two-nodes": [hf.Host("node-0", 8), hf.Host("node-1", 8)],
        "two-nodes.mpich": [hf.Host("node-0", 8), hf.Host("node-1", 8)],
    }
