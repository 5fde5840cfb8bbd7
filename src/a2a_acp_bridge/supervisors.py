"""Which supervisor the operator configured (ACP_SUPERVISOR), and the webhook-then-console pair.

    ACP_SUPERVISOR=webhook          the webhook decides; no verdict from it is a deny
    ACP_SUPERVISOR=console          a human decides in /console; no click by the deadline
                                    is a deny
    ACP_SUPERVISOR=webhook,console  the webhook first: its allow or deny is final; when it
                                    gives no verdict (down, timeout, non-2xx, garbage, a bad
                                    signature, or an explicit {"decision": "ask"}), the
                                    question goes to the console for what is left of the
                                    same deadline, with the webhook's failure in its reason
    unset                           no supervisor: the chain denies every `ask`

Fail-closed either way: a failing webhook can only hand the question to a human, never
turn it into an allow, and a human who does not answer in time is a deny.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Protocol

from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.console import ConsoleSupervisor
from a2a_acp_bridge.decision import Answer, Question, Supervisor
from a2a_acp_bridge.metrics import Metrics
from a2a_acp_bridge.supervisor_webhook import Failure, WebhookSupervisor


class Consulted(Protocol):
    """A supervisor that can say it has no verdict instead of denying (the webhook)."""

    name: str

    async def consult(self, question: Question) -> Answer | Failure: ...


class FirstThenSecond:
    """`first`'s verdict when it gives one, else `second`'s (see the module's docstring)."""

    def __init__(self, first: Consulted, second: Supervisor) -> None:
        self.first = first
        self.second = second
        self.name = f"{first.name},{second.name}"

    async def ask(self, question: Question) -> Answer:
        result = await self.first.consult(question)
        if isinstance(result, Answer):
            return result
        note = f"the {self.first.name} gave no verdict: {result.detail}"
        reason = f"{question.reason} ({note})" if question.reason else note
        return await self.second.ask(replace(question, reason=reason))


def supervisor_from(settings: Settings, *, metrics: Metrics | None = None) -> Supervisor | None:
    """The supervisor ACP_SUPERVISOR names, built once at start (None: nobody)."""
    names = settings.supervisor
    if not names:
        return None

    def outcome(name: str) -> functools.partial[None] | None:
        return functools.partial(metrics.supervisor_answered, name) if metrics else None

    console = ConsoleSupervisor(on_outcome=outcome("console")) if "console" in names else None
    webhook = None
    if "webhook" in names:
        # config.check_supervisors made sure both are set.
        assert settings.supervisor_url is not None
        assert settings.supervisor_secret is not None
        webhook = WebhookSupervisor(
            settings.supervisor_url,
            settings.supervisor_secret,
            format=settings.supervisor_format,
            timeout_s=settings.supervisor_timeout_s,
            on_outcome=outcome("webhook"),
        )
    if webhook is not None and console is not None:
        return FirstThenSecond(webhook, console)
    return webhook or console


def find_console(supervisor: object) -> ConsoleSupervisor | None:
    """The console inside `supervisor` (itself, or the second of a pair), if any."""
    if isinstance(supervisor, ConsoleSupervisor):
        return supervisor
    if isinstance(supervisor, FirstThenSecond):
        return find_console(supervisor.second)
    return None
