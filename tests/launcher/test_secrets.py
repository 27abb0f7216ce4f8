"""One secret rule everywhere (mpilaunch/contract.py): a secret-looking variable's value is never
on disk, never in an argv, and masked in the dry run, the summary and the log tail alike.
Before the rule was shared, MA_API_KEY / S3_ACCESS_KEY / MA_AUTH were written in clear to the
tune file and printed by --dry-run while log tails masked them."""
import os

import pytest

from helpers.launch import clean_env, run
from helpers.mpis import MPIRUNS
from helpers.ports import free_port

# one value per name shape the rule must catch
SECRETS = {
    "MA_API_KEY": "sekrit-api-1",
    "S3_ACCESS_KEY": "sekrit-access-2",
    "MA_AUTH": "sekrit-auth-3",
    "MA_AK": "sekrit-ak-4",
    "MA_SK": "sekrit-sk-5",
    "MA_SESSION_TOKEN": "sekrit-token-6",
    "MA_DB_PASSWORD": "sekrit-password-7",
    "AWS_SECRET_ACCESS_KEY": "sekrit-secret-8",
    "CRED_BLOB": "sekrit-cred-9",
    "MA_PRIVATE_BLOB": "sekrit-private-10",
}

SCRIPT = """\
import os, sys
names = %r
if os.environ.get("MS_ROLE") == "MS_SCHED":
    sys.exit(0)
bad = [n for n, v in names.items() if os.environ.get(n) != v]
print("rank", os.environ["RANK_ID"], "missing or wrong:", bad, flush=True)
for n in names:                      # the log tail will hold every value
    print(n, "=", os.environ.get(n), flush=True)
if bad:
    sys.exit(9)
sys.exit(3 if os.environ["RANK_ID"] == "1" else 0)
"""


def _env(tmp_path, **extra):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    return clean_env(TMPDIR=tmpdir, **SECRETS, MA_PLAIN="plain-value", **extra)


def test_dry_run_masks_every_secret_and_keeps_values_out_of_the_argv(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("pass\n")
    env = _env(tmp_path, OPENMPI_X_ARGS="-x MA_EXTRA_TOKEN=sekrit-x-11")
    proc = run(["--dry-run", "-np", "2", str(script)], env=env)
    assert proc.returncode == 0, proc.stderr
    for value in list(SECRETS.values()) + ["sekrit-x-11"]:
        assert value not in proc.stdout
    argv_line = next(l for l in proc.stdout.splitlines() if not l.startswith("#"))
    for name in SECRETS:
        assert f"-x {name} " in argv_line or argv_line.endswith(f"-x {name}")
    assert "-x MA_EXTRA_TOKEN " in argv_line
    assert "-x MA_PLAIN=plain-value" in proc.stdout     # plain values go to the tune file


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_secrets_arrive_exactly_and_show_nowhere(mpirun, tmp_path):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT % (SECRETS,))
    tune = tmp_path / "tune.env"
    proc = run(["--mpirun", mpirun, "--master_port", free_port(), "-np", "2", "--no-scheduler",
                "--tune-file", str(tune), "--keep-tune-file", "--log_dir", str(tmp_path / "logs"),
                str(script)], env=_env(tmp_path))
    # rank 1 got every value exactly (else 9) and failed on purpose with 3
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "missing or wrong: []" in proc.stdout
    on_disk = tune.read_text()
    assert "-x MA_PLAIN=plain-value" in on_disk
    assert oct(os.stat(tune).st_mode & 0o777) == "0o600"
    summary = proc.stderr[proc.stderr.index("mpilaunch: job failed"):]
    assert "root cause: rank 1" in summary and "MA_API_KEY = ****" in summary
    for value in SECRETS.values():
        assert value not in on_disk
        assert value not in summary
