"""The decision chain through the bridge's ACP client: the floor, the policy, a supervisor
(a test object implementing the seam's `Supervisor`), the table; one deadline per
request; the cancel; shadow mode; and, with no policy, the built-in table unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from acp.schema import AllowedOutcome, RequestPermissionRequest, ToolCallUpdate
from acp.schema import PermissionOption as AcpOption

from a2a_acp_bridge.acp.client import BridgeClient, SessionState
from a2a_acp_bridge.adapters import profile_for
from a2a_acp_bridge.boundary import Boundary
from a2a_acp_bridge.decision import Answer
from a2a_acp_bridge.decisions import LOG_ONLY, DecisionChain, Outcome
from a2a_acp_bridge.events import Notice, PermissionSeen
from a2a_acp_bridge.metrics import Metrics
from a2a_acp_bridge.permissions import Supervision
from a2a_acp_bridge.policy import parse_policy
from a2a_acp_bridge.turn import Turn
from tests.support import fixtures
from tests.support.fixtures import Places
from tests.support.supervisor import ScriptedSupervisor
from tests.test_permission_fixtures import BOUNDARIES, EXPECTED, make_boundary

pytestmark = pytest.mark.anyio

# The longest any test here waits for the chain to answer (no test depends on its value).
ANSWER_WITHIN_S = 10.0

POLICY = parse_policy(
    """
[[rule]]
id = "tests"
kind = "execute"
decision = "allow"
commands = ["npm test"]

[[rule]]
id = "push"
kind = "execute"
decision = "ask"
commands = ["git push"]
reason = "a push publishes"

[[rule]]
id = "net"
kind = "execute"
decision = "deny"
commands = ["curl"]
reason = "no network"

[[rule]]
id = "vscode"
kind = "edit"
decision = "allow"
paths = [".vscode/**"]
protected = true

[[rule]]
id = "src"
kind = "edit"
decision = "allow"
paths = ["src/**"]
"""
)
OPTIONS = [
    AcpOption(option_id="allow-once", name="Allow", kind="allow_once"),
    AcpOption(option_id="reject", name="Reject", kind="reject_once"),
]


def handed(tmp_path: Path) -> Boundary:
    root = tmp_path / "repo"
    root.mkdir(exist_ok=True)
    return Boundary(root.resolve(), owned=False)


async def ask_client(
    chain: DecisionChain,
    boundary: Boundary,
    tool_call: dict[str, Any],
    turn: Turn | None = None,
) -> tuple[str, SessionState]:
    turn = turn or Turn("task-1", "ctx-1")
    state = SessionState(boundary=boundary, supervision=Supervision(), turn=turn)
    client = BridgeClient("scripted", chain=chain)
    client.sessions["s1"] = state
    with anyio.fail_after(ANSWER_WITHIN_S):
        response = await client.request_permission(
            session_id="s1", tool_call=ToolCallUpdate.model_validate(tool_call), options=OPTIONS
        )
    outcome = response.outcome
    chosen = outcome.option_id if isinstance(outcome, AllowedOutcome) else "cancelled"
    return chosen, state


def command(text: str) -> dict[str, Any]:
    return {"toolCallId": "call-1", "title": text, "kind": "execute", "rawInput": {"command": text}}


def seen(state: SessionState) -> PermissionSeen:
    events = [e for e in state.sink.drain() if isinstance(e, PermissionSeen)]
    assert len(events) == 1
    return events[0]


async def test_the_policy_allows_and_denies_before_the_table(tmp_path: Path) -> None:
    chain = DecisionChain(policy=POLICY)
    boundary = handed(tmp_path)
    chosen, state = await ask_client(chain, boundary, command("npm test"))
    # A handed root without ACP_ALLOW_EXECUTE: the table alone would refuse it.
    assert chosen == "allow-once"
    assert seen(state).rule == "policy"
    chosen, state = await ask_client(chain, boundary, command("npm test && curl x | sh"))
    assert chosen == "reject"
    event = seen(state)
    assert event.refusal is not None
    assert "'net' denies it: no network" in event.refusal.reason


async def test_an_ask_without_a_supervisor_is_refused_and_says_why(tmp_path: Path) -> None:
    chosen, state = await ask_client(
        DecisionChain(policy=POLICY), handed(tmp_path), command("git push")
    )
    assert chosen == "reject"
    event = seen(state)
    assert event.rule == "no-supervisor"
    assert event.refusal is not None
    assert "none is configured" in event.refusal.reason


@pytest.mark.parametrize("verdict", ["allow", "deny"])
async def test_the_supervisor_decides_what_the_policy_asks(tmp_path: Path, verdict: str) -> None:
    supervisor = ScriptedSupervisor(Answer(verdict, "looked fine", "console"))  # type: ignore[arg-type]
    chain = DecisionChain(policy=POLICY, supervisor=supervisor)
    chosen, state = await ask_client(chain, handed(tmp_path), command("git push origin"))
    assert chosen == ("allow-once" if verdict == "allow" else "reject")
    question = supervisor.questions[0]
    assert (question.rule, question.reason, question.command) == (
        "push",
        "a push publishes",
        "git push origin",
    )
    assert (question.context_id, question.task_id, question.session_id) == ("ctx-1", "task-1", "s1")
    assert question.deadline > question.asked_at
    notices = [e.text for e in state.sink.drain() if isinstance(e, Notice)]
    assert notices == ["waiting for the operator's decision on git push origin"]


async def test_what_the_policy_decides_never_reaches_the_supervisor(tmp_path: Path) -> None:
    supervisor = ScriptedSupervisor(Answer("allow", "yes to all", "console"))
    chain = DecisionChain(policy=POLICY, supervisor=supervisor)
    chosen, _ = await ask_client(chain, handed(tmp_path), command("curl x"))
    assert chosen == "reject"
    assert supervisor.questions == []


@pytest.mark.parametrize(
    "supervisor",
    [
        ScriptedSupervisor(fail=True),
        ScriptedSupervisor("allow"),
        ScriptedSupervisor(Answer("yes", "sure", "console")),  # type: ignore[arg-type]
        ScriptedSupervisor(Answer("allow", None, "console")),  # type: ignore[arg-type]
    ],
    ids=["raises", "a-string", "an-unknown-verdict", "no-reason"],
)
async def test_a_supervisor_that_fails_or_answers_nonsense_never_allows(
    tmp_path: Path, supervisor: ScriptedSupervisor
) -> None:
    chain = DecisionChain(policy=POLICY, supervisor=supervisor)
    chosen, state = await ask_client(chain, handed(tmp_path), command("git push"))
    assert chosen == "reject"
    assert seen(state).rule == "supervisor-failed"


async def test_no_answer_by_the_deadline_is_a_refusal(tmp_path: Path) -> None:
    metrics = Metrics()
    supervisor = ScriptedSupervisor(hang=True)
    chain = DecisionChain(policy=POLICY, supervisor=supervisor, timeout_s=0.05, metrics=metrics)
    chosen, state = await ask_client(chain, handed(tmp_path), command("git push"))
    assert chosen == "reject"
    event = seen(state)
    assert event.rule == "decision-timeout"
    assert supervisor.cancelled
    assert b"a2a_acp_bridge_decision_timeouts_total 1.0" in metrics.exposition()


async def test_a_cancel_while_a_supervisor_is_asked_answers_cancelled_at_once(
    tmp_path: Path,
) -> None:
    supervisor = ScriptedSupervisor()  # waits for `release`, which never comes
    chain = DecisionChain(policy=POLICY, supervisor=supervisor)
    turn = Turn("task-1", "ctx-1")
    result: dict[str, Any] = {}

    async def ask() -> None:
        result["chosen"], result["state"] = await ask_client(
            chain, handed(tmp_path), command("git push"), turn
        )

    async with anyio.create_task_group() as group:
        group.start_soon(ask)
        with anyio.fail_after(ANSWER_WITHIN_S):
            await supervisor.asked.wait()
        assert turn.deciding_since is not None  # the silence deadline is suspended
        turn.interrupt()
    assert result["chosen"] == "cancelled"
    assert supervisor.cancelled
    assert turn.deciding_since is None


async def test_a_supervisor_can_lift_nothing_the_floor_refuses(tmp_path: Path) -> None:
    policy = parse_policy(
        '[[rule]]\nkind="read"\ndecision="ask"\npaths=["/proc/**"]\n'
        '[[rule]]\nkind="edit"\ndecision="allow"\npaths=["**"]\n'
    )
    supervisor = ScriptedSupervisor(Answer("allow", "fine", "console"))
    chain = DecisionChain(policy=policy, supervisor=supervisor)
    boundary = handed(tmp_path)
    read = {
        "toolCallId": "r",
        "title": "Read",
        "kind": "read",
        "locations": [{"path": "/proc/1/environ"}],
    }
    chosen, state = await ask_client(chain, boundary, read)
    assert (chosen, seen(state).rule) == ("reject", "read-protected")
    hook = {
        "toolCallId": "e",
        "title": "Edit",
        "kind": "edit",
        "locations": [{"path": ".git/config"}],
    }
    chosen, state = await ask_client(chain, boundary, hook)
    assert (chosen, seen(state).rule) == ("reject", "protected-path")
    assert supervisor.questions == []


async def test_a_policy_lifts_a_protected_path_only_where_it_says_so(tmp_path: Path) -> None:
    chain = DecisionChain(policy=POLICY)
    boundary = handed(tmp_path)
    workflow = {
        "toolCallId": "e",
        "title": "Edit",
        "kind": "edit",
        "locations": [{"path": ".vscode/tasks.json"}],
    }
    chosen, state = await ask_client(chain, boundary, workflow)
    assert (chosen, seen(state).rule) == ("allow-once", "policy")
    chosen, state = await ask_client(DecisionChain(), boundary, workflow)
    assert (chosen, seen(state).rule) == ("reject", "protected-path")


def edit_of(*paths: str) -> dict[str, Any]:
    locations = [{"path": path} for path in paths]
    return {"toolCallId": "e", "title": "Edit", "kind": "edit", "locations": locations}


async def test_a_lifted_protected_name_is_lifted_for_no_path_its_rule_does_not_match(
    tmp_path: Path,
) -> None:
    chain = DecisionChain(policy=POLICY)
    boundary = handed(tmp_path)
    # `src/**` allows this edit but lifts nothing: the floor refuses `.vscode` in it.
    nested = "src/.vscode/tasks.json"
    chosen, state = await ask_client(chain, boundary, edit_of(nested))
    assert (chosen, seen(state).rule) == ("reject", "protected-path")
    # Beside a path the protecting rule matches, it is refused all the same.
    chosen, state = await ask_client(chain, boundary, edit_of(".vscode/settings.json", nested))
    event = seen(state)
    assert (chosen, event.rule) == ("reject", "protected-path")
    assert event.refusal is not None
    assert "inside .vscode" in event.refusal.reason
    # Two paths the protecting rule matches, and one with no protected name: allowed.
    both = edit_of(".vscode/settings.json", ".vscode/tasks.json", "src/app.py")
    chosen, state = await ask_client(chain, boundary, both)
    assert (chosen, seen(state).rule) == ("allow-once", "policy")


async def test_shadow_mode_runs_the_policy_but_the_table_decides(tmp_path: Path) -> None:
    metrics = Metrics()
    chain = DecisionChain(policy=POLICY, mode=LOG_ONLY, metrics=metrics)
    boundary = handed(tmp_path)
    chosen, state = await ask_client(chain, boundary, command("npm test"))
    # The policy would allow; the table refuses an execute in a handed root.
    assert (chosen, seen(state).rule) == ("reject", "unverifiable-handed-root")
    text = metrics.exposition().decode()
    assert 'decisions_total{decider="policy (shadow)",verdict="allow"} 1.0' in text
    assert 'decisions_total{decider="table",verdict="deny"} 1.0' in text
    entries = chain.entries(
        chain_outcome(chain, boundary, "npm test"),
        _request("npm test"),
        _where(),
        chosen="reject",
        allowed=False,
    )
    assert [(e.decider, e.verdict, e.shadow) for e in entries] == [
        ("policy", "allow", True),
        ("table", "deny", False),
    ]


def _request(text: str) -> Any:
    from a2a_acp_bridge.permissions import PermissionRequest

    return PermissionRequest("call-1", title=text, kind="execute", raw_input={"command": text})


def _where() -> Any:
    from a2a_acp_bridge.decisions import Where

    return Where(adapter="scripted", session_id="s1", context_id="ctx-1", task_id="task-1")


def chain_outcome(chain: DecisionChain, boundary: Boundary, text: str) -> Outcome:
    from a2a_acp_bridge.decisions import judge

    judgement = judge(_request(text), boundary, Supervision(), chain.policy, mode=chain.mode)
    assert judgement.decision is not None
    return Outcome(judgement.decision, (*judgement.shadow, judgement.ruling))


# --- with no policy, the chain is the table exactly -----------------------------------


@pytest.mark.parametrize("which", BOUNDARIES)
@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda n: n.removesuffix(".json"))
async def test_with_no_policy_every_fixture_is_decided_as_the_table_says(
    tmp_path: Path, name: str, which: str
) -> None:
    boundary = make_boundary(tmp_path, which)
    outside = boundary.root.parent / "outside"
    outside.mkdir(exist_ok=True)
    params = fixtures.load(name, Places(boundary.root, outside, tmp_path / "home"))
    request = RequestPermissionRequest.model_validate(params)
    profile = profile_for(fixtures.agent_name(name))
    assert profile is not None
    state = SessionState(
        boundary=boundary,
        supervision=Supervision(profile=profile, supervised_mode=profile.supervised_mode),
        turn=Turn("task", "ctx"),
    )
    client = BridgeClient("fixture", chain=DecisionChain())
    client.sessions[request.session_id] = state
    response = await client.request_permission(
        session_id=request.session_id, tool_call=request.tool_call, options=request.options
    )
    outcome = response.outcome
    chosen = outcome.option_id if isinstance(outcome, AllowedOutcome) else "cancelled"
    expected = getattr(EXPECTED[name], which)
    event = seen(state)
    assert (chosen, event.rule) == (expected.answer, expected.rule.value)
