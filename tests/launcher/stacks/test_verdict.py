"""The odd rank out (mpilaunch/stacks/verdict.py), on real answers captured from running jobs
(tests/launcher/stacks/data/: the rank_R.txt files ``mpilaunch stacks`` wrote):

* torch_gloo: 4 ranks, rank 2 waits in load_batch before step 3's all_reduce, the others in it;
* mindspore: 2 workers + the scheduler (in rank 0's file), worker 1 waits in load_data before
  init(), worker 0 and the scheduler in init's rendezvous;
* mpi4py, mpi4py_native: 3 ranks of an mpi4py program (Open MPI 5), rank 1 waits in
  read_shard, the others in comm.allreduce; py-spy without and with --native."""
import glob
import os

from mpilaunch.stacks import verdict

DATA = os.path.join(os.path.dirname(__file__), "data")


def answers(case):
    return {int(os.path.basename(p)[5:-4]): open(p).read()
            for p in glob.glob(os.path.join(DATA, case, "rank_*.txt"))}


def hosts(n, name="vm"):
    return {r: name for r in range(n)}


def test_torch_the_stuck_rank_and_its_frame_the_others_in_all_reduce():
    assert verdict.verdict(answers("torch_gloo"), hosts(4)) == (
        "rank 2 on host vm: stuck.py:14 in load_batch; ranks 0, 1, 3 in all_reduce (torch.distributed)", [2])


def test_all_ranks_in_the_same_place():
    got = answers("torch_gloo")
    got[2] = got[0]
    assert verdict.verdict(got, hosts(4)) == (
        "all ranks in the same place: all_reduce (torch.distributed)", [])


def test_mindspore_the_stuck_worker_the_other_in_inits_rendezvous_the_scheduler_not_counted():
    got = answers("mindspore")
    assert "=== scheduler pid" in got[0] and "=== worker pid" in got[0]
    assert verdict.verdict(got, {0: "h0", 1: "h1"}) == (
        "rank 1 on host h1: ms_stuck.py:11 in load_data; rank 0 in init (mindspore.communication)", [1])


def test_mpi4py_the_call_on_the_innermost_line_and_with_native_mpi4pys_own_frame():
    want = ("rank 1 on host vm: mpi_stuck.py:12 in read_shard; ranks 0, 2 in allreduce (mpi4py)", [1])
    assert verdict.verdict(answers("mpi4py"), hosts(3)) == want
    assert verdict.verdict(answers("mpi4py_native"), hosts(3)) == want
    # rank 1's outer frame reads "total = comm.allreduce(read_shard())": an argument being
    # evaluated, not the call
    frames = verdict.parse(answers("mpi4py")[1])["worker"][0]
    assert [f.func for f in frames] == ["read_shard", "<module>"]
    assert frames[1].source == "total = comm.allreduce(read_shard())"
    assert verdict.collective_of(frames) is None


def test_ranks_that_could_not_be_read_and_ranks_that_did_not_answer_are_counted():
    got = answers("torch_gloo")
    got[3] = ("mpilaunch.rank: no stacks: py-spy is not installed here (pip install "
              "'mpilaunch[stall]', or pip install py-spy)\n")
    line, odd = verdict.verdict(got, hosts(5), missing=[4])
    assert line == ("rank 2 on host vm: stuck.py:14 in load_batch; ranks 0, 1 in all_reduce "
                    "(torch.distributed); no stacks from rank 3 (mpilaunch.rank: no stacks: py-spy "
                    "is not installed here (pip install 'mpilaunch[stall]', or pip install "
                    "py-spy)); no answer from rank 4")
    assert odd == [2]
    assert verdict.verdict({0: got[3]}, hosts(1))[1] == []


def test_many_odd_ranks_are_counted_the_first_named():
    got = answers("torch_gloo")
    many = {r: got[0] for r in range(20)}
    many.update({r: got[2] for r in range(20, 30)})
    line, odd = verdict.verdict(many, hosts(30))
    assert odd == list(range(20, 30))
    assert line == ("ranks 20, 21, 22, 23, 24, 25, 26, 27, 28, 29 elsewhere (first: rank 20 on "
                    "host vm: stuck.py:14 in load_batch); ranks 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, "
                    "11, 12, 13, 14, 15 and 4 more in all_reduce (torch.distributed)")


def test_no_collective_anywhere_the_largest_group_waits():
    one = answers("torch_gloo")[2]
    other = one.replace("stuck.py:14", "stuck.py:99")
    assert verdict.verdict({0: one, 1: one, 2: other}, hosts(3)) == (
        "rank 2 on host vm: stuck.py:99 in load_batch; ranks 0, 1 at stuck.py:14 in load_batch", [2])


def test_a_frame_is_the_users_unless_it_is_the_interpreters_or_a_packages():
    assert verdict.is_library("/usr/lib/python3.11/threading.py")
    assert verdict.is_library("/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py")
    assert not verdict.is_library("/home/u/train.py")
    assert verdict.short("/venv/lib/python3.11/site-packages/torch/nn/modules/module.py") == "torch/nn/modules/module.py"
    assert verdict.short("/home/u/train.py") == "train.py"
