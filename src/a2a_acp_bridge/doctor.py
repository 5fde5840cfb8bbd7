"""`a2a-acp-bridge doctor`: start the adapter once as `serve` would, and say what is missing.

The adapter is started through `Bridge.probe`, the bridge's own start path for a new
conversation (the same command, environment allowlist, sandbox and handshake), so what is
checked here is what a task meets. One line per step: the spawn, `initialize`,
`authenticate` (when the bridge logged the adapter in, or had to and could not),
`session/new` and the supervised mode; for an adapter that opens sessions without any
credentials (claude-agent-acp), the credentials it reads itself are looked for too. Nothing
is sent to the model. The exit status is 0 only when a conversation could start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from a2a_acp_bridge.acp.auth import login_path, remedy
from a2a_acp_bridge.acp.session import AgentSession
from a2a_acp_bridge.adapters import profile_for
from a2a_acp_bridge.bridge import Bridge
from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.errors import AdapterError, AuthenticationError, SupervisionError

EXIT_READY = 0
EXIT_NOT_READY = 1
# The start's steps in order, as `AgentSession` reports them, and how the lines name them.
STEPS = ("spawn", "initialize", "authenticate", "session", "mode", "credentials")
LABELS = {
    "spawn": "start",
    "initialize": "initialize",
    "authenticate": "authenticate",
    "session": "session/new",
    "mode": "mode",
    "credentials": "credentials",
}
OK, FAIL, NOT_REACHED = "ok", "FAIL", "--"


@dataclass(frozen=True)
class Line:
    """One step's outcome."""

    step: str
    status: str  # OK, FAIL or NOT_REACHED
    detail: str


@dataclass(frozen=True)
class Report:
    """Everything doctor found."""

    agent: str
    command: tuple[str, ...]
    lines: tuple[Line, ...]

    @property
    def ready(self) -> bool:
        return all(line.status == OK for line in self.lines)


async def diagnose(settings: Settings, environ: Mapping[str, str] | None = None) -> Report:
    """Start the adapter as a new conversation would, stop it, and report each step."""
    bridge = Bridge(settings, environ=dict(environ if environ is not None else os.environ))
    reached: dict[str, str] = {}
    failure: tuple[str, str] | None = None
    credentials: Line | None = None
    try:
        async with bridge.probe(reached.__setitem__) as session:
            credentials = _own_credentials(session)
    except AdapterError as exc:
        failure = (_failed_step(exc, reached), str(exc))
    lines = []
    for step in STEPS:
        if step in reached:
            lines.append(Line(step, OK, reached[step]))
        elif failure is not None and failure[0] == step:
            lines.append(Line(step, FAIL, failure[1]))
            failure = None
        elif step == "authenticate":
            if "session" in reached:
                lines.append(Line(step, OK, "not needed: the adapter accepted session/new"))
            elif failure is None:
                lines.append(Line(step, NOT_REACHED, "not reached"))
        elif step == "credentials":
            if credentials is not None:
                lines.append(credentials)
        else:
            lines.append(Line(step, NOT_REACHED, "not reached"))
    spec = settings.agent
    return Report(spec.label, spec.command, tuple(lines))


def render(report: Report) -> str:
    """The report as the terminal shows it: a header, one line a step, the verdict."""
    width = max(len(label) for label in LABELS.values())
    out = [f"doctor: {report.agent} ({' '.join(report.command)})"]
    for line in report.lines:
        out.append(f"  {line.status:<4} {LABELS[line.step]:<{width}}  {line.detail}")
    if report.ready:
        out.append("ready: a conversation can start")
    else:
        out.append("not ready: fix what the FAIL line says, then run doctor again")
    return "\n".join(out) + "\n"


async def run_doctor(
    settings: Settings, out: TextIO, environ: Mapping[str, str] | None = None
) -> int:
    report = await diagnose(settings, environ)
    out.write(render(report))
    out.flush()
    return EXIT_READY if report.ready else EXIT_NOT_READY


def _failed_step(exc: AdapterError, reached: Mapping[str, str]) -> str:
    if isinstance(exc, AuthenticationError):
        return "authenticate"
    if isinstance(exc, SupervisionError):
        return "mode"
    for step in ("spawn", "initialize", "session", "mode"):
        if step not in reached:
            return step
    return "mode"


def _own_credentials(session: AgentSession) -> Line | None:
    """For an adapter that opens sessions without credentials: the ones it reads itself."""
    profile = profile_for(session.agent_info.name)
    if profile is None or not profile.credentials.opens_unauthenticated:
        return None
    credentials = profile.credentials
    env = session.spec.env
    for group in credentials.read_by_adapter:
        if all(env.get(name, "").strip() for name in group):
            return Line("credentials", OK, f"{' and '.join(group)} set")
    for login in credentials.logins:
        path = login_path(login, env)
        if Path(path).expanduser().is_file():
            return Line("credentials", OK, f"{login.what} stored in {path}")
    return Line(
        "credentials",
        FAIL,
        f"{session.name} opens sessions without credentials but will refuse the first prompt: "
        + remedy(session.auth.situation),
    )
