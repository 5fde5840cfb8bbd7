"""The two log formats and the ids bound to a task's work."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from a2a_acp_bridge.logs import log_ids, make_handler

CONTEXT = "ctx-0123456789"
TASK = "task-abcdefghij"


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    found = logging.getLogger("tests.logs")
    found.setLevel(logging.INFO)
    found.propagate = False
    yield found
    found.handlers.clear()


def lines(logger: logging.Logger, *, use_json: bool, emit: object) -> list[str]:
    stream = io.StringIO()
    logger.handlers[:] = [make_handler(stream, use_json=use_json)]
    assert callable(emit)
    emit()
    return stream.getvalue().splitlines()


def test_a_json_line_carries_the_bound_ids_and_an_explicit_id_wins(logger: logging.Logger) -> None:
    def emit() -> None:
        with log_ids(context_id=CONTEXT, task_id=TASK):
            logger.info("task started", extra={"follow_up": False})
            logger.info("permission decided", extra={"task_id": "explicit", "verdict": "deny"})
            with log_ids(task_id=None):
                logger.info("pool refill")
        logger.info("outside any task")

    records = [json.loads(line) for line in lines(logger, use_json=True, emit=emit)]
    assert [r["event"] for r in records] == [
        "task started",
        "permission decided",
        "pool refill",
        "outside any task",
    ]
    assert records[0]["context_id"] == CONTEXT
    assert records[0]["task_id"] == TASK
    assert records[0]["follow_up"] is False
    assert records[1]["task_id"] == "explicit"
    assert "task_id" not in records[2]
    assert records[2]["context_id"] == CONTEXT
    assert "context_id" not in records[3]
    assert {"ts", "level", "logger", "event"} <= set(records[0])


def test_a_text_line_puts_the_decision_first_and_short_ids_last(logger: logging.Logger) -> None:
    def emit() -> None:
        with log_ids(context_id=CONTEXT, task_id=TASK, session_id="sess-zyxwvutsrq"):
            logger.info(
                "permission decided",
                extra={
                    "title": "Write a b.txt",
                    "offered": [{"optionId": "reject", "kind": "reject_once"}],
                    "reason": "outside the root",
                    "verdict": "deny",
                    "rule": "change-outside-root",
                },
            )

    (line,) = lines(logger, use_json=False, emit=emit)
    assert line.split(" INFO ", 1)[1].lstrip() == (
        'permission decided  verdict=deny rule=change-outside-root reason="outside the root" '
        'title="Write a b.txt" offered=[{"optionId":"reject","kind":"reject_once"}] '
        "ctx=ctx-0123 task=task-abc session=sess-zyx"
    )
