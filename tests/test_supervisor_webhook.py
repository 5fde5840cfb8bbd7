"""The supervisor webhook against a real HTTP server on 127.0.0.1: only a fresh answer
signed for this very question gives a verdict, and every other outcome is a deny."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import replace
from typing import Any

import pytest

from a2a_acp_bridge.decision import DIFF_LIMIT_BYTES, Answer
from a2a_acp_bridge.supervisor_webhook import (
    REPLAY_WINDOW_S,
    Failure,
    WebhookSupervisor,
    check_request,
)
from tests.support.scripted_supervisor import (
    SECRET,
    Received,
    Reply,
    hmac_hex,
    never_answer,
    question,
    serve_supervisor,
    signed,
)

pytestmark = pytest.mark.anyio


async def consult(reply: Reply, **options: Any) -> tuple[Answer | Failure, list[Received]]:
    q = options.pop("q", None) or question()
    async with serve_supervisor(reply) as hook:
        supervisor = WebhookSupervisor(hook.url, SECRET, **options)
        result = await supervisor.consult(q)
        answer = await supervisor.ask(q) if isinstance(result, Failure) else result
        assert answer.decider == "webhook"
        if isinstance(result, Failure):
            assert answer.verdict == "deny"
            assert result.detail in answer.reason
        return result, list(hook.received)


async def test_a_signed_allow_is_an_allow_with_its_reason() -> None:
    result, received = await consult(signed({"decision": "allow", "reason": "pushes are fine"}))
    assert result == Answer("allow", "pushes are fine", "webhook")
    assert len(received) == 1


async def test_a_signed_deny_is_a_deny_with_its_reason() -> None:
    result, _ = await consult(signed({"decision": "deny", "reason": "not on a Friday"}))
    assert result == Answer("deny", "not on a Friday", "webhook")


async def test_the_request_is_signed_over_its_timestamp_and_body_and_carries_the_call() -> None:
    q = question(diff="+" * (DIFF_LIMIT_BYTES * 2), locations=("src/a.py",))
    _, received = await consult(signed({"decision": "deny", "reason": "x"}), q=q)
    request = received[0]
    stamp = request.headers["x-bridge-timestamp"]
    assert request.headers["x-bridge-signature"] == hmac_hex(
        SECRET, stamp.encode() + b"." + request.body
    )
    assert abs(int(stamp) - time.time()) < REPLAY_WINDOW_S
    assert check_request(SECRET, request.headers, request.body, now=time.time()) is None
    body = request.json
    assert body["id"] == q.id == request.headers["x-bridge-id"] == request.headers["x-request-id"]
    assert body["principal"] == "default"
    assert (body["context_id"], body["task_id"], body["session_id"]) == (
        "ctx-1",
        "task-1",
        "sess-1",
    )
    assert body["adapter"] == "claude"
    call = body["tool_call"]
    assert call["kind"] == "execute"
    assert call["tool_name"] == "Bash"
    assert call["command"] == "git push origin main"
    assert call["raw_input"] == {"command": "git push origin main", "description": "push"}
    assert call["locations"] == ["src/a.py"]
    # The diff is cut to the limit, and says so.
    assert len(call["diff"].encode()) <= DIFF_LIMIT_BYTES + 20
    assert call["diff"].endswith("[truncated]")
    assert body["boundary"] == {"root": "/srv/repo", "owned": False, "allow_execute": True}
    assert (body["rule"], body["reason"]) == ("ask-git-push", "a push leaves the machine")


async def test_a_supervisor_that_is_down_is_a_deny() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens there any more: the connection is refused.
    supervisor = WebhookSupervisor(f"http://127.0.0.1:{port}/decide", SECRET)
    result = await supervisor.consult(question())
    assert isinstance(result, Failure)
    assert result.cause == "down"
    answer = await supervisor.ask(question())
    assert answer.verdict == "deny"
    assert "could not be reached" in answer.reason


async def test_a_supervisor_slower_than_the_deadline_is_a_deny_before_it() -> None:
    q = question(deadline=time.time() + 1.0)
    async with serve_supervisor(signed({})) as hook:
        hook.reply = never_answer(lambda: hook.release)
        supervisor = WebhookSupervisor(hook.url, SECRET, timeout_s=30.0)
        result = await supervisor.consult(q)
        assert isinstance(result, Failure)
        assert result.cause == "timeout"
        # Its budget was what was left before the question's deadline, not its own 30 s.
        budget = float(result.detail.removeprefix("no answer within ").removesuffix(" s"))
        assert budget < 1.0


async def test_a_supervisor_slower_than_its_own_timeout_is_a_deny() -> None:
    async with serve_supervisor(signed({})) as hook:
        hook.reply = never_answer(lambda: hook.release)
        supervisor = WebhookSupervisor(hook.url, SECRET, timeout_s=0.5)
        result = await supervisor.consult(question())  # the deadline is a minute away
        assert isinstance(result, Failure)
        assert (result.cause, result.detail) == ("timeout", "no answer within 0.5 s")


async def test_a_question_already_past_its_deadline_is_not_sent() -> None:
    async with serve_supervisor(signed({"decision": "allow"})) as hook:
        supervisor = WebhookSupervisor(hook.url, SECRET)
        result = await supervisor.consult(question(deadline=time.time() - 1))
        assert isinstance(result, Failure)
        assert result.cause == "timeout"
        assert hook.received == []


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        pytest.param(b"not json at all", "garbage", id="not-json"),
        pytest.param(b"<html>allow</html>", "garbage", id="html"),
        pytest.param(["allow"], "garbage", id="a-list"),
        pytest.param({"decision": "ALLOW"}, "garbage", id="uppercase"),
        pytest.param({"decision": True}, "garbage", id="a-boolean-in-the-bridge-format"),
        pytest.param({"verdict": "allow"}, "garbage", id="another-field"),
        pytest.param({"optionId": "allow_always"}, "garbage", id="only-an-option-id"),
        pytest.param({"decision": "ask"}, "abstained", id="abstains"),
    ],
)
async def test_an_answer_that_is_not_allow_or_deny_is_a_deny(answer: Any, cause: str) -> None:
    result, _ = await consult(signed(answer))
    assert isinstance(result, Failure)
    assert result.cause == cause


async def test_an_option_id_in_the_answer_is_ignored() -> None:
    # The bridge alone picks among the agent's options: "allow" with a reject option id
    # is an allow, "deny" with allow_always a deny, and the Answer carries no option.
    allow, _ = await consult(signed({"decision": "allow", "reason": "ok", "optionId": "reject"}))
    deny, _ = await consult(
        signed({"decision": "deny", "reason": "no", "optionId": "allow_always", "mode": "yolo"})
    )
    assert allow == Answer("allow", "ok", "webhook")
    assert deny == Answer("deny", "no", "webhook")


@pytest.mark.parametrize("status", [201, 202])
async def test_any_2xx_with_a_signed_verdict_counts(status: int) -> None:
    result, _ = await consult(signed({"decision": "allow", "reason": "ok"}, status=status))
    assert result == Answer("allow", "ok", "webhook")


@pytest.mark.parametrize("status", [301, 400, 403, 500, 503])
async def test_a_non_2xx_status_is_a_deny_even_with_a_signed_allow(status: int) -> None:
    result, _ = await consult(signed({"decision": "allow", "reason": "ok"}, status=status))
    assert isinstance(result, Failure)
    assert result.cause == "status"
    assert str(status) in result.detail


async def test_an_answer_signed_with_another_secret_is_a_deny() -> None:
    result, _ = await consult(signed({"decision": "allow"}, secret="forged-" + "x" * 40))
    assert isinstance(result, Failure)
    assert (result.cause, result.detail) == ("signature", "the answer's signature does not match")


async def test_an_unsigned_answer_is_a_deny() -> None:
    async def unsigned(_request: Received) -> tuple[int, bytes, dict[str, str]]:
        return 200, json.dumps({"decision": "allow"}).encode(), {}

    result, _ = await consult(unsigned)
    assert isinstance(result, Failure)
    assert (result.cause, result.detail) == ("signature", "the answer is not signed")


async def test_a_stale_answer_is_a_deny() -> None:
    stale = time.time() - REPLAY_WINDOW_S - 5
    result, _ = await consult(signed({"decision": "allow"}, stamp=stale))
    assert isinstance(result, Failure)
    assert result.cause == "signature"
    assert "window" in result.detail


async def test_an_allow_signed_for_another_question_is_a_deny() -> None:
    # A captured answer replayed to a later question: the signature names the question.
    result, _ = await consult(signed({"decision": "allow"}, question_id="0" * 32))
    assert isinstance(result, Failure)
    assert result.cause == "signature"


async def test_a_tampered_answer_body_is_a_deny() -> None:
    genuine = signed({"decision": "deny", "reason": "no"})

    async def tampered(request: Received) -> tuple[int, bytes, dict[str, str]]:
        status, _body, headers = await genuine(request)
        return status, json.dumps({"decision": "allow", "reason": "no"}).encode(), headers

    result, _ = await consult(tampered)
    assert isinstance(result, Failure)
    assert result.cause == "signature"


async def test_an_answer_too_large_is_a_deny() -> None:
    result, _ = await consult(signed({"decision": "allow", "reason": "x" * 100_000}))
    assert isinstance(result, Failure)
    assert result.cause == "too_large"


async def test_a_captured_request_replayed_is_detectable_by_the_receiver() -> None:
    _, received = await consult(signed({"decision": "deny"}))
    request = received[0]
    now = time.time()
    assert check_request(SECRET, request.headers, request.body, now=now) is None
    # Moved to a fresh timestamp, the signature no longer matches ...
    moved = {**request.headers, "x-bridge-timestamp": str(int(now) + 1)}
    assert check_request(SECRET, moved, request.body, now=now) == (
        "the request's signature does not match"
    )
    # ... a changed body neither ...
    forged = request.body.replace(b"git push", b"git pull")
    assert check_request(SECRET, request.headers, forged, now=now) is not None
    # ... and as it was, it is stale once the window has passed.
    later = now + REPLAY_WINDOW_S + 1
    problem = check_request(SECRET, request.headers, request.body, now=later)
    assert problem is not None
    assert "window" in problem
    # Inside the window, the receiver refuses an id it already answered (the contract).
    assert request.json["id"] == request.headers["x-bridge-id"]


async def test_the_authzen_format_asks_an_evaluation_and_reads_true_as_allow() -> None:
    answer = {"decision": True, "context": {"reason_user": {"en-403": "ok by policy 7"}}}
    q = question(kind="edit", title="Edit src/a.py", command=None, locations=("src/a.py",))
    result, received = await consult(signed(answer), format="authzen", q=q)
    assert result == Answer("allow", "ok by policy 7", "webhook")
    body = received[0].json
    assert set(body) == {"subject", "action", "resource", "context"}
    assert body["subject"] == {"type": "a2a_principal", "id": "default"}
    assert body["action"]["name"] == "edit"
    assert body["resource"]["id"] == "toolu_01"
    assert body["resource"]["properties"]["locations"] == ["src/a.py"]
    assert body["resource"]["properties"]["root"] == "/srv/repo"
    assert body["context"]["id"] == q.id
    assert body["context"]["task_id"] == "task-1"


async def test_the_authzen_format_reads_false_as_deny_with_the_reason() -> None:
    answer = {"decision": False, "context": {"reason_user": "pushes need a review"}}
    result, _ = await consult(signed(answer), format="authzen")
    assert result == Answer("deny", "pushes need a review", "webhook")


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param({"decision": "true"}, id="a-string"),
        pytest.param({"decision": 1}, id="one"),
        pytest.param({"decision": "allow"}, id="the-bridge-format"),
        pytest.param({}, id="no-decision"),
    ],
)
async def test_an_authzen_answer_without_a_boolean_decision_is_a_deny(answer: Any) -> None:
    result, _ = await consult(signed(answer), format="authzen")
    assert isinstance(result, Failure)
    assert result.cause == "garbage"


async def test_an_unsigned_authzen_answer_is_a_deny() -> None:
    async def unsigned(_request: Received) -> tuple[int, bytes, dict[str, str]]:
        return 200, b'{"decision": true}', {}

    result, _ = await consult(unsigned, format="authzen")
    assert isinstance(result, Failure)
    assert result.cause == "signature"


def test_only_an_http_url_is_accepted() -> None:
    for url in ("file:///etc/passwd", "ftp://example.org/x", "unix:/run/x.sock", "/decide"):
        with pytest.raises(ValueError, match="http"):
            WebhookSupervisor(url, SECRET)


def test_the_secret_stays_out_of_the_repr() -> None:
    supervisor = WebhookSupervisor("http://127.0.0.1:9/decide", SECRET)
    assert SECRET not in repr(supervisor)
    assert SECRET not in str(vars(supervisor).get("url"))


async def test_a_huge_raw_input_is_cut_before_it_is_sent() -> None:
    q = replace(question(), raw_input={"command": "echo " + "y" * 200_000})
    _, received = await consult(signed({"decision": "deny"}), q=q)
    raw = received[0].json["tool_call"]["raw_input"]
    assert set(raw) == {"truncated"}
    assert len(received[0].body) < 100_000
