"""mpilaunch/config/mpiargs.py: ModelArts-style strings -> the exact tokens each Open MPI reads (pure)."""
import pytest

from mpilaunch.config import mpiargs
from mpilaunch.errors import UsageError
from mpilaunch.config.mpi import OMPI4, OMPI5


# --------------------------------------------------------------------------- split_arg_string

def test_split_follows_posix_words_without_expansion_or_comments():
    value = "-x A -mca btl '^openib' --bind-to \"no ne\" $HOME # kept"
    assert mpiargs.split_arg_string(value, "OPENMPI_X_ARGS") == [
        "-x", "A", "-mca", "btl", "^openib", "--bind-to", "no ne", "$HOME", "#", "kept"]
    assert mpiargs.split_arg_string("", "OPENMPI_X_ARGS") == []


def test_split_of_an_unbalanced_quote_names_the_variable():
    with pytest.raises(UsageError) as exc:
        mpiargs.split_arg_string("-x 'A", "OPENMPI_EXTRA_ARGS")
    assert str(exc.value) == "OPENMPI_EXTRA_ARGS: cannot split \"-x 'A\": No closing quotation"


# --------------------------------------------------------------------------- normalize

@pytest.mark.parametrize("dialect", [OMPI4, OMPI5])
def test_single_dash_spellings_become_double_dash_on_both(dialect):
    tokens = ["-bind-to", "none", "-map-by", "slot", "-report-bindings", "-mca", "btl", "^openib",
              "-np", "4", "-H", "a,b", "-x", "A", "--x", "B=1", "train.py", "-", "--"]
    assert mpiargs.normalize(tokens, dialect, "SRC") == [
        "--bind-to", "none", "--map-by", "slot", "--report-bindings", "--mca", "btl", "^openib",
        "-np", "4", "-H", "a,b", "-x", "A", "-x", "B=1", "train.py", "-", "--"]


def test_an_option_written_with_its_value_is_left_as_written():
    assert mpiargs.normalize(["--bind-to=none", "--mca", "a", "b"], OMPI5, "SRC") == [
        "--bind-to=none", "--mca", "a", "b"]


def test_unknown_options_take_no_value():
    assert mpiargs.normalize(["-quiet-ish", "value"], OMPI4, "SRC") == ["--quiet-ish", "value"]


def test_ssh_launcher_parameters_are_prrtes_on_open_mpi_5_only():
    tokens = ["-mca", "plm_rsh_args", "-p 2222", "--mca", "plm_rsh_agent", "ssh", "-mca", "btl", "tcp"]
    assert mpiargs.normalize(tokens, OMPI5, "SRC") == [
        "--prtemca", "plm_ssh_args", "-p 2222", "--prtemca", "plm_ssh_agent", "ssh",
        "--mca", "btl", "tcp"]
    assert mpiargs.normalize(tokens, OMPI4, "SRC") == [
        "--mca", "plm_rsh_args", "-p 2222", "--mca", "plm_rsh_agent", "ssh", "--mca", "btl", "tcp"]


@pytest.mark.parametrize("tokens, message", [
    (["-x"], "OPENMPI_X_ARGS: option -x needs 1 value(s)"),
    (["-mca", "btl"], "OPENMPI_X_ARGS: option -mca needs 2 value(s)"),
    (["--bind-to"], "OPENMPI_X_ARGS: option --bind-to needs 1 value(s)"),
])
def test_a_missing_value_is_a_usage_error_naming_the_option(tokens, message):
    with pytest.raises(UsageError) as exc:
        mpiargs.normalize(tokens, OMPI4, "OPENMPI_X_ARGS")
    assert str(exc.value) == message


# --------------------------------------------------------------------------- -x routing

def test_drop_unset_x_keeps_set_names_and_assignments():
    tokens = ["-x", "SET", "-x", "UNSET", "-x", "K=V", "--mca", "a", "b", "-x"]
    assert mpiargs.drop_unset_x(tokens, {"SET": "1", "OTHER": "2"}) == (
        ["-x", "SET", "-x", "K=V", "--mca", "a", "b", "-x"], ["UNSET"])
    assert mpiargs.drop_unset_x(["-x", "EMPTY"], {"EMPTY": ""}) == (["-x", "EMPTY"], [])


def test_route_secret_x_moves_secret_values_out_of_the_argv():
    tokens = ["-x", "MA_SECRET_KEY=s3cr3t", "-x", "PLAIN=v", "-x", "HF_TOKEN", "-x",
              "AWS_SECRET_ACCESS_KEY=a=b c", "--mca", "x", "y"]
    assert mpiargs.route_secret_x(tokens) == (
        ["-x", "MA_SECRET_KEY", "-x", "PLAIN=v", "-x", "HF_TOKEN", "-x", "AWS_SECRET_ACCESS_KEY",
         "--mca", "x", "y"],
        {"MA_SECRET_KEY": "s3cr3t", "AWS_SECRET_ACCESS_KEY": "a=b c"})
    assert mpiargs.route_secret_x(["-x"]) == (["-x"], {})


# --------------------------------------------------------------------------- ssh, keepalive

def test_ssh_tokens_use_the_parameter_each_version_reads():
    assert mpiargs.ssh_tokens([], OMPI5) == []
    assert mpiargs.ssh_tokens(["-p", "2222", "-F", "/etc/cfg"], OMPI5) == [
        "--prtemca", "plm_ssh_args", "-p 2222 -F /etc/cfg"]
    assert mpiargs.ssh_tokens(["-p", "2222", "-F", "/etc/cfg"], OMPI4) == [
        "--mca", "plm_rsh_args", "-p 2222 -F /etc/cfg"]


def test_keepalive_tokens_add_only_what_the_user_did_not_set():
    assert mpiargs.keepalive_tokens(OMPI5, []) == [
        "--prtemca", "oob_tcp_keepalive_time", "10", "--prtemca", "oob_tcp_keepalive_intvl", "3",
        "--prtemca", "oob_tcp_keepalive_probes", "3"]
    user = ["--mca", "oob_tcp_keepalive_time", "30", "-mca", "oob_tcp_keepalive_probes", "9"]
    assert mpiargs.keepalive_tokens(OMPI4, user) == ["--mca", "oob_tcp_keepalive_intvl", "3"]
    # a job that restarts gives a silent host up after ~6 s
    assert mpiargs.keepalive_tokens(OMPI5, [], fast=True) == [
        "--prtemca", "oob_tcp_keepalive_time", "3", "--prtemca", "oob_tcp_keepalive_intvl", "1",
        "--prtemca", "oob_tcp_keepalive_probes", "3"]


def test_has_param_looks_only_at_parameter_names():
    assert mpiargs.has_param(["--prtemca", "plm_ssh_args", "-p 1"], ("plm_ssh_args",))
    assert not mpiargs.has_param(["-x", "plm_ssh_args"], ("plm_ssh_args",))
    assert not mpiargs.has_param(["--gmca", "plm_ssh_args", "v"], ("plm_ssh_args",))
    assert not mpiargs.has_param(["plm_ssh_args", "--mca"], ("plm_ssh_args",))   # a name last: no value


# --------------------------------------------------------------------------- show

def test_show_is_copy_pasteable_shell():
    assert mpiargs.show(["mpirun", "-x", "A B", "it's", "plain"]) == "mpirun -x 'A B' 'it'\"'\"'s' plain"
    assert mpiargs.show([]) == ""
