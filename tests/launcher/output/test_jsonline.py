"""mpilaunch/output/jsonline.py: the event record's lines and the ranks' status lines, written
and read by _json's C encoder and scanner, are exactly what json.dumps and json.loads make of
them (a launch never loads the json package: tests/launcher/test_launcher_imports.py)."""
import json
import pathlib

import pytest

from mpilaunch.output import jsonline
from mpilaunch.output.summary import parse_status_line


@pytest.mark.parametrize("obj", [
    {"v": 1, "t": 1796414624.184123, "kind": "x", "argv": ["a", "\u00e9", "\n\"\\\u2028"],
     "nested": {"p": pathlib.Path("/x"), "n": None, "b": True, "f": -0.0, "big": 1e300,
                "nan": float("nan"), "tuple": (1, 2), 3: "int key"}},
    "text", 5, [], {}])
def test_a_line_is_written_exactly_as_json_dumps_writes_it(obj):
    assert jsonline.dumps(obj) == json.dumps(obj, ensure_ascii=False, separators=(",", ":"),
                                             default=str)


@pytest.mark.parametrize("text", [
    '{"v":1,"rank":0,"host":"vm","role":"worker","event":"exit","code":null,'
    '"tail":["a\\n","\\u00e9"],"t":1796414624.184,"pid":19727}',
    ' {"a": [1, 2.5e3, -0.0, true, false, null, NaN, Infinity, -Infinity]} \n',
    '[]', '"x"', '5'])
def test_a_line_is_read_exactly_as_json_loads_reads_it(text):
    assert repr(jsonline.loads(text)) == repr(json.loads(text))


@pytest.mark.parametrize("text", ['', '   ', '{', '{"a":1} x', '{"a":1}{}', "{'a':1}", '{"a":01}'])
def test_what_json_loads_refuses_is_refused(text):
    with pytest.raises(ValueError):
        jsonline.loads(text)


def test_a_broken_status_line_is_no_event():
    assert parse_status_line('@@mpilaunch {"rank": 1') is None
