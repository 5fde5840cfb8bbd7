"""Bearer tokens over real HTTP, the public card, and the refusal to serve publicly without one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from a2a_acp_bridge.config import Settings, is_loopback
from a2a_acp_bridge.errors import ConfigError
from a2a_acp_bridge.principals import TokenCheck, parse_token_lines
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import A2A_HEADERS, user_message

pytestmark = pytest.mark.anyio

TOKEN = "k3Y-0f-th3-bridge-" + "a" * 16
OTHER = "second-token-for-rotation-0123456789"
CARD = "/.well-known/agent-card.json"
# A start that does not fail at once serves forever: bounded.
CLI_TIMEOUT_S = 30


def send_body(text: str = "hello") -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": user_message(text)},
    }


def bearer(token: str, scheme: str = "Bearer") -> dict[str, str]:
    return {**A2A_HEADERS, "Authorization": f"{scheme} {token}"}


async def test_a_request_without_a_token_is_refused_with_401_and_a_bearer_challenge(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"A2A_TOKEN": TOKEN})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        response = await client.post(bridge.rpc_url, json=send_body(), headers=A2A_HEADERS)
        rest = await client.get(bridge.url + "/rest/tasks/unknown", headers=A2A_HEADERS)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="a2a-acp-bridge"'
    assert response.json()["error"] == "unauthorized"
    assert rest.status_code == 401


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(f"Bearer {TOKEN}x", id="longer"),
        pytest.param(f"Bearer {TOKEN[:-1]}", id="shorter"),
        pytest.param(f"Basic {TOKEN}", id="other-scheme"),
        pytest.param("Bearer", id="empty"),
        pytest.param(TOKEN, id="no-scheme"),
    ],
)
async def test_a_wrong_token_is_refused_as_invalid(tmp_path: Path, header: str) -> None:
    settings = make_settings(tmp_path, {"A2A_TOKEN": TOKEN})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        response = await client.post(
            bridge.rpc_url, json=send_body(), headers={**A2A_HEADERS, "Authorization": header}
        )
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


async def test_the_right_token_runs_the_task_whatever_the_schemes_case(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, {"A2A_TOKEN": TOKEN})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        response = await client.post(
            bridge.rpc_url, json=send_body("write a.txt: in"), headers=bearer(TOKEN, "bearer")
        )
    assert response.status_code == 200
    assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_every_token_of_the_token_file_is_accepted_and_comments_are_not(
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text(f"# rotated on Monday\n{TOKEN}\n\n{OTHER}\n")
    settings = make_settings(tmp_path, {"A2A_TOKEN_FILE": str(token_file)})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        first = await client.post(bridge.rpc_url, json=send_body(), headers=bearer(TOKEN))
        second = await client.post(bridge.rpc_url, json=send_body(), headers=bearer(OTHER))
        comment = await client.post(
            bridge.rpc_url, json=send_body(), headers=bearer("#-rotated-on-Monday-xxxxxxxx")
        )
    assert first.status_code == 200
    assert second.status_code == 200
    assert comment.status_code == 401


async def test_the_card_and_the_probes_stay_public_and_the_card_declares_the_scheme(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"A2A_TOKEN": TOKEN})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        card = await client.get(bridge.url + CARD, headers={"A2A-Version": "1.0"})
        health = await client.get(bridge.url + "/healthz")
        ready = await client.get(bridge.url + "/readyz")
        metrics_refused = await client.get(bridge.url + "/metrics")
        metrics = await client.get(bridge.url + "/metrics", headers=bearer(TOKEN))
    assert card.status_code == 200
    body = card.json()
    assert body["securitySchemes"] == {
        "bearer": {
            "httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "description": "A token the operator set (A2A_TOKEN or A2A_TOKEN_FILE).",
            }
        }
    }
    assert body["securityRequirements"] == [{"schemes": {"bearer": {}}}]
    assert health.status_code == 200
    assert ready.status_code == 200
    assert metrics_refused.status_code == 401
    assert metrics.status_code == 200


async def test_without_a_token_the_card_declares_no_scheme_and_nothing_asks_for_one(
    tmp_path: Path,
) -> None:
    async with serve_bridge(make_settings(tmp_path)) as bridge, httpx.AsyncClient() as client:
        card = (await client.get(bridge.url + CARD)).json()
        response = await client.post(bridge.rpc_url, json=send_body(), headers=A2A_HEADERS)
    assert "securitySchemes" not in card
    assert "securityRequirements" not in card
    assert response.status_code == 200


def test_token_check_accepts_only_an_exact_token() -> None:
    check = TokenCheck(parse_token_lines("A2A_TOKEN_FILE", [f"alice {TOKEN}", f"bob {OTHER}"]))
    assert check.principal_of(TOKEN) == "alice"
    assert check.principal_of(OTHER) == "bob"
    assert check.principal_of(TOKEN.upper()) is None
    assert check.principal_of(TOKEN[:-1]) is None
    assert not TokenCheck([]).enabled


# --- settings and the command line ------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.20", False),
        ("bridge.internal", False),
    ],
)
def test_which_hosts_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({"A2A_TOKEN": "short"}, "A2A_TOKEN: the token is 5 characters", id="short"),
        pytest.param(
            {"A2A_TOKEN": "has space in the middle!"}, "A2A_TOKEN: a token may hold", id="chars"
        ),
        pytest.param(
            {"A2A_TOKEN": TOKEN, "A2A_TOKEN_FILE": "tokens"},
            "A2A_TOKEN_FILE: set either",
            id="both",
        ),
        pytest.param({"A2A_TOKEN_FILE": "missing"}, "A2A_TOKEN_FILE: 'missing' does not", id="nf"),
        pytest.param({"A2A_TOKEN_FILE": "empty"}, "holds no token", id="empty-file"),
        pytest.param({"A2A_TOKEN_FILE": "weak"}, "A2A_TOKEN_FILE line 2: the token", id="weak"),
        pytest.param({"HOST": "0.0.0.0"}, "HOST: '0.0.0.0' is reachable", id="public"),
        pytest.param({"A2A_ALLOWED_HOSTS": "a.example:8080"}, "A2A_ALLOWED_HOSTS", id="port"),
        pytest.param({"ACP_MAX_SESSIONS": "0"}, "ACP_MAX_SESSIONS: 0 is out of range", id="max"),
        pytest.param({"ACP_MAX_SESSIONS": "2", "ACP_POOL_SIZE": "3"}, "ACP_POOL_SIZE", id="pool"),
        pytest.param({"A2A_MAX_BODY_BYTES": "10"}, "A2A_MAX_BODY_BYTES", id="body"),
    ],
)
def test_bad_security_settings_are_refused_with_the_variable_named(
    tmp_path: Path, env: dict[str, str], expected: str
) -> None:
    (tmp_path / "empty").write_text("# nothing yet\n\n")
    (tmp_path / "weak").write_text(f"{TOKEN}\nabc\n")
    with pytest.raises(ConfigError) as caught:
        Settings.from_env(env, cwd=tmp_path)
    assert expected in str(caught.value)
    assert TOKEN not in str(caught.value)


def run_serve(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("A2A_", "ACP_", "HOST"))}
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-m", "a2a_acp_bridge", "serve", "--port", "0", *args],
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


def test_serving_on_a_public_address_without_a_token_is_refused(tmp_path: Path) -> None:
    result = run_serve(tmp_path, {}, "--host", "0.0.0.0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "a2a-acp-bridge: HOST: '0.0.0.0' is reachable from other machines and no token is set: "
        "set A2A_TOKEN, A2A_TOKEN_FILE or A2A_JWT_ISSUER, or pass --insecure to serve "
        "without authentication"
    ]


@pytest.mark.parametrize(
    ("env", "args"),
    [
        pytest.param({"A2A_TOKEN": TOKEN}, (), id="token"),
        pytest.param({}, ("--insecure",), id="insecure"),
    ],
)
async def test_a_public_address_is_served_with_a_token_or_with_insecure(
    tmp_path: Path, env: dict[str, str], args: tuple[str, ...]
) -> None:
    log = tmp_path / "server.log"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("A2A_", "ACP_", "HOST"))}
    clean.update(env, LOG_FORMAT="json", ACP_POOL_SIZE="0")
    command = [sys.executable, "-m", "a2a_acp_bridge", "serve", "--host", "0.0.0.0", "--port", "0"]
    with log.open("w") as sink:
        proc = await anyio.open_process(
            [*command, *args], cwd=tmp_path, env=clean, stderr=sink, stdout=subprocess.DEVNULL
        )
    try:
        with anyio.fail_after(CLI_TIMEOUT_S):
            while '"event": "listening"' not in log.read_text():
                assert proc.returncode is None, log.read_text()
                await anyio.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(CLI_TIMEOUT_S):
            await proc.wait()
    # uvicorn re-raises the signal once its graceful shutdown is done.
    assert proc.returncode in (0, -signal.SIGTERM)


async def test_the_send_command_presents_the_token_and_fails_clearly_without_it(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"A2A_TOKEN": TOKEN})
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("A2A_", "ACP_"))}
    async with serve_bridge(settings) as bridge:
        command = [sys.executable, "-m", "a2a_acp_bridge", "send", "--url", bridge.url]
        with anyio.fail_after(CLI_TIMEOUT_S):
            from_env = await anyio.run_process(
                [*command, "write a.txt: via the cli"],
                env={**clean, "A2A_TOKEN": TOKEN},
                cwd=tmp_path,
                check=False,
            )
            without = await anyio.run_process(
                [*command, "write b.txt: refused"], env=clean, cwd=tmp_path, check=False
            )
    assert from_env.returncode == 0, from_env.stderr
    assert b"[COMPLETED]" in from_env.stdout
    # The answer is printed as it streams, once: the closing update is not printed again.
    assert from_env.stdout.count(b"Wrote a.txt") == 1, from_env.stdout
    assert without.returncode == 2
    assert b"401" in without.stderr
