"""Argument parsing is pure: no program runs, no file is touched."""

import argparse

import pytest

from deepcontext.cli import record
from deepcontext.cli.main import main, parse_args
from deepcontext.errors import DeepContextError


def test_record_options_and_command():
    args = parse_args(["record", "-o", "x.dcprof", "--context", "python,op",
                       "--flush-interval", "2", "--", "python", "train.py", "--lr", "3"])
    assert args.output == "x.dcprof"
    assert args.context == "python,op"
    assert args.flush_interval == 2.0
    assert args.command == ["--", "python", "train.py", "--lr", "3"]


def test_record_prepare_builds_the_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    args = parse_args(["record", "--", "python3", "train.py"])
    command, env = record.prepare(args)
    assert command == ["python3", "train.py"]
    assert '"output": "' + str(tmp_path / "train.dcprof") + '"' in env["DEEPCONTEXT_RECORD"]
    assert env["PYTHONPATH"].split(":")[0] == str(record.BOOTSTRAP_DIR)
    assert not (tmp_path / "train.dcprof").exists()


@pytest.mark.parametrize("argv, message", [
    (["record", "--context", "python,bogus", "--", "python3", "x.py"], "unknown context layer 'bogus'"),
    (["record", "--flush-interval", "0", "--", "python3", "-c", "1"], "--flush-interval must be positive"),
    (["record"], "no command to run"),
    (["record", "--", "no-such-program-xyz"], "command not found: no-such-program-xyz"),
])
def test_record_bad_arguments(argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.py").write_text("")
    with pytest.raises(DeepContextError, match=message):
        record.prepare(parse_args(argv))


def test_existing_output_is_refused_without_force(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.dcprof").write_text("keep me")
    with pytest.raises(DeepContextError, match="already exists"):
        record.prepare(parse_args(["record", "-o", "p.dcprof", "--", "python3", "-c", "1"]))
    record.prepare(parse_args(["record", "-f", "-o", "p.dcprof", "--", "python3", "-c", "1"]))
    assert (tmp_path / "p.dcprof").read_text() == "keep me"


def test_main_turns_errors_into_one_line(capsys):
    assert main(["report", "/no/such/file.dcprof"]) == 2
    err = capsys.readouterr().err
    assert err == "deepcontext: error: /no/such/file.dcprof: no such file\n"


def test_unknown_option_is_one_line(capsys):
    assert main(["report", "--bogus"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("deepcontext: error:")


def test_no_command(capsys):
    assert main([]) == 2
    assert isinstance(parse_args(["report", "f"]), argparse.Namespace)
