"""Attacks on the bridge from inside a conversation, through the running bridge over HTTP.

Each test plays a prompt-injected model behind an honest adapter: the demo agent runs
whatever `run COMMAND` line it is sent, and the bridge allows commands in its own
sandboxes. The bridge is the real `serve` process, started by the test in a working
directory of its own, with a `.env`, a token file and a secret in its environment; with
isolation on (the default) the kernel must stop every attack below. The controls with
`ACP_ISOLATION=off` show each attack is real: there, it succeeds.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.postgres import PostgresCluster, tcp_port_for
from tests.support.served import ServedBridge, bridge_environment, run_serve, served_bridge
from tests.support.wire import answer_text, rpc, send, status_text

pytestmark = pytest.mark.anyio

TOKEN = "isolation-test-token-0123456789abcdef"
DOTENV_SECRET = "dotenv-secret-6f1c2a"
ENVIRON_SECRET = "environ-secret-93be0d"
HOME_SECRET = "operator-home-secret-41d7"
OTHER_SECRET = "other-conversation-secret-0c55"
NO_LANDLOCK = Path(__file__).resolve().parent / "support" / "no_landlock.py"
# The bridge's own Python: readable by every adapter, unlike the operator's PATH shims.
PYTHON = sys.executable
HTTP_TIMEOUT_S = 60.0


@dataclass
class Operator:
    """The bridge's working directory (.env, token file), the operator's HOME, the state."""

    root: Path
    workdir: Path
    home: Path

    @property
    def sandboxes(self) -> Path:
        return self.workdir / ".acp-sandboxes"

    @property
    def state(self) -> Path:
        return self.workdir / ".a2a-acp-bridge"

    def environment(self, **extra: str) -> dict[str, str]:
        return bridge_environment(
            {
                "A2A_TOKEN_FILE": "tokens.txt",
                "BRIDGE_ONLY_SECRET": ENVIRON_SECRET,
                "HOME": str(self.home),
                **extra,
            }
        )


@pytest.fixture
def operator(tmp_path: Path) -> Operator:
    workdir = tmp_path / "bridge"
    workdir.mkdir()
    (workdir / ".env").write_text(f"DOTENV_NOTE={DOTENV_SECRET}\n")
    (workdir / "tokens.txt").write_text(f"{TOKEN}\n")
    home = tmp_path / "operator-home"
    home.mkdir()
    (home / "secret.txt").write_text(HOME_SECRET)
    return Operator(tmp_path, workdir, home)


@contextlib.asynccontextmanager
async def bridge_and_client(
    operator: Operator, **extra: str
) -> AsyncIterator[tuple[ServedBridge, httpx.AsyncClient]]:
    async with (
        served_bridge(operator.workdir, operator.environment(**extra)) as served,
        httpx.AsyncClient(
            timeout=HTTP_TIMEOUT_S, headers={"Authorization": f"Bearer {TOKEN}"}
        ) as client,
    ):
        yield served, client


async def run(
    client: httpx.AsyncClient, served: ServedBridge, *commands: str, context_id: str | None = None
) -> dict[str, Any]:
    """One task running each command (a `run` line each) in the conversation's sandbox."""
    text = "\n".join(f"run {command}" for command in commands)
    fields = {"context_id": context_id} if context_id else {}
    task = await send(client, f"{served.url}/", text, **fields)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task["status"])
    return task


def sandbox_of(served: ServedBridge, pid: int | None = None) -> Path:
    """The sandbox of the (last, or `pid`'s) adapter the bridge logged as spawned."""
    spawned = [line for line in served.events("adapter spawned") if pid in (None, line["pid"])]
    return Path(spawned[-1]["cwd"])


# --- the bridge's own secrets ------------------------------------------------------------


async def test_a_command_cannot_read_the_bridges_env_file_token_file_or_process_memory(
    operator: Operator,
) -> None:
    async with bridge_and_client(operator) as (served, client):
        task = await run(
            client,
            served,
            f"cat {operator.workdir}/.env",
            f"cat {operator.workdir}/tokens.txt",
            f"cat /proc/{served.pid}/environ",
            f"head -c 64 /proc/{served.pid}/mem",
            f"ls {operator.workdir}",
            f"cat {operator.home}/secret.txt",
        )
    answer = answer_text(task)
    for secret in (DOTENV_SECRET, TOKEN, ENVIRON_SECRET, HOME_SECRET, "tokens.txt\n"):
        assert secret not in answer
    assert answer.count("Permission denied") == 6, answer


async def test_without_isolation_the_same_commands_read_the_bridges_secrets(
    operator: Operator,
) -> None:
    # The control: the attack above is real, and only the kernel stops it.
    async with bridge_and_client(operator, ACP_ISOLATION="off") as (served, client):
        task = await run(
            client,
            served,
            f"cat {operator.workdir}/.env",
            f"cat {operator.workdir}/tokens.txt",
            f"cat {operator.home}/secret.txt",
        )
    answer = answer_text(task)
    for secret in (DOTENV_SECRET, TOKEN, HOME_SECRET):
        assert secret in answer


# --- other conversations -----------------------------------------------------------------


async def test_a_command_cannot_reach_another_conversations_sandbox_home_or_adapter(
    operator: Operator,
) -> None:
    async with bridge_and_client(operator) as (served, client):
        first = await send(client, f"{served.url}/", f"write secret.txt: {OTHER_SECRET}")
        assert first["status"]["state"] == "TASK_STATE_COMPLETED"
        other = served.events("adapter spawned")[-1]
        other_root = Path(other["cwd"])
        other_home = operator.state / "homes" / other_root.name
        assert (other_root / "secret.txt").read_text().strip() == OTHER_SECRET
        task = await run(
            client,
            served,
            f"cat {other_root}/secret.txt",
            f"ls {other_root}",
            f"ls {operator.sandboxes}",
            f"ls {other_home}",
            f"cat /proc/{other['pid']}/environ",
            f"kill -TERM {other['pid']}",
            ptrace(other["pid"]),
        )
        mine = sandbox_of(served)
        # The other conversation's adapter still serves it.
        again = await send(
            client, f"{served.url}/", "read secret.txt", context_id=first["contextId"]
        )
    assert mine != other_root
    answer = answer_text(task)
    assert OTHER_SECRET not in answer
    assert other_root.name not in answer.replace(str(other_root), "").replace(str(other_home), "")
    assert answer.count("Permission denied") == 5, answer
    assert "Operation not permitted" in answer
    assert f"ptrace {other['pid']} -1 {errno.EPERM}" in answer
    assert OTHER_SECRET in answer_text(again)


# --- writes outside ----------------------------------------------------------------------


async def test_a_command_cannot_write_outside_its_sandbox_and_its_home(
    operator: Operator, tmp_path: Path
) -> None:
    host_tmp = Path("/tmp") / f"isolation-{os.getpid()}-{tmp_path.name}"
    targets = [
        host_tmp,
        operator.home / "planted",
        operator.workdir / "planted",
        operator.sandboxes / "planted",
        operator.state / "planted",
    ]
    try:
        async with bridge_and_client(operator) as (served, client):
            task = await run(
                client,
                served,
                *(f"touch {target}" for target in targets),
                "touch inside.txt",
                'touch "$TMPDIR/scratch" && touch "$HOME/.note" && echo own-state-ok',
            )
            root = sandbox_of(served)
    finally:
        leaked = [target for target in targets if target.exists()]
        with contextlib.suppress(FileNotFoundError):
            host_tmp.unlink()
    assert leaked == []
    answer = answer_text(task)
    assert answer.count("Permission denied") == len(targets), answer
    assert (root / "inside.txt").exists()
    assert "own-state-ok" in answer
    home = operator.state / "homes" / root.name
    assert (home / ".note").exists()
    assert (home / "tmp" / "scratch").exists()


# --- the bridge's port and process -------------------------------------------------------


def ptrace(pid: int) -> str:
    """A command that tries PTRACE_ATTACH on `pid` and prints `ptrace PID RESULT ERRNO`."""
    call = f"libc.ptrace(16, {pid}, 0, 0)"
    code = (
        "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
        f"print('ptrace', {pid}, {call}, ctypes.get_errno())"
    )
    return f'{PYTHON} -c "{code}"'


def connect(port: int) -> str:
    """A command that tries 127.0.0.1:port and prints `connect PORT ERRNO` (0: connected)."""
    attempt = f"socket.socket().connect_ex(('127.0.0.1', {port}))"
    code = f"import socket; print('connect', {port}, {attempt})"
    return f'{PYTHON} -c "{code}"'


async def test_a_command_cannot_connect_to_the_bridges_port_yet_reaches_other_local_servers(
    operator: Operator,
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        other_port = listener.getsockname()[1]
        async with bridge_and_client(operator) as (served, client):
            task = await run(client, served, connect(served.port), connect(other_port))
    answer = answer_text(task)
    assert f"connect {served.port} {errno.EACCES}" in answer
    assert f"connect {other_port} 0" in answer


async def test_a_command_cannot_connect_to_the_shared_state_database(
    operator: Operator, postgres: PostgresCluster, postgres_database: str
) -> None:
    # Replicas share PostgreSQL over the network: an agent that reached it could write a
    # handover as any caller, or any task's state. Its port is kept like the bridge's own.
    async with tcp_port_for(postgres) as port:
        url = f"postgresql+asyncpg://bridge@127.0.0.1:{port}/{postgres_database}"
        async with bridge_and_client(operator, A2A_DATABASE_URL=url) as (served, client):
            task = await run(client, served, connect(port))
    assert f"connect {port} {errno.EACCES}" in answer_text(task)


async def test_a_command_cannot_connect_to_the_state_database_s_unix_socket(
    operator: Operator, postgres: PostgresCluster, postgres_database: str
) -> None:
    socket_path = postgres.socket_dir / ".s.PGSQL.5432"
    attempt = f"socket.socket(socket.AF_UNIX).connect_ex('{socket_path}')"
    code = f"import socket; print('unix', {attempt})"
    url = postgres.url(postgres_database)
    async with bridge_and_client(operator, A2A_DATABASE_URL=url) as (served, client):
        task = await run(client, served, f'{PYTHON} -c "{code}"')
    assert f"unix {errno.EACCES}" in answer_text(task)


async def test_a_command_cannot_signal_the_bridge_which_keeps_serving(operator: Operator) -> None:
    async with bridge_and_client(operator) as (served, client):
        task = await run(
            client,
            served,
            f"kill -TERM {served.pid}; echo term=$?",
            f"kill -KILL {served.pid}; echo kill=$?",
            f"kill -0 {served.pid}; echo probe=$?",
            ptrace(served.pid),
        )
        health = await client.get(f"{served.url}/healthz")
        assert served.process.returncode is None
        assert served.events("shutting down") == []
    answer = answer_text(task)
    assert "term=1" in answer
    assert "kill=1" in answer
    assert "probe=1" in answer
    assert answer.count("Operation not permitted") == 3
    assert f"ptrace {served.pid} -1 {errno.EPERM}" in answer
    assert health.status_code == 200


# --- a handed directory --------------------------------------------------------------------


async def test_with_acp_cwd_the_handed_directory_is_writable_and_its_parent_is_not(
    operator: Operator,
) -> None:
    project = operator.root / "project"
    project.mkdir()
    async with bridge_and_client(operator, ACP_CWD=str(project), ACP_ALLOW_EXECUTE="true") as (
        served,
        client,
    ):
        task = await run(
            client,
            served,
            f"touch {project}/made.txt && echo made",
            f"touch {project}/../escaped.txt",
            f"ls {project}/..",
        )
    answer = answer_text(task)
    assert (project / "made.txt").exists()
    assert not (operator.root / "escaped.txt").exists()
    assert "made" in answer
    assert answer.count("Permission denied") == 2, answer


# --- what the bridge says ------------------------------------------------------------------


async def test_the_log_readyz_and_card_say_which_isolation_is_in_force(
    operator: Operator,
) -> None:
    async with bridge_and_client(operator) as (served, client):
        ready = (await client.get(f"{served.url}/readyz")).json()
        card = (await client.get(f"{served.url}/.well-known/agent-card.json")).json()
    listening = served.events("listening")[0]
    assert listening["isolation"].startswith("landlock-abi")
    assert ready["checks"]["isolation"]["mechanism"] == "landlock"
    assert ready["checks"]["isolation"]["abi"] >= 6
    assert "confined by the kernel (Landlock" in card["description"]


# --- fail closed ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        pytest.param("ENOSYS", "the kernel offers no Landlock", id="no-landlock"),
        pytest.param("EPERM", "a seccomp profile forbids the Landlock system calls", id="seccomp"),
    ],
)
def test_serve_refuses_to_start_when_the_kernel_cannot_confine_adapters(
    operator: Operator, error: str, reason: str
) -> None:
    result = run_serve(
        operator.workdir,
        operator.environment(),
        launcher=(PYTHON, str(NO_LANDLOCK), error),
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("a2a-acp-bridge: ACP_ISOLATION: adapter isolation is unavailable: ")
    assert reason in lines[0]
    assert "set ACP_ISOLATION=off to run adapters without kernel confinement (weaker" in lines[0]


async def test_without_landlock_acp_isolation_off_serves_and_says_so(operator: Operator) -> None:
    env = operator.environment(ACP_ISOLATION="off")
    async with (
        served_bridge(
            operator.workdir, env, launcher=(PYTHON, str(NO_LANDLOCK), "ENOSYS")
        ) as served,
        httpx.AsyncClient(
            timeout=HTTP_TIMEOUT_S, headers={"Authorization": f"Bearer {TOKEN}"}
        ) as client,
    ):
        task = await send(client, f"{served.url}/", "write done.txt: ran unconfined")
        ready = (await client.get(f"{served.url}/readyz")).json()
        card = (await client.get(f"{served.url}/.well-known/agent-card.json")).json()
        reply = await rpc(client, f"{served.url}/", "GetTask", {"id": task["id"]})
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "result" in reply
    assert served.events("listening")[0]["isolation"] == "off"
    assert served.events("adapter spawned")[0]["isolation"] == "off"
    assert ready["checks"]["isolation"] == {"ok": True, "mechanism": "off"}
    assert "without kernel confinement (ACP_ISOLATION=off)" in card["description"]
