"""Property: any value of a broadcast variable arrives byte-identical in every rank of a real job.

Values cover what Open MPI's tune file cannot carry (whitespace, quotes, ';', '$', '=', unicode,
CR/LF, long lines), which mpilaunch routes through mpirun's environment instead.
"""
import json
import os
import tempfile

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from helpers.launch import clean_env, run
from helpers.mpis import MPIRUNS
from helpers.ports import free_port

PREFIXES = ["MA_", "AWS_", "S3_", "VC_WORKER_", "SCC", "CRED", "PATHX_"]
DUMP = """\
import json, os
names = os.environ["PROP_NAMES"].split(",")
with open(os.path.join(os.environ["PROP_OUT"], "rank%s.json" % os.environ["RANK_ID"]), "w", encoding="utf-8") as fh:
    json.dump({n: os.environ.get(n) for n in names}, fh)
"""

values = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                 min_size=1, max_size=300)
variables = st.dictionaries(
    keys=st.builds(lambda p, i: f"{p}PROP{i}", st.sampled_from(PREFIXES), st.integers(0, 99)),
    values=values, min_size=1, max_size=6)

SPECIAL = {
    "MA_SPACES": "  two  spaces\tand tab ",
    "MA_QUOTES": "it's \"quoted\" `back`",
    "MA_SEMI": "a;b;c",
    "MA_DOLLAR": "$HOME ${PATH} $(id)",
    "MA_EQUALS": "a=b=c==",
    "MA_UNICODE": "héllo wörld ☃ 中文",
    "MA_NEWLINES": "line1\nline2\r\nline3\r",
    "CRED_SECRET": "sk-123/456+789==",
    "MA_LONG": "x" * 3000,
    "MA_HASH": "a#b,c",
}


def launch_and_compare(mpirun, variables, path_extra=None):
    with tempfile.TemporaryDirectory() as out:
        script = os.path.join(out, "dump.py")
        with open(script, "w") as fh:
            fh.write(DUMP)
        names = sorted(variables) + ["PATH"]
        env = clean_env(PROP_OUT=out, PROP_NAMES=",".join(names), **variables)
        if path_extra:
            env["PATH"] = env["PATH"] + ":" + path_extra
        proc = run(["--mpirun", mpirun, "-np", "2", "--no-scheduler", "--tail_worker_log", "none",
                    "--master_port", free_port(),
                    "--log_dir", out, script], env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        expected = {n: env[n] for n in names}
        for rank in range(2):
            with open(os.path.join(out, f"rank{rank}.json"), encoding="utf-8") as fh:
                seen = json.load(fh)
            assert seen == expected, f"rank {rank}"


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_special_values_and_3000_byte_path(mpirun):
    launch_and_compare(mpirun, SPECIAL, path_extra="/opt/" + "p" * 3000)


@pytest.mark.parametrize("mpirun", MPIRUNS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(variables=variables)
def test_arbitrary_values_arrive_byte_identical(mpirun, variables):
    launch_and_compare(mpirun, variables)
