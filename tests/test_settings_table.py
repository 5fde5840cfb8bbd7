"""The configuration table: each row's default, its unit, and the one line a bad value gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from a2a_acp_bridge.config import SETTINGS, Settings, Span
from a2a_acp_bridge.errors import ConfigError
from a2a_acp_bridge.setting import Duration, OrUnset, Setting, markdown_table

TOKEN = "t" * 32

# Every setting's value when nothing is set: the defaults the server has always had.
DEFAULTS: dict[str, Any] = {
    "host": "127.0.0.1",
    "port": 41241,
    "public_url": None,
    "database_url": None,
    "database_wait_s": 60.0,
    "lease_ttl_s": 10.0,
    "name": None,
    "insecure": False,
    "token": None,
    "file_tokens": (),
    "allowed_hosts": (),
    "max_body_bytes": 32 * 1024 * 1024,
    "max_sessions": 8,
    "max_queued": 8,
    "acp_cwd": None,
    "allow_execute": False,
    "idle_timeout_s": 300.0,
    "supervised_mode": None,
    "agent_env_names": (),
    "start_timeout_s": 60.0,
    "silence_s": 600.0,
    "turn_cap_s": None,
    "cancel_grace_s": 5.0,
    "pool_size": 1,
    "card_v03": None,
    "push_allow_private": False,
    "question_timeout_s": 3600.0,
    # issue 20: the supervisors
    "supervisor": (),
    "supervisor_url": None,
    "supervisor_secret": None,
    "supervisor_format": "bridge",
    "supervisor_timeout_s": 10.0,
    "console_token": None,
    "admission_timeout_s": 60.0,
    "header_timeout_s": 10.0,
    "body_timeout_s": 30.0,
    "max_connections": 512,
    "auth_method": None,
    "writable_protected": (),
    "max_line_bytes": 64 * 1024 * 1024,
    "max_parts": 1000,
    "isolation": True,
    "task_ttl_s": 30 * 86400.0,
    "sandbox_ttl_s": 7 * 86400.0,
    "push_keys": (),
    "home_seed": None,
    "isolation_read": (),
    "isolation_write": (),
    "task_retention": 10_000,
    "policy": None,
    "policy_mode": "enforce",
    "decision_timeout_s": 120.0,
    "decision_ttl_s": 90 * 86400.0,
    "decision_retention": 100_000,
    "log_format": "auto",
    "log_level": "INFO",
    "a2a_sdk_tracing": "false",
    "jwt_issuer": None,
    "jwt_audience": None,
    "jwt_jwks_url": None,
    "jwt_jwks_file": None,
    "jwt_principal_claim": "sub",
    "jwt_required_scope": None,
    "admin_principals": (),
    "metrics_public": False,
    "max_sessions_per_principal": None,
}

# For each variable, a value it must refuse. A row missing here fails the test below, so a
# new setting comes with its bad value (or an entry in ANY_TEXT saying it has none).
BAD: dict[str, str] = {
    "ACP_AGENT": "no-such-agent-on-path",
    "PORT": "70000",
    "PUBLIC_URL": "ftp://example.org",
    "A2A_TOKEN": "short",
    "A2A_TOKEN_FILE": "missing-file",
    "A2A_ALLOWED_HOSTS": "example.org:8080",
    "A2A_MAX_BODY_BYTES": "1023",
    "ACP_MAX_SESSIONS": "0",
    "ACP_MAX_QUEUED_TASKS": "-1",
    "ACP_CWD": "missing-dir",
    "ACP_ALLOW_EXECUTE": "maybe",
    "ACP_IDLE_TIMEOUT_MS": "1.5",
    "ACP_SUPERVISED_MODE": "bypassPermissions",
    "ACP_AGENT_ENV": "NOT-A-NAME",
    "ACP_START_TIMEOUT_MS": "0",
    "ACP_SILENCE_TIMEOUT_MS": "ten",
    "ACP_TURN_TIMEOUT_MS": "-1",
    "ACP_CANCEL_GRACE_MS": "5s",
    "ACP_POOL_SIZE": "17",
    "A2A_CARD_V03": "2",
    "A2A_PUSH_ALLOW_PRIVATE": "yes please",
    "A2A_QUESTION_TIMEOUT_MS": "0",
    # issue 20: the supervisors
    "ACP_SUPERVISOR": "console,webhook",
    "ACP_SUPERVISOR_URL": "unix:/run/supervisor.sock",
    "ACP_SUPERVISOR_SECRET": "short",
    "ACP_SUPERVISOR_FORMAT": "xacml",
    "ACP_SUPERVISOR_TIMEOUT_MS": "0",
    "ACP_CONSOLE_TOKEN": "short",
    "ACP_ADMISSION_TIMEOUT_MS": "-1",
    "A2A_HEADER_TIMEOUT_MS": "0",
    "A2A_BODY_TIMEOUT_MS": "1s",
    "A2A_MAX_CONNECTIONS": "0",
    "ACP_AUTH_METHOD": "api key",
    "ACP_WRITABLE_PROTECTED": ".not-protected",
    "ACP_MAX_LINE_BYTES": "1000",
    "A2A_MAX_PARTS": "0",
    "ACP_ISOLATION": "sometimes",
    "A2A_TASK_TTL": "a week",
    "ACP_SANDBOX_TTL": "7 days",
    "A2A_PUSH_KEY": "not-a-key",
    "A2A_DATABASE_URL": "sqlite:///state.db",
    "A2A_DATABASE_WAIT_MS": "soon",
    "A2A_LEASE_TTL_MS": "10",
    "ACP_HOME_SEED": "../outside",
    "ACP_ISOLATION_READ": "missing-path",
    "ACP_ISOLATION_WRITE": "missing-path",
    "A2A_TASK_RETENTION": "0",
    "ACP_POLICY": "no-such-policy.toml",
    "ACP_POLICY_MODE": "sometimes",
    "ACP_DECISION_TIMEOUT_MS": "0",
    "ACP_DECISION_TTL": "forever",
    "ACP_DECISION_RETENTION": "0",
    "LOG_FORMAT": "xml",
    "LOG_LEVEL": "LOUD",
    "A2A_JWT_ISSUER": "ftp://idp.example.org",
    "A2A_JWT_AUDIENCE": "a2a-bridge",  # refused without A2A_JWT_ISSUER
    "A2A_JWT_JWKS_URL": "ftp://idp.example.org/jwks",
    "A2A_JWT_JWKS_FILE": "missing.json",
    "A2A_JWT_PRINCIPAL_CLAIM": "two words",
    "A2A_JWT_REQUIRED_SCOPE": "a2a",  # refused without A2A_JWT_ISSUER
    "A2A_ADMIN_PRINCIPALS": "ops,not a name!",
    "A2A_METRICS_PUBLIC": "perhaps",
    "ACP_MAX_SESSIONS_PER_PRINCIPAL": "0",
}
# Rows whose every text is a valid value.
ANY_TEXT = {
    "HOST",
    "AGENT_NAME",
    "ACP_SANDBOX_DIR",
    "ACP_STATE_DIR",
    "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED",
}
VARIABLE_ROWS = [row for row in SETTINGS if row.variable is not None]


def test_nothing_set_gives_every_setting_its_default(tmp_path: Path) -> None:
    settings = Settings.from_env({}, cwd=tmp_path)
    assert {name: getattr(settings, name) for name in DEFAULTS} == DEFAULTS
    assert settings.agent.is_demo
    assert settings.sandbox_parent == tmp_path / ".acp-sandboxes"
    assert settings.state_dir == tmp_path / ".a2a-acp-bridge"
    assert {row.name for row in SETTINGS} == {*DEFAULTS, "agent", "sandbox_parent", "state_dir"}


@pytest.mark.parametrize("row", VARIABLE_ROWS, ids=lambda row: row.variable)
def test_a_blank_value_counts_as_unset(tmp_path: Path, row: Setting) -> None:
    assert row.variable is not None
    blank = Settings.from_env({row.variable: "  "}, cwd=tmp_path)
    assert blank == Settings.from_env({}, cwd=tmp_path)


def test_every_setting_has_a_bad_value_to_refuse_or_accepts_any_text() -> None:
    variables = {row.variable for row in VARIABLE_ROWS}
    assert set(BAD) | ANY_TEXT == variables
    assert not set(BAD) & ANY_TEXT


@pytest.mark.parametrize(("variable", "bad"), BAD.items(), ids=list(BAD))
def test_a_bad_value_is_refused_naming_its_variable(
    tmp_path: Path, variable: str, bad: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({variable: bad}, cwd=tmp_path)
    assert caught.value.variable == variable
    assert str(caught.value).startswith(f"{variable}: ")
    assert "\n" not in str(caught.value)


def _inner(row: Setting) -> type:
    kind = row.kind.inner if isinstance(row.kind, OrUnset) else row.kind
    return type(kind)


def test_a_duration_is_milliseconds_in_a_variable_named_ms_and_seconds_in_its_field() -> None:
    durations = [row for row in SETTINGS if _inner(row) == Duration]
    # Long spans (a task's or a sandbox's age) are written with their unit: `7d`.
    spans = [row for row in SETTINGS if _inner(row) == Span]
    assert len(durations) == 13
    assert [row.variable for row in spans] == [
        "A2A_TASK_TTL",
        "ACP_SANDBOX_TTL",
        "ACP_DECISION_TTL",
    ]
    for row in SETTINGS:
        assert row.variable is None or row.variable.endswith("_MS") == (row in durations), row
        assert row.name.endswith("_s") == (row in durations or row in spans), row
        assert not row.name.endswith("_ms"), row


def test_a_duration_is_read_in_milliseconds(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {"ACP_IDLE_TIMEOUT_MS": "1500", "ACP_TURN_TIMEOUT_MS": "250"}, cwd=tmp_path
    )
    assert settings.idle_timeout_s == 1.5
    assert settings.turn_cap_s == 0.25


def test_a_token_stays_out_of_the_settings_repr(tmp_path: Path) -> None:
    (tmp_path / "tokens").write_text(f"{'f' * 32}\n")
    with_token = Settings.from_env({"A2A_TOKEN": TOKEN}, cwd=tmp_path)
    with_file = Settings.from_env({"A2A_TOKEN_FILE": "tokens"}, cwd=tmp_path)
    assert [(e.principal, e.plain) for e in with_token.tokens] == [("default", TOKEN)]
    assert [(e.principal, e.plain) for e in with_file.tokens] == [("token-1", "f" * 32)]
    assert TOKEN not in repr(with_token)
    assert "f" * 32 not in repr(with_file)


def test_both_token_variables_are_refused_before_the_file_is_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="set either A2A_TOKEN or A2A_TOKEN_FILE"):
        Settings.from_env({"A2A_TOKEN": TOKEN, "A2A_TOKEN_FILE": "missing"}, cwd=tmp_path)


def test_a_setting_that_depends_on_another_is_checked_against_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="ACP_POOL_SIZE: 3 warm adapters exceed"):
        Settings.from_env({"ACP_POOL_SIZE": "3", "ACP_MAX_SESSIONS": "2"}, cwd=tmp_path)
    with pytest.raises(ConfigError, match=r"HOST: '0\.0\.0\.0' is reachable"):
        Settings.from_env({"HOST": "0.0.0.0"}, cwd=tmp_path)
    assert Settings.from_env({"HOST": "0.0.0.0"}, cwd=tmp_path, insecure=True).insecure


def test_the_table_shows_each_default_with_its_unit() -> None:
    rows = {row.variable: row for row in VARIABLE_ROWS}
    lines = markdown_table(
        [rows[name] for name in ("ACP_START_TIMEOUT_MS", "A2A_MAX_BODY_BYTES", "PUBLIC_URL")]
    ).splitlines()
    assert lines[2].startswith("| `ACP_START_TIMEOUT_MS` | `60000` ms | ")
    assert lines[3].startswith("| `A2A_MAX_BODY_BYTES` | `33554432` bytes (32 MiB) | ")
    assert lines[4].startswith("| `PUBLIC_URL` (`--public-url`) | `http://HOST:PORT` | ")


# --- issue 20: the supervisors ---------------------------------------------------------------

SUPERVISOR_SECRET = "w" * 40
CONSOLE_TOKEN = "c" * 32


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"ACP_SUPERVISOR": "webhook", "ACP_SUPERVISOR_SECRET": SUPERVISOR_SECRET},
            "ACP_SUPERVISOR: `webhook` needs ACP_SUPERVISOR_URL",
            id="webhook-without-url",
        ),
        pytest.param(
            {"ACP_SUPERVISOR": "webhook", "ACP_SUPERVISOR_URL": "https://pdp.example/decide"},
            "ACP_SUPERVISOR: `webhook` needs ACP_SUPERVISOR_SECRET",
            id="webhook-without-secret",
        ),
        pytest.param(
            {"ACP_SUPERVISOR_URL": "https://pdp.example/decide"},
            "ACP_SUPERVISOR_URL: is set but ACP_SUPERVISOR does not name `webhook`",
            id="url-without-webhook",
        ),
        pytest.param(
            {"ACP_SUPERVISOR": "console"},
            "ACP_SUPERVISOR: `console` needs ACP_CONSOLE_TOKEN",
            id="console-without-token",
        ),
        pytest.param(
            {
                "ACP_SUPERVISOR": "webhook,console",
                "ACP_SUPERVISOR_URL": "https://pdp.example/decide",
                "ACP_SUPERVISOR_SECRET": SUPERVISOR_SECRET,
                "ACP_CONSOLE_TOKEN": CONSOLE_TOKEN,
                "ACP_SUPERVISOR_TIMEOUT_MS": "120000",
            },
            "ACP_SUPERVISOR_TIMEOUT_MS: must be below ACP_DECISION_TIMEOUT_MS",
            id="webhook-eats-the-consoles-time",
        ),
        pytest.param(
            {"ACP_SUPERVISOR": "console", "ACP_CONSOLE_TOKEN": TOKEN, "A2A_TOKEN": TOKEN},
            "ACP_CONSOLE_TOKEN: must differ from every A2A token",
            id="console-token-is-the-callers",
        ),
    ],
)
def test_the_supervisor_settings_are_checked_together(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env(env, cwd=tmp_path)
    assert str(caught.value).startswith(message)


def test_the_supervisors_are_read_in_order_and_the_secret_stays_out_of_the_repr(
    tmp_path: Path,
) -> None:
    settings = Settings.from_env(
        {
            "ACP_SUPERVISOR": " Webhook , console ",
            "ACP_SUPERVISOR_URL": "https://pdp.example/decide",
            "ACP_SUPERVISOR_SECRET": SUPERVISOR_SECRET,
            "ACP_SUPERVISOR_FORMAT": "AuthZEN",
            "ACP_CONSOLE_TOKEN": CONSOLE_TOKEN,
        },
        cwd=tmp_path,
    )
    assert settings.supervisor == ("webhook", "console")
    assert settings.supervisor_format == "authzen"
    assert SUPERVISOR_SECRET not in repr(settings)
    assert CONSOLE_TOKEN not in repr(settings)
