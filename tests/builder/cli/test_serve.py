"""``tritonforge serve``'s OpenAI endpoint options (no server started)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from builder.cli import serve
from openai_frontend.server import api_key


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve.add_parser(parser.add_subparsers())
    return parser.parse_args(["serve", *argv])


def test_the_endpoint_is_on_port_9000_by_default_and_0_turns_it_off() -> None:
    args = parse()
    assert args.openai_port == 9000 and args.openai_api_key is None
    assert parse("--openai-port", "0").openai_port == 0


@pytest.mark.parametrize("flags", [["--openai-port", "70000"], ["--openai-max-body-bytes", "0"]])
def test_bad_endpoint_options_exit_2_before_starting(
    flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert serve.run(parse("--repo", str(tmp_path), *flags)) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --openai-port")


def test_the_key_comes_from_the_flag_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONFORGE_OPENAI_API_KEY", "from-env")
    assert api_key(None) == "from-env" and api_key("flag") == "flag" and api_key("") is None
    monkeypatch.setenv("TRITONFORGE_OPENAI_API_KEY", "")
    assert api_key(None) is None
