"""``packrt serve --config serve.toml``: every option of ``packrt serve`` can be set in the file, an option
given on the command line wins over the file and the file over the defaults, and every way a file can be
wrong is a ServeConfigError (a ValueError) naming the file, the key, what was expected and found, and the fix."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from packrt.cli import build_parser, main
from packrt.serve import ServeLimits
from packrt.serve.config import ServeConfigError, ServeOptions, keys, read_config, resolve


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "serve.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def starting() -> None:
    """A test whose ``packrt serve`` gets as far as starting the server: the command checks the serve extra first."""
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What ``packrt serve`` would start a server with: packrt.serve.serve's arguments, one dict per call."""
    calls: list[dict[str, Any]] = []

    def fake(path: str, host: str, port: int, limits: ServeLimits, **options: Any) -> None:
        calls.append({"path": path, "host": host, "port": port, "limits": limits, **options})

    monkeypatch.setattr("packrt.serve.serve", fake)
    return calls


def test_every_option_of_packrt_serve_is_a_key_of_the_config_file() -> None:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    flags = {action.dest for action in commands.choices["serve"]._actions} - {"help", "config"}
    assert flags == set(keys())


@pytest.mark.usefixtures("starting")
def test_the_command_line_wins_over_the_file_and_the_file_over_the_defaults(
    tmp_path: Path, served: list[dict[str, Any]]
) -> None:
    config = _toml(
        tmp_path,
        'path = "model"\nport = 9000\nhost = "0.0.0.0"\nmax-queued-requests = 7\nrequest_timeout_s = 5\n'
        'cors_origin = ["http://a.example"]\napi_key = "from-file"\n',
    )
    assert main(["serve", "--config", str(config), "--port", "8000", "--cors-origin", "http://b.example"]) == 0
    [call] = served
    assert (call["port"], call["host"], call["api_key"]) == (8000, "0.0.0.0", "from-file")
    assert call["cors_origins"] == ("http://b.example",)
    assert call["path"] == str(tmp_path / "model")  # a relative path is the file's directory's
    assert (call["limits"].max_queued_requests, call["limits"].request_timeout_s) == (7, 5)
    assert call["limits"].max_new_tokens == ServeLimits().max_new_tokens
    assert (call["drain_s"], call["name"]) == (30, None)  # the defaults


def test_without_a_file_the_options_are_the_defaults_and_the_flags() -> None:
    assert resolve({"path": "m"}) == ServeOptions(path="m")
    assert resolve({"path": "m", "max_batch_sequences": 4}).limits == ServeLimits(max_batch_sequences=4)


def test_a_model_given_nowhere_is_a_usage_error(
    tmp_path: Path, served: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--config", str(_toml(tmp_path, "port = 9000\n"))]) == 2
    assert "needs a model: give its directory (DIR), or 'path' in the --config file" in capsys.readouterr().err
    assert not served


WRONG = [
    ("prot = 9000\n", r"unknown key 'prot'; expected one of packrt serve's options .* did you mean 'port'\? rename"),
    ("[serve]\nport = 9000\n", r"unknown key 'serve'; expected one of .*; rename or remove it"),
    ('port = "9000"\n', r"key 'port' must be an integer, got a string '9000'; write it as, e.g., port = 8000"),
    ("drain = true\n", r"key 'drain' must be an integer, got a boolean True; write it as, e.g., drain = 30"),
    ("host = 1\n", r"key 'host' must be a string, got an integer 1; write it as, e.g., host = \"0.0.0.0\""),
    ("cors_origin = [1]\n", r"key 'cors_origin' must be an array of strings, got an array \[1\]"),
    ('request_timeout_s = "60"\n', r"key 'request_timeout_s' must be a number, got a string '60'"),
    ("max_queued_requests = 0\n", r"key 'max_queued_requests' must be a positive number, got 0; write it as, e.g., "),
    ("port = \n", r"is not valid TOML: .*line 1.*; fix the line it names"),
]


@pytest.mark.parametrize(("text", "says"), WRONG, ids=[text.split("=")[0].strip() for text, _ in WRONG])
def test_a_wrong_config_file_is_a_value_error_naming_the_file_the_key_and_the_fix(
    tmp_path: Path, text: str, says: str
) -> None:
    config = _toml(tmp_path, text)
    with pytest.raises(ServeConfigError, match=f"config file '{re.escape(str(config))}'.*{says}") as err:
        read_config(config)
    assert isinstance(err.value, ValueError)


def test_a_missing_config_file_is_named_and_the_command_exits_2(
    tmp_path: Path, served: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.toml"
    with pytest.raises(
        ServeConfigError, match=f"config file '{re.escape(str(missing))}' cannot be read .*pass the path of a TOML"
    ):
        read_config(missing)
    assert main(["serve", "m", "--config", str(missing)]) == 2
    assert "packrt serve: error: config file" in capsys.readouterr().err
    assert not served


def test_a_bad_bound_on_the_command_line_is_still_a_usage_error(
    served: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "m", "--max-queued-requests", "0"]) == 2
    assert "ServeLimits.max_queued_requests must be a positive number, got 0" in capsys.readouterr().err


@pytest.mark.usefixtures("starting")
def test_dtype_and_quantize_reach_the_load_from_the_flags_or_the_file(
    tmp_path: Path, served: list[dict[str, Any]]
) -> None:
    config = _toml(tmp_path, 'path = "m"\ndtype = "float16"\nquantize = "int8"\n')
    assert main(["serve", "--config", str(config), "--dtype", "bf16"]) == 0
    assert (served[0]["dtype"], served[0]["quantize"]) == ("bf16", "int8")


def test_a_dtype_or_quantize_from_pretrained_does_not_take_names_where_it_was_set(tmp_path: Path) -> None:
    with pytest.raises(ServeConfigError, match=r"--dtype: dtype 'int8' is not a floating dtype .* float16, bfloat16"):
        resolve({"path": "m", "dtype": "int8"})
    with pytest.raises(ServeConfigError, match=r"--quantize: quantize 'int4' is not a scheme packrt has; .* int8"):
        resolve({"path": "m", "quantize": "int4"})
    config = _toml(tmp_path, 'dtype = "fp8"\n')
    named = re.escape(str(config))
    with pytest.raises(ServeConfigError, match=f"config file '{named}': key 'dtype': dtype 'fp8' is not a floating"):
        resolve({"path": "m"}, config)


def test_an_access_log_in_the_file_is_read_from_its_directory_and_dash_is_standard_output(tmp_path: Path) -> None:
    assert read_config(_toml(tmp_path, 'access_log = "logs/access.jsonl"\n')) == {
        "access_log": str(tmp_path / "logs" / "access.jsonl")
    }
    assert read_config(_toml(tmp_path, 'access-log = "-"\n')) == {"access_log": "-"}
