"""--bind-core: parsing msrun's forms and splitting CPUs among a node's processes."""
import pytest

from mpilaunch.errors import UsageError
from mpilaunch.rank.binding.affinity import AUTO, order_by_numa, parse_bind_core, plan_cpus


def test_parse_forms():
    assert parse_bind_core(None) is None
    assert parse_bind_core("False") is None
    assert parse_bind_core("True") == AUTO
    assert parse_bind_core('{"scheduler":["0-1"],"device0":["2-3"],"device1":["4-5","8"]}') == {
        "scheduler": [0, 1], "device0": [2, 3], "device1": [4, 5, 8]}
    assert parse_bind_core('{"scheduler":[],"device0":[]}') == {"scheduler": [], "device0": []}


@pytest.mark.parametrize("raw", [
    "maybe", "[1,2]", '{"scheduler":"0-1"}', '{"gpu0":["0"]}', '{"device0":["3-1"]}',
    '{"device0":["a-b"]}', '{"device0":[0]}', '{"device0":["0-999"]}', '{"device0":["1-"]}',
])
def test_bad_specs_name_the_flag(raw):
    with pytest.raises(UsageError) as err:
        parse_bind_core(raw, cpu_count=64)
    assert "--bind-core" in str(err.value)


def test_auto_split_with_scheduler_on_node0():
    cpus = list(range(8))
    plan = [plan_cpus(AUTO, cpus, [], lr, 3, True, str(lr)) for lr in range(3)]
    assert plan == [([2, 3], [0, 1]), ([4, 5], [0, 1]), ([6, 7], [0, 1])]
    # uneven: 7 CPUs over 4 processes, the scheduler (first) gets the short chunk
    assert [plan_cpus(AUTO, list(range(7)), [], lr, 3, True, "0") for lr in range(3)] == [
        ([1, 2], [0]), ([3, 4], [0]), ([5, 6], [0])]


def test_auto_split_without_scheduler():
    cpus = list(range(8))
    assert [plan_cpus(AUTO, cpus, [], lr, 2, False, "0")[0] for lr in range(2)] == [
        [0, 1, 2, 3], [4, 5, 6, 7]]


def test_auto_numa_ordering_keeps_chunks_inside_nodes():
    # interleaved numbering: node0 = even CPUs, node1 = odd CPUs
    numa = [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert order_by_numa(range(8), numa) == [0, 2, 4, 6, 1, 3, 5, 7]
    assert [plan_cpus(AUTO, list(range(8)), numa, lr, 2, False, "0")[0] for lr in range(2)] == [
        [0, 2, 4, 6], [1, 3, 5, 7]]


def test_auto_fewer_cpus_than_processes():
    assert plan_cpus(AUTO, [0, 1], [], 0, 2, True, "0") == ([0], None)
    assert plan_cpus(AUTO, [0, 1], [], 1, 2, True, "1") == ([1], None)


def test_dict_uses_device_id_and_skips_missing_or_empty():
    spec = parse_bind_core('{"scheduler":["0"],"device6":["1"],"device7":[]}')
    assert plan_cpus(spec, [], [], 0, 2, True, "6") == ([1], [0])
    assert plan_cpus(spec, [], [], 1, 2, False, "7") == (None, None)
    assert plan_cpus(spec, [], [], 0, 1, True, "0") == (None, [0])
