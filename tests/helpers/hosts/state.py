"""The state of a set on disk: /tmp/mpilaunch-testhosts/<prefix>/ (0700) with
``state.json`` (every resource, written before/as it is created) and ``hosts.json`` (the
description for callers), plus the lock that serialises changes across processes."""
import contextlib
import fcntl
import json
import os
import re

from . import proc
from .errors import TestHostsError

BASE_DIR = "/tmp/mpilaunch-testhosts"
LOCK_PATH = os.path.join(BASE_DIR, ".lock")
PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,6}[a-z]$")


def check_prefix(prefix):
    if not PREFIX_RE.match(prefix or ""):
        raise TestHostsError(
            "bad prefix %r: 2-8 chars, [a-z][a-z0-9]*, ending in a letter (so that "
            "'<prefix><i>' names are unambiguous)" % (prefix,))


def state_dir(prefix):
    return os.path.join(BASE_DIR, prefix)


def state_path(prefix):
    return os.path.join(state_dir(prefix), "state.json")


def ensure_base_dir():
    os.makedirs(BASE_DIR, mode=0o700, exist_ok=True)
    os.chmod(BASE_DIR, 0o700)


@contextlib.contextmanager
def lock():
    """Serialise up/down across processes (block allocation, authorized_keys edits)."""
    ensure_base_dir()
    fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def set_prefixes():
    """Prefixes that have a state dir."""
    if not os.path.isdir(BASE_DIR):
        return []
    return sorted(d for d in os.listdir(BASE_DIR)
                  if os.path.isdir(os.path.join(BASE_DIR, d)))


def owner_alive(st):
    """Is the set of this state still in use?  CLI-made sets have no owner: in use
    until `down`; a session's set is stale once its owner process is gone."""
    pid = st.get("owner_pid")
    if not pid:
        return True
    return proc.alive(pid, st.get("owner_starttime"))


def load(prefix):
    """The state of a set that is up (TestHostsError if not)."""
    check_prefix(prefix)
    st = read_json(state_path(prefix))
    if st is None:
        raise TestHostsError("prefix %r is not up" % prefix)
    return st


def sshd_record(st, i):
    """The {pid, host, netns, starttime} record of host i's sshd."""
    for rec in st.get("pids") or []:
        if rec["host"] == i:
            return rec
    raise TestHostsError("host %d not in set %r" % (i, st["prefix"]))


def update_hosts_json(st, i, pid):
    """Record host i's new sshd pid in hosts.json."""
    path = os.path.join(st["state_dir"], "hosts.json")
    desc = read_json(path)
    if desc:
        for h in desc["hosts"]:
            if h["index"] == i:
                h["sshd_pid"] = pid
        write_json(path, desc)
