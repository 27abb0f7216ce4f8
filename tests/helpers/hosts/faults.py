"""Host loss on purpose, and recovery: kill a host's sshd, crash the host, take its
link down/up, (re)start its sshd."""
import os

from . import netns, proc, sshd, state


def kill_sshd(prefix, i):
    """Kill host i's listening sshd only (sessions already open keep running, as when
    a real sshd dies).  New ssh connections to the host are then refused."""
    with state.lock():
        st = state.load(prefix)
        rec = state.sshd_record(st, i)
        if proc.alive(rec["pid"], rec.get("starttime")):
            proc.kill_all([rec["pid"]])
        proc.reap([rec["pid"]])


def crash(prefix, i):
    """Host i 'loses power': kill every process inside its namespace (sshd, sessions,
    daemons, ranks).  The address stays (connections are refused, not dropped)."""
    with state.lock():
        st = state.load(prefix)
        rec = state.sshd_record(st, i)
        roots = [rec["pid"]] if proc.alive(rec["pid"], rec.get("starttime")) else []
        victims = roots + proc.descendants(roots)
        victims += [p for p in netns.netns_pids(rec["netns"]) if p not in victims]
        proc.kill_all(victims, grace=0.0)
        proc.reap([rec["pid"]])
        proc.drop_session_dirs(victims)   # a rebooted host's /tmp would not have them either


def start_sshd(prefix, i):
    """(Re)start host i's sshd if it is not running; returns its pid."""
    with state.lock():
        st = state.load(prefix)
        rec = state.sshd_record(st, i)
        if proc.alive(rec["pid"], rec.get("starttime")):
            return rec["pid"]
        sd = st["state_dir"]
        ns, addr, port = sshd.layout(st, i)
        p = (sshd.spawn_sshd(prefix, i, sd, netns.host_name(prefix, i), ns)
             if ns != netns.netns_name(prefix, i) else
             sshd.spawn_sshd(prefix, i, sd, netns.host_name(prefix, i)))
        rec.update(pid=p.pid, starttime=proc.starttime(p.pid))
        state.write_json(state.state_path(prefix), st)
        sshd.wait_listening(addr, port, p, os.path.join(sd, "sshd-%d.log" % i))
        rec["starttime"] = proc.starttime(p.pid)
        state.write_json(state.state_path(prefix), st)
        state.update_hosts_json(st, i, p.pid)
        return p.pid


def set_link(prefix, i, up):
    """Take host i's link down (packets silently lost: connects hang, open TCP
    connections stall, as with a pulled cable) or bring it back up."""
    st = state.load(prefix)
    state.sshd_record(st, i)
    netns.set_link(prefix, i, up)
