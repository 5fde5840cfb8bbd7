"""Supervisors through the running bridge: a real A2A task, a real ACP subprocess asking to
`git push` in a handed repository under the example policy. A webhook that is down or lies
never leads to an allow; a genuine allow does; a cancel while the console waits ends the
wait at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.support.agents import CLAUDE_INFO, CLAUDE_MODES, scripted_agent
from tests.support.console import A2A_TOKEN, CONSOLE_TOKEN, serve_console
from tests.support.scripted_supervisor import SECRET, Reply, serve_supervisor, signed
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import answer_text, rpc, send, user_message

pytestmark = pytest.mark.anyio
EXAMPLE_POLICY = Path(__file__).resolve().parents[1] / "examples" / "policy-handed-repo.toml"
# A real task's whole turn: an adapter starts, asks, is answered, ends.
TASK_WAIT_S = 60.0


def push_agent(tmp_path: Path) -> str:
    step = {
        "op": "permission",
        "tool_call": {
            "toolCallId": "toolu_push",
            "name": "Bash",
            "status": "pending",
            "rawInput": {"command": "git push origin main", "description": "publish"},
            "title": "git push origin main",
            "kind": "execute",
            "content": [],
            "locations": [],
        },
        "options": [["allow-once", "Yes", "allow_once"], ["reject", "No", "reject_once"]],
    }
    script = {
        "agent_info": CLAUDE_INFO,
        "modes": CLAUDE_MODES,
        "config_mode": True,
        "turns": [[step]],
    }
    return scripted_agent(tmp_path, script, "push")


async def push_through_webhook(tmp_path: Path, reply: Reply | None) -> tuple[str, list[Any]]:
    """The agent's answer to its `git push` request, and what the webhook received."""
    repo = tmp_path / "repo"
    repo.mkdir()
    async with serve_supervisor(reply or signed({})) as hook:
        url = hook.url if reply is not None else hook.url.replace("/decide", "/nowhere")
        settings = make_settings(
            tmp_path,
            {
                "ACP_AGENT": push_agent(tmp_path),
                "ACP_CWD": str(repo),
                "ACP_POLICY": str(EXAMPLE_POLICY),
                "ACP_SUPERVISOR": "webhook",
                "ACP_SUPERVISOR_URL": url,
                "ACP_SUPERVISOR_SECRET": SECRET,
            },
        )
        async with serve_bridge(settings) as running, httpx.AsyncClient(timeout=TASK_WAIT_S) as c:
            task = await send(c, running.rpc_url, "push it")
        return answer_text(task), list(hook.received)


async def test_a_genuine_allow_from_the_webhook_lets_the_push_run(tmp_path: Path) -> None:
    answer, received = await push_through_webhook(
        tmp_path, signed({"decision": "allow", "reason": "reviewed"})
    )
    assert "permission toolu_push: allow-once" in answer
    body = received[0].json
    assert body["tool_call"]["command"] == "git push origin main"
    assert body["rule"] == "push-asks"
    assert body["boundary"]["owned"] is False


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(signed({"decision": "allow"}, secret="forged-" + "f" * 40), id="forged"),
        pytest.param(signed({"decision": "allow"}, question_id="0" * 32), id="replayed"),
        pytest.param(signed({"decision": "allow"}, status=500), id="500"),
        pytest.param(signed(b"allow"), id="garbage"),
        pytest.param(signed({"optionId": "allow-once"}), id="an-option-id"),
        pytest.param(None, id="not-found"),
    ],
)
async def test_a_webhook_that_lies_or_fails_never_leads_to_an_allow(
    tmp_path: Path, reply: Reply | None
) -> None:
    answer, _ = await push_through_webhook(tmp_path, reply)
    assert "permission toolu_push: reject" in answer


async def test_a_cancel_while_the_console_waits_ends_the_wait_at_once(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    async with serve_console(
        tmp_path,
        ACP_AGENT=push_agent(tmp_path),
        ACP_CWD=str(repo),
        ACP_POLICY=str(EXAMPLE_POLICY),
    ) as bridge:
        headers = {"Authorization": f"Bearer {A2A_TOKEN}"}
        async with httpx.AsyncClient(headers=headers, timeout=TASK_WAIT_S) as client:
            reply = await rpc(
                client,
                bridge.running.rpc_url,
                "SendMessage",
                {"message": user_message("push it"), "configuration": {"returnImmediately": True}},
            )
            task_id = reply["result"]["task"]["id"]
            [waiting] = await bridge.until_waiting(1)
            assert waiting["task_id"] == task_id
            cancelled = await rpc(client, bridge.running.rpc_url, "CancelTask", {"id": task_id})
            assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
            with anyio.fail_after(TASK_WAIT_S):
                while bridge.console.waiting():
                    await bridge.console.changed(bridge.console.version)
            assert bridge.console.recent()[0]["how"] == "cancelled"
            late = await client.post(
                f"{bridge.url}/console/decisions/{waiting['id']}",
                json={"verdict": "allow"},
                headers={"Authorization": f"Bearer {CONSOLE_TOKEN}"},
            )
            assert late.status_code == 409
