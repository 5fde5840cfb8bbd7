"""The command line: bad values stop the start with one line and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from a2a_acp_bridge.cli import effective_environment, read_dotenv
from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.errors import ConfigError

# Bounded: a start that does not fail at once would otherwise serve forever.
CLI_TIMEOUT_S = 30


def run_serve(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in {"PORT", "HOST", "ACP_AGENT", "ACP_CWD"}
    }
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-m", "a2a_acp_bridge", "serve", *args],
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        pytest.param({"PORT": "eighty"}, (), "PORT: 'eighty' is not a port number", id="port-word"),
        pytest.param(
            {}, ("--port", "70000"), "PORT: '70000' is not a port number", id="port-range"
        ),
        pytest.param(
            {"ACP_CWD": "missing-dir"},
            (),
            "ACP_CWD: 'missing-dir' does not exist",
            id="cwd-missing",
        ),
        pytest.param(
            {"ACP_CWD": "a-file"}, (), "ACP_CWD: 'a-file' is not a directory", id="cwd-file"
        ),
        pytest.param(
            {}, ("--agent", "klaude"), "ACP_AGENT: 'klaude' is neither a preset", id="preset"
        ),
        pytest.param(
            {"ACP_ALLOW_EXECUTE": "maybe"},
            (),
            "ACP_ALLOW_EXECUTE: 'maybe' is not a boolean",
            id="bool",
        ),
        pytest.param(
            {"ACP_IDLE_TIMEOUT_MS": "-5"}, (), "ACP_IDLE_TIMEOUT_MS: -5 is out of range", id="idle"
        ),
        pytest.param(
            {"LOG_LEVEL": "loud"}, (), "LOG_LEVEL: 'LOUD' is not one of DEBUG", id="log-level"
        ),
        pytest.param({"LOG_FORMAT": "xml"}, (), "LOG_FORMAT: 'xml' is not one of", id="log-format"),
        pytest.param(
            {"ACP_START_TIMEOUT_MS": "1.5"},
            (),
            "ACP_START_TIMEOUT_MS: '1.5' is not a whole number",
            id="duration",
        ),
        pytest.param(
            {"ACP_SUPERVISED_MODE": "bypassPermissions"},
            (),
            "ACP_SUPERVISED_MODE: 'bypassPermissions' lets the agent act without asking",
            id="unsupervised-mode",
        ),
        pytest.param(
            {"ACP_AUTH_METHOD": "api key"},
            (),
            "ACP_AUTH_METHOD: 'api key' is not an authentication method id",
            id="auth-method",
        ),
    ],
)
def test_a_bad_value_stops_the_start_with_one_line_naming_it(
    tmp_path: Path, env: dict[str, str], args: tuple[str, ...], expected: str
) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    result = run_serve(tmp_path, env, *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("a2a-acp-bridge: ")
    assert expected in lines[0]
    assert "Traceback" not in result.stderr


def test_dotenv_is_read_without_overriding_the_real_environment(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        "# settings\nPORT=5000\nexport AGENT_NAME='From dotenv'\nACP_ALLOW_EXECUTE=true # comment\n"
    )
    env = effective_environment({"PORT": "6000"}, {"name": None}, tmp_path)
    settings = Settings.from_env(env, cwd=tmp_path)
    assert settings.port == 6000
    assert settings.name == "From dotenv"
    assert settings.allow_execute is True


def test_the_auth_method_is_read_trimmed_and_unset_when_blank(tmp_path: Path) -> None:
    assert Settings.from_env({"ACP_AUTH_METHOD": " api-key "}, cwd=tmp_path).auth_method == (
        "api-key"
    )
    assert Settings.from_env({"ACP_AUTH_METHOD": " "}, cwd=tmp_path).auth_method is None


def test_flags_win_over_the_environment(tmp_path: Path) -> None:
    env = effective_environment({"PORT": "6000", "HOST": "127.0.0.2"}, {"port": "7000"}, tmp_path)
    settings = Settings.from_env(env, cwd=tmp_path)
    assert settings.port == 7000
    assert settings.host == "127.0.0.2"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param('A="quoted" # note', "quoted", id="double-quotes-then-a-comment"),
        pytest.param("A='quoted' # note", "quoted", id="single-quotes-then-a-comment"),
        pytest.param('A="quoted"#note', "quoted", id="a-comment-right-after-quotes"),
        pytest.param("A=plain # note", "plain", id="unquoted-then-a-comment"),
        pytest.param("A=plain#part", "plain#part", id="a-hash-inside-an-unquoted-value"),
        pytest.param('A="# not a comment"', "# not a comment", id="a-hash-inside-quotes"),
        pytest.param("export A=exported", "exported", id="export"),
        pytest.param("export   A = spaced  ", "spaced", id="export-and-blanks"),
        pytest.param('A="one\\ntwo"', "one\ntwo", id="newline-escape-in-double-quotes"),
        pytest.param('A="say \\"hi\\""', 'say "hi"', id="escaped-double-quote"),
        pytest.param('A="back\\\\slash"', "back\\slash", id="escaped-backslash"),
        pytest.param("A='it\\'s'", "it's", id="escaped-single-quote"),
        pytest.param("A='one\\ntwo'", "one\\ntwo", id="single-quotes-keep-backslash-n"),
        pytest.param('A="one\ntwo"', "one\ntwo", id="a-quoted-value-over-two-lines"),
        pytest.param("A=${HOME}", "${HOME}", id="no-expansion"),
        pytest.param("A=", "", id="empty"),
    ],
)
def test_dotenv_values_are_read_as_python_dotenv_reads_them(
    tmp_path: Path, line: str, expected: str
) -> None:
    (tmp_path / ".env").write_text(f"# settings\n\n{line}\nB=after\n")
    assert read_dotenv(tmp_path / ".env") == {"A": expected, "B": "after"}


@pytest.mark.parametrize(
    ("text", "number"),
    [
        pytest.param("PORT=1\nthis is not a setting\n", 2, id="words"),
        pytest.param("PORT=1\n\nPORT\n", 3, id="a-name-without-a-value"),
        pytest.param('PORT=1\nA="never closed\nB=2\n', 2, id="an-unclosed-quote"),
        pytest.param("PORT=1\nA-B=2\n", 2, id="not-a-variable-name"),
        pytest.param("# c\n\n# d\n\nbad line\n", 5, id="after-comments-and-blank-lines"),
    ],
)
def test_a_malformed_dotenv_line_is_named(tmp_path: Path, text: str, number: int) -> None:
    (tmp_path / ".env").write_text(text)
    with pytest.raises(ConfigError, match=f"^.env: line {number} is not KEY=VALUE$"):
        read_dotenv(tmp_path / ".env")


def test_a_dotenv_that_is_not_utf8_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / ".env").write_bytes(b"AGENT_NAME=\xff\xfe\n")
    result = run_serve(tmp_path, {})
    assert result.returncode == 2
    assert result.stderr.strip() == "a2a-acp-bridge: .env: is not UTF-8 text"


def test_a_quoted_dotenv_value_reaches_the_settings_without_its_quotes(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text('AGENT_NAME="Quoted Agent" # the card\'s name\n')
    settings = Settings.from_env(effective_environment({}, {}, tmp_path), cwd=tmp_path)
    assert settings.name == "Quoted Agent"


def test_acp_cwd_is_resolved_once_through_symlinks(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    settings = Settings.from_env({"ACP_CWD": "link"}, cwd=tmp_path)
    assert settings.acp_cwd == real.resolve()


def test_presets_and_commands_become_agent_specs(tmp_path: Path) -> None:
    demo = Settings.from_env({}, cwd=tmp_path).agent
    assert demo.is_demo
    assert demo.command[1:] == ("-m", "a2a_acp_bridge.demo_agent")
    custom = Settings.from_env(
        {"ACP_AGENT": f"{sys.executable} -u 'my agent.py'"}, cwd=tmp_path
    ).agent
    assert custom.command == (sys.executable, "-u", "my agent.py")
    gemini = Settings.from_env({"ACP_AGENT": "gemini"}, cwd=tmp_path).agent
    assert gemini.command[-1] == "--acp"
    assert any(
        "@google/gemini-cli@0.61.0" in word or word.endswith("/gemini") for word in gemini.command
    )


@pytest.mark.parametrize(("given", "expected"), [(None, "false"), ("true", "true")])
def test_a2a_sdk_tracing_is_off_unless_the_operator_turns_it_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str | None, expected: str
) -> None:
    import a2a_acp_bridge.server
    from a2a_acp_bridge.cli import A2A_TRACING_VARIABLE, main

    seen: list[str | None] = []

    def fake_run_server(settings: Settings) -> int:
        seen.append(os.environ.get(A2A_TRACING_VARIABLE))
        return 0

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(a2a_acp_bridge.server, "run_server", fake_run_server)
    # setenv first, so the variable the CLI writes is restored afterwards either way.
    monkeypatch.setenv(A2A_TRACING_VARIABLE, "unset")
    if given is None:
        monkeypatch.delenv(A2A_TRACING_VARIABLE)
    else:
        monkeypatch.setenv(A2A_TRACING_VARIABLE, given)
    assert main(["serve", "--port", "0"]) == 0
    assert seen == [expected]


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", None), ("auto", None), ("AUTO", None), ("true", True), ("0", False), ("false", False)],
)
def test_a2a_card_v03_is_auto_by_default_or_a_boolean(
    tmp_path: Path, value: str, expected: bool | None
) -> None:
    settings = Settings.from_env({"A2A_CARD_V03": value}, cwd=tmp_path)
    assert settings.card_v03 is expected


def test_a2a_card_v03_refuses_anything_else_naming_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="A2A_CARD_V03: 'sometimes' is not auto, true or false"):
        Settings.from_env({"A2A_CARD_V03": "sometimes"}, cwd=tmp_path)
