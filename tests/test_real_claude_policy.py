"""The issue's "done when": a handed repository with the example policy lets a real
claude-agent-acp (against the fake Anthropic API) run `npm test` and refuses `curl`, asks a
supervisor about `git push` and follows its answer, and every decision is in the ledger
with its decider."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from a2a_acp_bridge.decision import Answer
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.script import Call, Script
from tests.support.real_adapters import HTTP_TIMEOUT_S, Rig, claude_rig, watch_logs
from tests.support.server import serve_bridge
from tests.support.supervisor import ScriptedSupervisor
from tests.support.wire import send

pytestmark = [pytest.mark.anyio, pytest.mark.adapters]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "policy-handed-repo.toml"
TOKEN = "decisions-real-claude-0123456789"


@pytest.fixture
def rig(anthropic: FakeAnthropic, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Rig:
    watch_logs(caplog)
    return claude_rig(anthropic, tmp_path)


def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    scripts = {"test": "node -e \"require('fs').writeFileSync('tested.txt', 'ok')\""}
    (repo / "package.json").write_text(json.dumps({"name": "r", "scripts": scripts}))
    # npm checks its registry for a newer npm on every run: not here (the fake refuses it).
    (repo / ".npmrc").write_text("update-notifier=false\noffline=true\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


async def test_a_handed_repository_under_the_example_policy_with_a_real_claude(
    rig: Rig, tmp_path: Path
) -> None:
    repo = repository(tmp_path)
    supervisor = ScriptedSupervisor(Answer("deny", "not today", "console"))
    script = rig.fake.add(
        Script(
            [
                Call("Bash", {"command": "npm test", "description": "Run the tests"}),
                Call(
                    "Bash",
                    {"command": "curl -s https://example.com -o page.html", "description": "Fetch"},
                ),
                Call("Bash", {"command": "git push origin main", "description": "Push"}),
            ]
        )
    )
    settings = rig.settings(tmp_path, ACP_CWD=str(repo), ACP_POLICY=str(EXAMPLE), A2A_TOKEN=TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        serve_bridge(settings, environ=rig.environ, supervisor=supervisor) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S, headers=auth) as client,
    ):
        task = await send(client, bridge.rpc_url, f"Test, fetch, push. {script.marker}")
        ledger = (await client.get(bridge.url + "/decisions")).json()["decisions"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert (repo / "tested.txt").read_text() == "ok"  # npm test ran, for real
    assert not (repo / "page.html").exists()
    rows = [(d["command"], d["decider"], d["verdict"], d["rule"]) for d in reversed(ledger)]
    assert rows == [
        ("npm test", "policy", "allow", "run-tests"),
        ("curl -s https://example.com -o page.html", "policy", "deny", "no-network"),
        ("git push origin main", "policy", "ask", "push-asks"),
        ("git push origin main", "console", "deny", "supervisor"),
    ]
    [question] = supervisor.questions
    assert (question.kind, question.command, question.adapter) == (
        "execute",
        "git push origin main",
        "claude",
    )
    assert rig.outside() == []
