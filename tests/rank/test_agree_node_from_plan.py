"""agree.node_from_plan: the node index from the launcher's plan instead of
an MPI agreement, only when the plan is "slots in order" and the starter agrees."""
from mpilaunch.rank import agree
from mpilaunch.rank.identity import RankInfo

TABLE = (("a", 2), ("b", 2), ("c", 1))


def info(rank, local_rank, local_size, size=5, node_index=None):
    return RankInfo(rank, size, local_rank, local_size, node_index, None, "h", "openmpi")


def test_every_rank_gets_its_planned_host():
    got = [agree.node_from_plan(info(r, lr, ls), (5, "exact", TABLE))
           for r, lr, ls in ((0, 0, 2), (1, 1, 2), (2, 0, 2), (3, 1, 2), (4, 0, 1))]
    assert [(i.node_index, i.num_nodes) for i in got] == [(0, 3), (0, 3), (1, 3), (1, 3), (2, 3)]
    # then the agreement needs no MPI once the launcher also gives the address
    assert not agree.needs_mpi(got[3], "10.0.0.1", 8118)
    assert agree.needs_mpi(got[3], None, 8118)


def test_anything_that_does_not_fit_leaves_the_info_alone():
    cases = [
        (info(2, 0, 2), None),                              # no plan sent
        (info(2, 0, 2), (5, "bound", TABLE)),               # the user's own mapping
        (info(2, 0, 2), (5, "size", TABLE)),                # oversubscribed
        (info(2, 0, 2), (6, "exact", TABLE)),               # another world size
        (info(2, 0, 3), (5, "exact", TABLE)),               # this host runs another count
        (info(2, 1, 2), (5, "exact", TABLE)),               # local ranks not in order
        (info(7, 0, 1, size=5), (5, "exact", TABLE)),       # beyond the table
        (info(2, 0, 2, node_index=1), (5, "exact", TABLE)), # the starter already said
        (RankInfo(2, None, None, None, None, None, "h", "pmix"), (5, "exact", TABLE)),
    ]
    for before, expect in cases:
        assert agree.node_from_plan(before, expect) is before
