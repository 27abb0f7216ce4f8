"""What the deep check's agent (mpilaunch/check/agent.py) reports of its host: the kernel's
boot id (hosts with the same one share a machine), the accelerators it shows, the CPU quota
of its cgroup, the interface of a local address. Standard library only: this source is sent
to every host ahead of the agent's (check/deep.py), and imported by the agent in tests."""
import os
import socket
import subprocess


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return socket.gethostname()


def devices() -> "dict[str, object]":
    """What accelerators this host shows: Ascend device nodes, nvidia-smi's GPUs."""
    out: dict[str, object] = {}   # davinci / nvidia: device numbers; nvidia_err: why none
    try:
        ids = sorted(int(n[7:]) for n in os.listdir("/dev")
                     if n.startswith("davinci") and n[7:].isdigit())
        if ids:
            out["davinci"] = ids
    except OSError:
        pass
    for d in os.environ.get("PATH", "").split(os.pathsep):
        smi = os.path.join(d or ".", "nvidia-smi")
        if os.access(smi, os.X_OK):
            try:
                text = subprocess.run([smi, "-L"], capture_output=True, text=True,
                                      timeout=5).stdout
                out["nvidia"] = [i for i, ln in enumerate(
                    ln for ln in text.splitlines() if ln.startswith("GPU "))]
            except (OSError, subprocess.SubprocessError) as exc:
                out["nvidia_err"] = str(exc)
            break
    return out


def cpu_limit() -> "tuple[float | None, str]":
    """(CPUs the cgroup cpu controller lets this process use, where that was read), or
    (None, "") without a quota: the lowest cfs quota / period of its cgroup and every parent
    (v1 cpu.cfs_quota_us, v2 cpu.max)."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = [ln.rstrip("\n").split(":", 2) for ln in f]
    except OSError:
        return None, ""
    best: tuple[float | None, str] = (None, "")
    for _, ctrl, path in (ln for ln in lines if len(ln) == 3):
        v1 = "cpu" in ctrl.split(",")
        if not v1 and ctrl != "":
            continue
        root = "/sys/fs/cgroup/" + (ctrl if v1 else "")
        if v1 and not os.path.isdir(root):
            root = "/sys/fs/cgroup/cpu,cpuacct" if os.path.isdir("/sys/fs/cgroup/cpu,cpuacct") else root
        while True:
            d = os.path.join(root, path.lstrip("/"))
            try:
                if v1:
                    with open(os.path.join(d, "cpu.cfs_quota_us")) as f:
                        quota = int(f.read())
                    with open(os.path.join(d, "cpu.cfs_period_us")) as f:
                        period = int(f.read())
                    src = "%s/cpu.cfs_quota_us=%d per %d" % (d, quota, period)
                else:
                    with open(os.path.join(d, "cpu.max")) as f:
                        q, per = f.read().split()
                    quota, period = (-1 if q == "max" else int(q)), int(per)
                    src = "%s/cpu.max=%s %d" % (d, q, period)
                if quota > 0 and (best[0] is None or quota / period < best[0]):
                    best = (quota / period, src)
            except (OSError, ValueError):
                pass
            if path in ("/", ""):
                break
            path = os.path.dirname(path.rstrip("/")) or "/"
    return best


def ifname(addr: str) -> str:
    """The interface that holds local address ``addr`` (SIOCGIFADDR over every interface;
    an IPv6 address from /proc/net/if_inet6)."""
    import fcntl
    import struct

    if ":" in addr:
        want = socket.inet_pton(socket.AF_INET6, addr).hex()
        try:
            with open("/proc/net/if_inet6") as fh:
                for line in fh:
                    f = line.split()
                    if len(f) >= 6 and f[0] == want:
                        return f[5]
        except OSError:
            pass
        return ""

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                req = struct.pack("256s", name.encode()[:15])
                got = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])
            except OSError:
                continue
            if got == addr:
                return name
    finally:
        s.close()
    return ""
