"""An ssh port per host: three namespace hosts whose sshds listen on ports 2201, 2202 and 2203,
at their own three addresses (``porthosts``) and behind one address (``sharedhosts``: one network
namespace, a UTS and mount namespace per sshd, as containers sharing a machine). The fixture's
ssh config gives those ports by host *name* only, so ssh to an address reaches the right sshd
only through the hostfile's ``port=``: a job whose every rank runs on its own host proves the
port reached the ssh that started it (mpilaunch/config/sshconfig.py), on both Open MPIs, MPICH
and Intel MPI. ``check --deep`` measures all three hosts behind one address.

The launcher runs inside host 1 (its UTS and network namespace), as
tests/multihost/test_hydra_multinode.py runs it: Hydra's proxies connect back to it there.
"""
import subprocess

import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.mpis import ALL, OMPI5

pytestmark = [pytest.mark.multinode, pytest.mark.slow]

WHERE = """import os, socket, time
print("WHERE", os.environ["RANK"], socket.gethostname(), os.environ["MASTER_ADDR"], flush=True)
time.sleep(0.3)
"""


def _in_host1(th, argv, timeout=180):
    h1 = th.host(0)
    return subprocess.run(["nsenter", "-t", str(h1.sshd_pid), "-u", "--", "ip", "netns", "exec",
                           h1.netns, *argv], env=clean_env(), cwd=REPO, timeout=timeout,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)


def _hostfile(th, tmp_path, form="openmpi"):
    lines = [f"{h.addr} slots=1 port={h.port}" if form == "openmpi" else f"{h.addr}:1@{h.port}"
             for h in th.hosts]
    path = tmp_path / f"hosts-{form}"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _ranks(p):
    out = {}
    for ln in p.stdout.splitlines():
        words = ln.split()
        if "WHERE" in words:
            i = words.index("WHERE")
            out[int(words[i + 1])] = (words[i + 2], words[i + 3])
    return out


def _check_placement(th, p):
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    ranks = _ranks(p)
    # rank r on host r+1 (its own UTS namespace's name), every rank told host 1's real address
    assert ranks == {r: (h.hostname, th.hosts[0].addr) for r, h in enumerate(th.hosts)}, p.stdout


@pytest.mark.parametrize("mpi", ALL)
@pytest.mark.parametrize("layout", ["porthosts", "sharedhosts"])
def test_three_hosts_three_ports(request, layout, mpi, tmp_path):
    th = request.getfixturevalue(layout)
    script = tmp_path / "where.py"
    script.write_text(WHERE)
    p = _in_host1(th, [mpi.python, "-m", "mpilaunch", "--mpirun", mpi.mpirun,
                       "--hostfile", _hostfile(th, tmp_path), "--ssh-args", f"-F {th.ssh_config}",
                       "--log_dir", str(tmp_path / "logs"), str(script)])
    _check_placement(th, p)


@pytest.mark.parametrize("form", ["hydra", "-H"])
def test_port_forms_hydra_file_and_host_list(sharedhosts, form, tmp_path):
    """``addr:N@port`` in a Hydra-form hostfile and in ``-H``, given to Open MPI 5."""
    th = sharedhosts
    script = tmp_path / "where.py"
    script.write_text(WHERE)
    hosts = (["--hostfile", _hostfile(th, tmp_path, "hydra")] if form == "hydra" else
             ["-H", ",".join(f"{h.addr}:1@{h.port}" for h in th.hosts)])
    p = _in_host1(th, [OMPI5.python, "-m", "mpilaunch", "--mpirun", OMPI5.mpirun, *hosts,
                       "--ssh-args", f"-F {th.ssh_config}", "--log_dir", str(tmp_path / "logs"),
                       str(script)])
    _check_placement(th, p)


def test_check_deep_measures_three_hosts_behind_one_address(sharedhosts, tmp_path):
    th = sharedhosts
    before = [open(h.sshd_log, errors="replace").read().count("Accepted ") for h in th.hosts]
    p = subprocess.run([OMPI5.python, "-m", "mpilaunch", "check", "--hostfile", _hostfile(th, tmp_path),
                        "--ssh-args", f"-F {th.ssh_config}", "--deep"], env=clean_env(), cwd=REPO,
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    head = [ln for ln in lines if ln.startswith("HOST ")][0].split()
    rows = {ln.split()[0]: dict(zip(head, ln.split())) for ln in lines
            if ln.startswith(th.hosts[0].addr + ":")}
    assert sorted(rows) == sorted(f"{h.addr}:{h.port}" for h in th.hosts), p.stdout
    for row in rows.values():
        assert row["SSH"] == "ok" and row["COMPUTE"].endswith("GF/s"), p.stdout
        assert row["NET"] not in ("-", "fail"), p.stdout
    after = [open(h.sshd_log, errors="replace").read().count("Accepted ") for h in th.hosts]
    assert all(a > b for a, b in zip(after, before)), (before, after)   # each sshd was used


def test_mpilaunch_job_on_three_containers_behind_one_address(sharedhosts, tmp_path):
    """``mpilaunch job`` as the platform starts it on every container: VC_WORKER_HOSTS lists one
    address three times with each container's port; worker-0 reaches the others over ssh on
    their ports and launches there; every entrypoint ends with the job's status."""
    th = sharedhosts
    script = tmp_path / "where.py"
    script.write_text(WHERE)
    vc = ",".join(f"{h.addr}@{h.port}" for h in th.hosts)
    procs = []
    for i, h in enumerate(th.hosts):
        env = clean_env(VC_WORKER_HOSTS=vc, VC_TASK_INDEX=str(i), MA_NUM_GPUS="1")
        out = open(tmp_path / f"entry{i}.log", "w")
        procs.append(subprocess.Popen(
            ["nsenter", "-t", str(h.sshd_pid), "-u", "--", "ip", "netns", "exec", h.netns,
             OMPI5.python, "-m", "mpilaunch", "job", "--wait-hosts", "60",
             "--ssh-args", f"-F {th.ssh_config}", "--master_port", "38140",
             "--log_dir", str(tmp_path / f"logs{i}"), str(script)],
            env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        out.close()
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(180))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    logs = [(tmp_path / f"entry{i}.log").read_text() for i in range(3)]
    assert codes == [0, 0, 0], "\n----\n".join(logs)
    assert "mpilaunch: 3/3 hosts ready" in logs[0]
    ranks = _ranks(subprocess.CompletedProcess([], 0, logs[0], ""))
    assert ranks == {r: (h.hostname, th.hosts[0].addr) for r, h in enumerate(th.hosts)}, logs[0]


LIVE = """import os, socket, sys, time
print("UP", os.environ["RANK"], flush=True)
open(os.path.join(sys.argv[1], "up-" + os.environ["RANK"]), "w").close()
time.sleep(120)
"""


@pytest.mark.parametrize("mpi", [m for m in ALL if m.values[0].id in ("ompi5", "mpich")])
def test_a_lost_host_with_its_own_port_is_named(porthosts, mpi, tmp_path):
    """Host 3 (sshd on 2203) crashes mid-job: the job ends 255 and the summary names that host
    (Open MPI 5 by the name its daemon reported, Hydra's proxy watch by address:port: it probes
    the port of the alias Hydra's ssh was given)."""
    from helpers.procs import wait_for

    th = porthosts
    script = tmp_path / "live.py"
    script.write_text(LIVE)
    h1, lost = th.host(0), th.hosts[2]
    argv = ["nsenter", "-t", str(h1.sshd_pid), "-u", "--", "ip", "netns", "exec", h1.netns,
            mpi.python, "-m", "mpilaunch", "--mpirun", mpi.mpirun, "--hostfile", _hostfile(th, tmp_path),
            "--ssh-args", f"-F {th.ssh_config}", "--log_dir", str(tmp_path / "logs"),   # not the cwd
            str(script), str(tmp_path)]
    p = subprocess.Popen(argv, env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: all((tmp_path / f"up-{r}").exists() for r in range(3)), 90)
        th.crash(lost)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
        th.restore(lost)
    assert p.returncode == 255, out[-2000:] + err[-3000:]
    cause = [ln for ln in err.splitlines() if "root cause:" in ln]
    names = (f"{lost.addr}:{lost.port}", f"port{lost.port}-{lost.addr.replace('.', '-')}",
             f"host {lost.hostname} ", f"host {lost.addr} ")   # Open MPI 5: its daemon's
    # reported name, or the HostName in ssh's "Connection to ... closed", whichever came first
    assert cause and any(n in cause[0] for n in names), err[-3000:]
