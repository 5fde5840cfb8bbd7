"""The supervisor webhook: a signed POST per question, a signed allow or deny back.

    bridge ──POST ACP_SUPERVISOR_URL─────────────────────────▶ supervisor
           X-Bridge-Id: <question id>
           X-Bridge-Timestamp: <unix seconds>
           X-Bridge-Signature: sha256=HMAC(secret, "<timestamp>.<body>")
           body: the question (`bridge` format) or an AuthZEN 1.0 evaluation request
    bridge ◀──200─────────────────────────────────────────── supervisor
           X-Bridge-Timestamp: <unix seconds>
           X-Bridge-Signature: sha256=HMAC(secret, "<timestamp>.<question id>.<body>")
           body: {"decision": "allow"|"deny", "reason": "..."}       (bridge)
                 {"decision": true|false, "context": {"reason_user": ...}}  (authzen)

The answer's signature covers the question's id, so a captured `allow` cannot be replayed
as the answer to another question; both timestamps must lie within REPLAY_WINDOW_S of the
receiver's clock, so a captured request is stale after it (the receiver checks that, and
keeps the ids it answered within the window to refuse a second delivery).

Only the verdict and the reason count: an option id, a "mode" or anything else in the
answer is ignored (the bridge alone chooses among the options the agent offered). Every
failure is a `Failure` with its cause (down, timeout, status, garbage, signature,
too_large, abstained), which `ask` turns into a deny with a clear reason and which
`FirstThenSecond` (supervisors.py) hands to the console instead.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from a2a_acp_bridge.decision import DIFF_LIMIT_BYTES, Answer, Question, log_answer

logger = logging.getLogger(__name__)

TIMESTAMP_HEADER = "X-Bridge-Timestamp"
SIGNATURE_HEADER = "X-Bridge-Signature"
ID_HEADER = "X-Bridge-Id"
SIGNATURE_SCHEME = "sha256="
# A signed message older or newer than this is refused (a receiver's clock may drift a
# little; five minutes is the window Stripe and Slack use for the same scheme).
REPLAY_WINDOW_S = 300.0
# The largest answer read: a verdict and a reason need a few hundred bytes.
MAX_ANSWER_BYTES = 64 * 1024
# rawInput handed to the supervisor is cut to this much JSON (a heredoc can be huge).
RAW_INPUT_LIMIT_BYTES = 64 * 1024
# Under the question's own deadline, so the webhook's deny (with its cause) arrives
# before the chain's timeout does.
DEADLINE_MARGIN_S = 0.25
# A reason longer than this is cut: it is shown to the caller and logged.
MAX_REASON_CHARS = 500

Cause = Literal["down", "timeout", "status", "garbage", "signature", "too_large", "abstained"]


@dataclass(frozen=True)
class Failure:
    """The webhook gave no usable verdict: why, in a category (metrics) and in words."""

    cause: Cause
    detail: str


# --- signing ----------------------------------------------------------------------------


def sign(secret: str, message: bytes) -> str:
    """The signature header's value for `message`."""
    digest = hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()
    return SIGNATURE_SCHEME + digest


def request_message(timestamp: str, body: bytes) -> bytes:
    return timestamp.encode("utf-8") + b"." + body


def answer_message(timestamp: str, question_id: str, body: bytes) -> bytes:
    return timestamp.encode("utf-8") + b"." + question_id.encode("utf-8") + b"." + body


def check_signature(
    secret: str, timestamp: str | None, signature: str | None, message: bytes, *, now: float
) -> str | None:
    """None when `signature` signs `message` and `timestamp` is fresh; else what is wrong."""
    if not timestamp or not signature:
        return "the answer is not signed"
    try:
        stamped = int(timestamp)
    except ValueError:
        return "the answer's timestamp is not a number"
    if abs(now - stamped) > REPLAY_WINDOW_S:
        return f"the answer's timestamp is outside the {REPLAY_WINDOW_S:.0f} s window"
    if not hmac.compare_digest(sign(secret, message), signature.strip()):
        return "the answer's signature does not match"
    return None


def check_request(
    secret: str, headers: Mapping[str, str], body: bytes, *, now: float
) -> str | None:
    """What a receiver written in Python checks (None: genuine and fresh). It must also
    remember the X-Bridge-Id values it answered within REPLAY_WINDOW_S and refuse a second
    request with one of them: the window alone admits a replay inside it."""
    lowered = {key.lower(): value for key, value in headers.items()}
    timestamp = lowered.get(TIMESTAMP_HEADER.lower())
    problem = check_signature(
        secret,
        timestamp,
        lowered.get(SIGNATURE_HEADER.lower()),
        request_message(timestamp or "", body),
        now=now,
    )
    return problem.replace("the answer", "the request") if problem else None


# --- the request bodies -----------------------------------------------------------------


def _truncated_text(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore") + "\n[truncated]"


def _bounded_raw_input(raw: Any) -> Any:
    try:
        text = json.dumps(raw, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return {"unserialisable": True}
    if len(text.encode("utf-8")) <= RAW_INPUT_LIMIT_BYTES:
        return json.loads(text)
    return {"truncated": _truncated_text(text, RAW_INPUT_LIMIT_BYTES)}


def bridge_request(question: Question) -> dict[str, Any]:
    """The `bridge` format: the question, grouped."""
    return {
        "id": question.id,
        "principal": question.principal,
        "context_id": question.context_id,
        "task_id": question.task_id,
        "session_id": question.session_id,
        "adapter": question.adapter,
        "tool_call": {
            "id": question.tool_call_id,
            "kind": question.kind,
            "title": question.title,
            "tool_name": question.tool_name,
            "raw_input": _bounded_raw_input(question.raw_input),
            "locations": list(question.locations),
            "command": question.command,
            "diff": _truncated_text(question.diff, DIFF_LIMIT_BYTES),
        },
        "boundary": {
            "root": question.root,
            "owned": question.owned,
            "allow_execute": question.allow_execute,
        },
        "rule": question.rule,
        "reason": question.reason,
        "asked_at": question.asked_at,
        "deadline": question.deadline,
    }


def authzen_request(question: Question) -> dict[str, Any]:
    """The `authzen` format: an AuthZEN 1.0 access evaluation request."""
    whole = bridge_request(question)
    call = whole["tool_call"]
    return {
        "subject": {"type": "a2a_principal", "id": question.principal},
        "action": {
            "name": question.kind,
            "properties": {"title": question.title, "tool_name": question.tool_name},
        },
        "resource": {
            "type": "acp_tool_call",
            "id": question.tool_call_id,
            "properties": {
                "raw_input": call["raw_input"],
                "locations": call["locations"],
                "command": call["command"],
                "diff": call["diff"],
                **whole["boundary"],
            },
        },
        "context": {
            key: whole[key]
            for key in (
                "id",
                "adapter",
                "session_id",
                "context_id",
                "task_id",
                "rule",
                "reason",
                "asked_at",
                "deadline",
            )
        },
    }


# --- the answers ------------------------------------------------------------------------


def _reason(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()[:MAX_REASON_CHARS]
    return None


def read_bridge_answer(data: Any) -> tuple[Literal["allow", "deny"], str] | Failure:
    """The verdict and reason of a `bridge` answer; nothing else in it counts."""
    if not isinstance(data, dict):
        return Failure("garbage", "the answer is not a JSON object")
    decision = data.get("decision")
    if decision == "ask":
        return Failure("abstained", "the supervisor webhook abstained")
    if decision not in ("allow", "deny"):
        return Failure("garbage", "the answer's decision is not allow or deny")
    verdict: Literal["allow", "deny"] = "allow" if decision == "allow" else "deny"
    return verdict, _reason(data.get("reason")) or f"the supervisor webhook said {decision}"


def read_authzen_answer(data: Any) -> tuple[Literal["allow", "deny"], str] | Failure:
    """The verdict and reason of an AuthZEN evaluation response (`decision` a boolean)."""
    if not isinstance(data, dict):
        return Failure("garbage", "the answer is not a JSON object")
    decision = data.get("decision")
    # `is`, not `==`: 1 and 0 are not booleans, and a PDP that sends them is broken.
    if decision is not True and decision is not False:
        return Failure("garbage", "the answer's decision is not true or false")
    context = data.get("context")
    reason = None
    if isinstance(context, dict):
        for key in ("reason_user", "reason_admin", "reason"):
            value = context.get(key)
            if isinstance(value, dict):
                # Localised: {"en": "...", "en-403": "..."}; the first English, else any.
                texts = [v for k, v in value.items() if str(k).startswith("en")]
                texts += list(value.values())
                value = next((t for t in texts if _reason(t)), None)
            reason = _reason(value)
            if reason:
                break
    if decision:
        return "allow", reason or "the AuthZEN decision point allowed it"
    return "deny", reason or "the AuthZEN decision point denied it"


# --- the supervisor ---------------------------------------------------------------------

Outcome = Callable[[str, float, str | None], None]  # (verdict, seconds, failure cause)


class WebhookSupervisor:
    """Asks one HTTP endpoint about each question (see the module's docstring)."""

    name = "webhook"

    def __init__(
        self,
        url: str,
        secret: str,
        *,
        format: str = "bridge",
        timeout_s: float = 10.0,
        on_outcome: Outcome | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"the supervisor URL must be http:// or https://, not {url!r}")
        if format not in ("bridge", "authzen"):
            raise ValueError(f"unknown supervisor format {format!r}")
        self.url = url
        self._secret = secret
        self.format = format
        self.timeout_s = timeout_s
        self._on_outcome = on_outcome
        self._clock = clock

    def __repr__(self) -> str:  # the secret stays out of every repr
        return f"WebhookSupervisor({self.url!r}, format={self.format!r})"

    async def ask(self, question: Question) -> Answer:
        """The webhook's verdict, or a deny naming why there is none."""
        result = await self.consult(question)
        if isinstance(result, Failure):
            return Answer(
                "deny", f"the supervisor webhook gave no verdict: {result.detail}", "webhook"
            )
        return result

    async def consult(self, question: Question) -> Answer | Failure:
        """The webhook's verdict, or the Failure that stands for none."""
        started = time.monotonic()
        result = await self._exchange(question)
        elapsed = time.monotonic() - started
        cause = result.cause if isinstance(result, Failure) else None
        verdict = result.verdict if isinstance(result, Answer) else "deny"
        if self._on_outcome is not None:
            self._on_outcome(verdict, elapsed, cause)
        log_answer("webhook", question, verdict, cause, elapsed)
        return result

    async def _exchange(self, question: Question) -> Answer | Failure:
        payload = (
            authzen_request(question) if self.format == "authzen" else bridge_request(question)
        )
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        timestamp = str(int(self._clock()))
        headers = {
            "content-type": "application/json",
            ID_HEADER: question.id,
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: sign(self._secret, request_message(timestamp, body)),
            # AuthZEN's request id header (and harmless in the bridge format).
            "X-Request-ID": question.id,
        }
        budget = min(self.timeout_s, question.deadline - self._clock() - DEADLINE_MARGIN_S)
        if budget <= 0:
            return Failure("timeout", "no time was left before the decision's deadline")
        try:
            async with (
                httpx.AsyncClient(
                    timeout=budget, follow_redirects=False, trust_env=False
                ) as client,
                client.stream("POST", self.url, content=body, headers=headers) as response,
            ):
                if not 200 <= response.status_code < 300:
                    return Failure("status", f"it answered HTTP {response.status_code}")
                raw = await _read_bounded(response)
                if raw is None:
                    return Failure("too_large", f"the answer is over {MAX_ANSWER_BYTES} bytes")
                answer_headers: Mapping[str, str] = response.headers
        except httpx.TimeoutException:
            return Failure("timeout", f"no answer within {budget:.1f} s")
        except httpx.HTTPError:
            # Never the exception's text: it may carry the URL's credentials.
            return Failure("down", "it could not be reached")
        problem = check_signature(
            self._secret,
            answer_headers.get(TIMESTAMP_HEADER),
            answer_headers.get(SIGNATURE_HEADER),
            answer_message(answer_headers.get(TIMESTAMP_HEADER) or "", question.id, raw),
            now=self._clock(),
        )
        if problem is not None:
            return Failure("signature", problem)
        try:
            data = json.loads(raw)
        except ValueError:
            return Failure("garbage", "the answer is not JSON")
        read = read_authzen_answer if self.format == "authzen" else read_bridge_answer
        parsed = read(data)
        if isinstance(parsed, Failure):
            return parsed
        verdict, reason = parsed
        return Answer(verdict, reason, "webhook")


async def _read_bounded(response: httpx.Response) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
