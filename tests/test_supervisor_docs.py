"""The webhook contract's examples in docs/decisions.md are what the bridge sends, and
their signatures are right (a receiver written from the page must interoperate)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from a2a_acp_bridge.supervisor_webhook import (
    answer_message,
    authzen_request,
    bridge_request,
    read_authzen_answer,
    read_bridge_answer,
    request_message,
    sign,
)
from tests.support.scripted_supervisor import question

DOC = Path(__file__).resolve().parents[1] / "docs" / "decisions.md"
SECRET = "an-example-secret-of-32-or-more-characters"
QUESTION = question(
    id="7f3c2a9e4b1d4c8e9a0b1c2d3e4f5a6b",
    context_id="c1",
    task_id="t1",
    session_id="s1",
    asked_at=1764600000.0,
    deadline=1764600120.0,
)


def example(name: str) -> tuple[bytes, str]:
    """The example's JSON as bytes, and the first signature written after it."""
    text = DOC.read_text(encoding="utf-8")
    after = text.split(f"<!-- example: {name} -->\n```json\n", 1)[1]
    body, rest = after.split("\n```", 1)
    signature = re.search(r"sha256=[0-9a-f]{64}", rest)
    assert signature is not None
    return body.encode(), signature.group(0)


def test_the_documented_requests_are_what_the_bridge_sends_signed_as_shown() -> None:
    for name, build in (("bridge request", bridge_request), ("authzen request", authzen_request)):
        body, signature = example(name)
        sent = json.dumps(build(QUESTION), ensure_ascii=False, separators=(",", ":")).encode()
        assert body == sent, name
        assert sign(SECRET, request_message("1764600000", body)) == signature, name


def test_the_documented_answers_are_read_as_deny_and_signed_as_shown() -> None:
    for name, read in (
        ("bridge answer", read_bridge_answer),
        ("authzen answer", read_authzen_answer),
    ):
        body, signature = example(name)
        assert sign(SECRET, answer_message("1764600001", QUESTION.id, body)) == signature, name
        assert read(json.loads(body)) == ("deny", "pushes need a review"), name
