"""Which processes run inside which test host, in one pass over /proc: a host is its network
namespace (``/run/netns/<name>``), and a process is inside it when its ``/proc/<pid>/ns/net``
is the same namespace.  One pass instead of one ``ip netns pids`` per host (64 hosts: 64
processes, each scanning /proc itself)."""
import os

NETNS_DIR = "/run/netns"


def _ns_id(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def pids_by_netns(names):
    """{name: [pid, ...]} for the given namespace names (absent ones map to [])."""
    want = {}
    for name in names:
        ident = _ns_id(os.path.join(NETNS_DIR, name))
        if ident is not None:
            want[ident] = name
    out = {name: [] for name in names}
    if not want:
        return out
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            name = want.get(_ns_id("/proc/%s/ns/net" % entry))
            if name is not None:
                out[name].append(int(entry))
    return out


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def is_zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return True
    return data[data.rindex(")") + 2:].split()[0] == "Z"
