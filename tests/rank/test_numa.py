"""--bind_numa: msrun's three forms (True, a dict, a JSON file, also msrun 2.x's "bind_config"
schema), the plan on fake multi-node topologies read from sysfs-shaped directories, the
launcher's one-line refusals, and real workers on this machine (one NUMA node): their
Cpus_allowed_list and the memory policy /proc/<pid>/numa_maps shows, bound through
sched_setaffinity + set_mempolicy (no numactl here) or a numactl found on PATH."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from mpilaunch.errors import UsageError
from mpilaunch.rank.binding import numabind
from mpilaunch.rank.binding.affinity import (AUTO, NumaBind, NumaEntry, check_numa_nodes,
                                     parse_bind_numa, plan_numa, read_numa_topology)

from helpers.launch import clean_env, mpilaunch_argv
from helpers.ports import free_port


def sysfs(tmp_path, nodes):
    """A sysfs-shaped node directory: {id: "cpulist text"} -> its path."""
    root = tmp_path / "node"
    root.mkdir()
    for n, cpus in nodes.items():
        (root / f"node{n}").mkdir()
        (root / f"node{n}" / "cpulist").write_text(cpus + "\n")
    (root / "online").write_text("0-%d\n" % max(nodes))     # not a node: ignored
    return str(root)


# --------------------------------------------------------------------------- forms

def test_true_false_and_the_dict_form():
    assert parse_bind_numa(None) is None and parse_bind_numa("False") is None
    assert parse_bind_numa("True") == AUTO
    assert parse_bind_numa('{"device0": [0], "device1": ["1"], "device2": ["0-1"], "scheduler": 1}') == {
        "device0": NumaEntry(None, [0], [0]), "device1": NumaEntry(None, [1], [1]),
        "device2": NumaEntry(None, [0, 1], [0, 1]), "scheduler": NumaEntry(None, [1], [1])}


def test_a_json_file_and_msruns_bind_config_schema(tmp_path):
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"device0": [1]}))
    assert parse_bind_numa(str(plain)) == {"device0": NumaEntry(None, [1], [1])}
    schema = tmp_path / "bind.json"
    schema.write_text(json.dumps({
        "bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"},
        "bind_cpu": {"device0": {"main": "0-3"}, "device1": {"main": "4-7"}},
        "bind_memory": {"device0": "0", "device1": "1"}}))
    assert parse_bind_numa(str(schema)) == {"device0": NumaEntry([0, 1, 2, 3], None, [0]),
                                            "device1": NumaEntry([4, 5, 6, 7], None, [1])}
    by_node = {"bind_config": {"bind_cpu_mode": "numa"}, "bind_cpu": {"device0": "1"}}
    assert parse_bind_numa(json.dumps(by_node)) == {"device0": NumaEntry(None, [1], None)}


FIX = ('give True, False, a dict like {"device0":[0],"device1":[1]}, or a JSON file with one '
       '(or with msrun\'s "bind_config")')


@pytest.mark.parametrize("raw,why", [
    ("maybe", "cannot read the file: No such file or directory"),
    ("[0]", "cannot read the file: No such file or directory"),
    ('{"gpu0": [0]}', "key 'gpu0' is neither \"scheduler\" nor \"device<ID>\""),
    ('{"device0": []}', "device0: no NUMA node given"),
    ('{"device0": ["one"]}', "device0: 'one' is not a CPU range like \"0-3\""),
    ('{"device0": [0', "not JSON (Expecting ',' delimiter: line 1 column 15 (char 14))"),
    ('{"bind_config": {"bind_cpu_mode": "core"}}', "bind_cpu_mode 'core' is not cpu, numa or none"),
    ('{"bind_config": {"bind_cpu_mode": "cpu"}, "bind_cpu": {"device0": "0-3"}}',
     'bind_cpu.device0: give {"main": "0-3"} in cpu mode'),
])
def test_bad_specs_are_one_line_naming_the_flag(raw, why):
    with pytest.raises(UsageError) as err:
        parse_bind_numa(raw, "--bind_numa")
    assert str(err.value) == f"--bind_numa={raw!r}: {why}; {FIX}"


# --------------------------------------------------------------------------- plans

def test_true_spreads_local_ranks_evenly_over_the_nodes(tmp_path):
    topo = read_numa_topology(sysfs(tmp_path, {0: "0-3", 1: "4-7"}))
    assert topo == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    plan = [plan_numa(AUTO, topo, range(8), "worker", r, 4, str(r)) for r in range(4)]
    assert plan == [NumaBind([0, 1, 2, 3], [0])] * 2 + [NumaBind([4, 5, 6, 7], [1])] * 2
    assert plan_numa(AUTO, topo, range(8), "scheduler", 0, 4, "0") is None   # msrun: manual only


def test_sparse_node_ids_and_more_nodes_than_ranks(tmp_path):
    topo = read_numa_topology(sysfs(tmp_path, {0: "0-1", 2: "2-3", 5: "4-5,8"}))
    assert topo == {0: [0, 1], 2: [2, 3], 5: [4, 5, 8]}
    assert [plan_numa(AUTO, topo, range(9), "worker", r, 2, "0").mem_nodes for r in range(2)] == [[0], [2]]
    assert [plan_numa(AUTO, topo, range(9), "worker", r, 6, "0").mem_nodes
            for r in range(6)] == [[0], [0], [2], [2], [5], [5]]


def test_the_dict_binds_by_device_and_the_scheduler_only_by_its_key(tmp_path):
    topo = read_numa_topology(sysfs(tmp_path, {0: "0-3", 1: "4-7"}))
    spec = parse_bind_numa('{"device0": [1], "device3": [0], "scheduler": [0]}')
    assert plan_numa(spec, topo, range(8), "worker", 0, 2, "3") == NumaBind([0, 1, 2, 3], [0])
    assert plan_numa(spec, topo, range(8), "worker", 1, 2, "0") == NumaBind([4, 5, 6, 7], [1])
    assert plan_numa(spec, topo, range(8), "worker", 1, 2, "1") is None      # no key: unbound
    assert plan_numa(spec, topo, range(8), "scheduler", 0, 2, "0") == NumaBind([0, 1, 2, 3], [0])
    # only the CPUs this rank may use
    assert plan_numa(spec, topo, [2, 3, 6], "worker", 0, 2, "0") == NumaBind([6], [1])
    cpu_mode = parse_bind_numa(json.dumps({"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"},
                                           "bind_cpu": {"device0": {"main": "1,3"}},
                                           "bind_memory": {"device0": "1"}}))
    assert plan_numa(cpu_mode, topo, range(8), "worker", 0, 1, "0") == NumaBind([1, 3], [1])


def test_a_node_the_host_lacks_is_named(tmp_path):
    topo = read_numa_topology(sysfs(tmp_path, {0: "0-3", 1: "4-7"}))
    spec = parse_bind_numa('{"device0": [2]}')
    with pytest.raises(UsageError) as err:
        plan_numa(spec, topo, range(8), "worker", 0, 1, "0")
    assert str(err.value) == "--bind-numa: device0: NUMA node 2 does not exist (this host has node(s) 0,1)"
    with pytest.raises(UsageError) as err:
        check_numa_nodes(spec, topo, "--bind_numa")
    assert str(err.value) == "--bind_numa: device0: NUMA node 2 does not exist (this host has node(s) 0,1)"
    with pytest.raises(UsageError) as err:
        plan_numa(parse_bind_numa('{"device0": [1]}'), topo, [0, 1], "worker", 0, 1, "0")
    assert "none of NUMA node(s) [1]'s CPUs may be used by this rank" in str(err.value)
    assert read_numa_topology(str(tmp_path / "none")) == {}
    assert plan_numa(AUTO, {}, range(8), "worker", 0, 1, "0") is None        # no NUMA: nothing


# --------------------------------------------------------------------------- the launcher

def run(args, tmp_path, env=None, timeout=120):
    # a free port: rank 0 checks the scheduler's port, and 8118 may be another job's
    return subprocess.run(mpilaunch_argv("--master_port", free_port(), *args),
                          env=env or clean_env(TMPDIR=str(tmp_path)),
                          cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_the_launcher_refuses_a_bad_spec_before_anything_starts(tmp_path):
    script = tmp_path / "w.py"
    script.write_text("open('started', 'w')\n")
    nodes = ",".join(map(str, sorted(read_numa_topology())))
    p = run(["-np", "2", "--bind_numa", '{"device1": [7]}', str(script)], tmp_path)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == (f"mpilaunch: error: --bind_numa: device1: NUMA node 7 does not exist "
                        f"(this host has node(s) {nodes})\n")
    p = run(["-np", "2", "--bind_numa", "nope.json", str(script)], tmp_path)
    assert p.returncode == 2 and p.stderr.startswith(
        "mpilaunch: error: --bind_numa='nope.json': cannot read the file: No such file or directory")
    assert sorted(os.listdir(tmp_path)) == ["w.py"]        # nothing ran, no run dir


WORKER = r'''
import os, sys
status = dict(l.rstrip("\n").split(":\t", 1) for l in open("/proc/self/status") if ":\t" in l)
policy = open("/proc/self/numa_maps").readline().split()[1]
print("%s %s cpus=%s policy=%s" % (os.environ.get("MS_ROLE"), os.environ["RANK"],
      status["Cpus_allowed_list"], policy), flush=True)
# "--wait-scheduler": the job's end stops the scheduler, so a worker leaves only once the
# scheduler's line is in its log
sched = os.path.join("logs", "scheduler.log")
while (sys.argv[1:] == ["--wait-scheduler"] and os.environ.get("MS_ROLE") == "MS_WORKER"
       and not (os.path.exists(sched) and os.path.getsize(sched) > 0)):
    import time
    time.sleep(0.01)
'''


def lines(tmp_path, name):
    return (tmp_path / "logs" / name).read_text().split()


def allowed():
    return subprocess.run(["grep", "Cpus_allowed_list", "/proc/self/status"], capture_output=True,
                          text=True).stdout.split()[-1]


def test_real_workers_are_bound_by_sched_setaffinity_and_set_mempolicy(tmp_path):
    """True: both local ranks on node 0 (the only one): its CPUs, memory bound to it; the
    scheduler (its own key only) stays unbound; with --bind_core the CPUs are bind_core's."""
    topo = read_numa_topology()
    if list(topo) != [0]:
        pytest.skip("written for a one-node machine")
    cpus = allowed()
    script = tmp_path / "w.py"
    script.write_text(WORKER)
    p = run(["-np", "2", "--bind_numa", "True", "--scheduler", "--log_dir", "logs", str(script),
             "--wait-scheduler"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert lines(tmp_path, "worker_0.log") == ["MS_WORKER", "0", f"cpus={cpus}", "policy=bind:0"]
    assert lines(tmp_path, "worker_1.log") == ["MS_WORKER", "1", f"cpus={cpus}", "policy=bind:0"]
    assert lines(tmp_path, "scheduler.log") == ["MS_SCHED", "0", f"cpus={cpus}", "policy=default"]
    shutil.rmtree(tmp_path / "logs")   # the next job's scheduler line is waited for afresh
    p = run(["-np", "2", "--bind_numa", '{"device0": [0], "scheduler": [0]}', "--bind_core",
             '{"device0": ["1"], "device1": ["0"]}', "--scheduler", "--log_dir", "logs", str(script),
             "--wait-scheduler"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert lines(tmp_path, "worker_0.log") == ["MS_WORKER", "0", "cpus=1", "policy=bind:0"]
    assert lines(tmp_path, "worker_1.log") == ["MS_WORKER", "1", "cpus=0", "policy=default"]
    assert lines(tmp_path, "scheduler.log")[3] == "policy=bind:0"


def test_numactl_is_used_where_it_is_found(tmp_path):
    """A numactl on PATH gets --membind and --physcpubind, then the worker (a stand-in that
    records its arguments and execs the rest, as numactl would)."""
    if not list(read_numa_topology()):
        pytest.skip("no NUMA node in sysfs")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "numactl"
    fake.write_text("#!%s\nimport os, sys\nopen(os.environ['NUMACTL_LOG'], 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                    "rest = sys.argv[sys.argv.index('--') + 1:]\nos.execvp(rest[0], rest)\n" % sys.executable)
    fake.chmod(0o755)
    script = tmp_path / "w.py"
    script.write_text(WORKER)
    env = clean_env(TMPDIR=str(tmp_path), NUMACTL_LOG=str(tmp_path / "numactl.log"),
                    PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    p = run(["-np", "1", "--bind_numa", '{"device0": [0]}', "--log_dir", "logs", str(script)],
            tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    node0 = read_numa_topology()[0]
    mine = [c for c in node0 if c in os.sched_getaffinity(0)]
    args = (tmp_path / "numactl.log").read_text().split()
    assert args[:2] == ["--membind=0", "--physcpubind=" + ",".join(map(str, mine))]
    assert args[2] == "--" and args[-1] == str(script)
    assert lines(tmp_path, "worker_0.log")[3] == "policy=default"   # the stand-in binds nothing


def test_set_membind_binds_this_process_and_refuses_a_missing_node():
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from mpilaunch.rank.binding import numabind; "
            "numabind.set_membind([0]); print(open('/proc/self/numa_maps').readline().split()[1]); "
            "numabind.set_membind([63])")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(numabind.__file__)))))
    p = subprocess.run([sys.executable, "-c", code, repo], capture_output=True, text=True, timeout=30)
    assert p.stdout.split() == ["bind:0"]
    assert "OSError: [Errno 22] set_mempolicy: Invalid argument" in p.stderr
