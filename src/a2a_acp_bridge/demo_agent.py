"""The embedded demo agent: a real ACP agent over stdio, with no model and no network.

It reads its prompt one instruction a line and carries each out the way real adapters do:
a `tool_call` update, then `session/request_permission` with the kind, absolute
`locations`, `rawInput` and the options claude-agent-acp 0.101 offers (`allow-once`,
`allow-with-updates`, `reject`), and it acts only if allowed, reporting the outcome as a
`tool_call_update` and message chunks. It understands:

    write PATH: TEXT     create or replace a file (kind edit)
    append PATH: TEXT    add a line to a file (kind edit)
    delete PATH          remove a file (kind delete)
    read PATH            show a file (kind read)
    list [DIR]           list a directory (kind read)
    run COMMAND          run a shell command in the working directory (kind execute)
    think TEXT           think out loud (a thought, not part of the answer)
    sleep SECONDS        wait (up to 600 s), for trying out cancel
    recall               say the earlier messages of this session, as it remembers them

Anything else gets a short answer saying what it understands. Like claude-agent-acp it
offers the session modes `default` (asks before every change) and `acceptEdits` (edits
without asking). Its memory of a session is the messages it was sent; it keeps them in a
transcript in `.demo-agent/` inside the working directory, so another process (after a
restart) reloads the session with `session/load` and remembers them (`recall` shows it).

Run it with `python -m a2a_acp_bridge.demo_agent`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from a2a_acp_bridge import __version__
from a2a_acp_bridge.agent_wire import AgentPeer, RpcError, method_not_found

AGENT_NAME = "a2a-acp-bridge-demo"
MODES = [
    {"id": "default", "name": "Manual", "description": "Ask before every change"},
    {"id": "acceptEdits", "name": "Accept edits", "description": "Edit files without asking"},
]
PERMISSION_OPTIONS = [
    {"optionId": "allow-once", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow-with-updates", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]
MAX_SLEEP_S = 600.0
RUN_TIMEOUT_S = 60.0
SHOW_CHARS = 4000
TRANSCRIPTS = ".demo-agent"
HELP = (
    "I am the demo agent of a2a-acp-bridge: I have no model, but I follow instructions, one a "
    "line: `write PATH: TEXT`, `append PATH: TEXT`, `delete PATH`, `read PATH`, `list [DIR]`, "
    "`run COMMAND`, `think TEXT`, `sleep SECONDS`, `recall`."
)


@dataclass
class Session:
    session_id: str
    cwd: Path
    mode: str = "default"
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    always_allowed: set[str] = field(default_factory=set)
    # The user messages of this session, in order (reloaded from the transcript).
    history: list[str] = field(default_factory=list)


class DemoAgent:
    def __init__(self, peer: AgentPeer) -> None:
        self.peer = peer
        self.sessions: dict[str, Session] = {}

    async def handle(self, method: str, params: dict[str, Any]) -> Any:
        if method == "initialize":
            return {
                "protocolVersion": 1,
                "agentCapabilities": {
                    "loadSession": True,
                    "promptCapabilities": {"embeddedContext": True},
                    "sessionCapabilities": {"close": {}},
                },
                "agentInfo": {"name": AGENT_NAME, "title": "Demo agent", "version": __version__},
                "authMethods": [],
            }
        if method == "session/new":
            session = self._open(str(uuid.uuid4()), params)
            return self._session_result(session)
        if method == "session/load":
            session = self._open(str(params.get("sessionId")), params)
            await self._replay(session)
            return self._session_result(session)
        if method == "session/set_mode":
            session = self._session(params)
            await self._set_mode(session, str(params.get("modeId")))
            return {}
        if method == "session/set_config_option":
            session = self._session(params)
            if params.get("configId") != "mode":
                raise RpcError(-32602, f"unknown config option {params.get('configId')!r}")
            await self._set_mode(session, str(params.get("value")))
            return {"configOptions": [self._mode_option(session)]}
        if method == "session/prompt":
            return await self._prompt(self._session(params), params.get("prompt") or [])
        if method == "session/cancel":
            known = self.sessions.get(str(params.get("sessionId")))
            if known is not None:
                known.cancelled.set()
            return None
        if method == "session/close":
            self.sessions.pop(str(params.get("sessionId")), None)
            return {}
        if method.startswith("_"):
            raise method_not_found(method)
        raise method_not_found(method)

    # --- sessions ----------------------------------------------------------------------

    def _open(self, session_id: str, params: dict[str, Any]) -> Session:
        cwd = Path(str(params.get("cwd") or ""))
        if not cwd.is_absolute() or not cwd.is_dir():
            raise RpcError(-32602, f"cwd must be an absolute directory, not {str(cwd)!r}")
        session = Session(session_id, cwd)
        self.sessions[session_id] = session
        return session

    def _session(self, params: dict[str, Any]) -> Session:
        session = self.sessions.get(str(params.get("sessionId")))
        if session is None:
            raise RpcError(-32002, "Resource not found: session")
        return session

    def _mode_option(self, session: Session) -> dict[str, Any]:
        return {
            "id": "mode",
            "name": "Mode",
            "category": "mode",
            "type": "select",
            "currentValue": session.mode,
            "options": [{"value": m["id"], "name": m["name"]} for m in MODES],
        }

    def _session_result(self, session: Session) -> dict[str, Any]:
        return {
            "sessionId": session.session_id,
            "modes": {"currentModeId": session.mode, "availableModes": MODES},
            "configOptions": [self._mode_option(session)],
        }

    async def _set_mode(self, session: Session, mode: str) -> None:
        if mode not in {m["id"] for m in MODES}:
            raise RpcError(-32602, f"Mode {mode} is not available in this session")
        session.mode = mode
        await self._update(session, {"sessionUpdate": "current_mode_update", "currentModeId": mode})

    def _transcript(self, session: Session) -> Path:
        return session.cwd / TRANSCRIPTS / f"{session.session_id}.jsonl"

    def _record(self, session: Session, role: str, text: str) -> None:
        path = self._transcript(session)
        with contextlib.suppress(OSError):
            path.parent.mkdir(exist_ok=True)
            with path.open("a", encoding="utf-8") as file:
                file.write(json.dumps({"role": role, "text": text}) + "\n")

    async def _replay(self, session: Session) -> None:
        try:
            lines = self._transcript(session).read_text(encoding="utf-8").splitlines()
        except OSError:
            raise RpcError(-32002, "Resource not found: no such session") from None
        for line in lines:
            entry = json.loads(line)
            if entry["role"] == "user":
                session.history.append(entry["text"])
            kind = "user_message_chunk" if entry["role"] == "user" else "agent_message_chunk"
            await self._update(
                session, {"sessionUpdate": kind, "content": {"type": "text", "text": entry["text"]}}
            )

    # --- turns -------------------------------------------------------------------------

    async def _update(self, session: Session, update: dict[str, Any]) -> None:
        await self.peer.notify(
            "session/update", {"sessionId": session.session_id, "update": update}
        )

    async def _say(self, session: Session, text: str, *, thought: bool = False) -> None:
        kind = "agent_thought_chunk" if thought else "agent_message_chunk"
        await self._update(
            session, {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
        )

    async def _prompt(self, session: Session, blocks: list[dict[str, Any]]) -> dict[str, Any]:
        session.cancelled.clear()
        text = "\n".join(
            str(block.get("text", "")) for block in blocks if block.get("type") == "text"
        ).strip()
        self._record(session, "user", text)
        session.history.append(text)
        said: list[str] = []
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if not lines:
            lines = [""]
        for line in lines:
            if session.cancelled.is_set():
                return {"stopReason": "cancelled"}
            reply = await self._instruction(session, line)
            if reply is None:  # cancelled while working
                return {"stopReason": "cancelled"}
            said.append(reply)
            await self._say(session, reply + "\n")
        self._record(session, "agent", "\n".join(said))
        if session.cancelled.is_set():
            return {"stopReason": "cancelled"}
        return {
            "stopReason": "end_turn",
            "usage": {"inputTokens": len(text), "outputTokens": 0, "totalTokens": len(text)},
        }

    async def _instruction(self, session: Session, line: str) -> str | None:
        verb, _, rest = line.partition(" ")
        verb = verb.lower()
        rest = rest.strip()
        if verb in ("write", "append") and ":" in rest:
            target, _, content = rest.partition(":")
            return await self._write(
                session, target.strip(), content.strip(), append=verb == "append"
            )
        if verb == "delete" and rest:
            return await self._delete(session, rest)
        if verb == "read" and rest:
            return await self._read(session, rest)
        if verb == "list":
            return await self._list(session, rest or ".")
        if verb == "run" and rest:
            return await self._run(session, rest)
        if verb == "think" and rest:
            await self._say(session, rest, thought=True)
            return "(thought about it)"
        if verb == "sleep" and rest:
            return await self._sleep(session, rest)
        if verb == "recall" and not rest:
            earlier = session.history[:-1]
            if not earlier:
                return "I remember no earlier message in this session."
            return "I remember: " + " | ".join(earlier)
        said = f" You said: {line!r}." if line else ""
        return HELP + said

    def _path(self, session: Session, target: str) -> Path:
        path = Path(target).expanduser()
        return path if path.is_absolute() else session.cwd / path

    async def _ask(
        self,
        session: Session,
        call_id: str,
        *,
        title: str,
        kind: str,
        raw: dict[str, Any],
        locations: list[str],
        content: list[dict[str, Any]] | None = None,
    ) -> bool | None:
        """Announce the tool call and ask for permission: True, False, or None if cancelled."""
        tool: dict[str, Any] = {
            "toolCallId": call_id,
            "title": title,
            "kind": kind,
            "status": "pending",
            "rawInput": raw,
            "locations": [{"path": p} for p in locations],
        }
        if content:
            tool["content"] = content
        await self._update(session, {"sessionUpdate": "tool_call", **tool})
        if kind == "edit" and session.mode == "acceptEdits":
            return True
        if kind in session.always_allowed:
            return True
        request = self.peer.request(
            "session/request_permission",
            {"sessionId": session.session_id, "toolCall": tool, "options": PERMISSION_OPTIONS},
        )
        answer_task = asyncio.ensure_future(request)
        cancel_task = asyncio.ensure_future(session.cancelled.wait())
        done, _ = await asyncio.wait(
            {answer_task, cancel_task}, return_when=asyncio.FIRST_COMPLETED
        )
        cancel_task.cancel()
        if answer_task not in done:
            answer_task.cancel()
            return None
        try:
            outcome = (answer_task.result() or {}).get("outcome") or {}
        except (RpcError, ConnectionError):
            return None
        if outcome.get("outcome") != "selected":
            await self._finish(session, call_id, "failed", "The permission request was cancelled.")
            return False
        option = next(
            (o for o in PERMISSION_OPTIONS if o["optionId"] == outcome.get("optionId")), None
        )
        if option is None:
            await self._finish(
                session,
                call_id,
                "failed",
                f"Permission option was not offered: {outcome.get('optionId')}",
            )
            return False
        if option["kind"] == "allow_always":
            session.always_allowed.add(kind)
        if option["kind"].startswith("reject"):
            await self._finish(
                session, call_id, "failed", "The user refused permission to run the tool."
            )
            return False
        await self._update(
            session,
            {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"},
        )
        return True

    async def _finish(
        self,
        session: Session,
        call_id: str,
        status: str,
        text: str,
        content: list[dict[str, Any]] | None = None,
    ) -> None:
        items = [{"type": "content", "content": {"type": "text", "text": text}}]
        await self._update(
            session,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": call_id,
                "status": status,
                "content": (content or []) + items,
                "rawOutput": {"output": text},
            },
        )

    async def _write(self, session: Session, target: str, text: str, *, append: bool) -> str | None:
        path = self._path(session, target)
        try:
            old = path.read_text(encoding="utf-8") if path.is_file() else None
        except OSError:
            old = None
        new = ((old or "") + text + "\n") if append else text + "\n"
        diff = {"type": "diff", "path": str(path), "oldText": old, "newText": new}
        call_id = f"write-{uuid.uuid4().hex[:8]}"
        allowed = await self._ask(
            session,
            call_id,
            title=f"{'Append to' if append else 'Write'} {target}",
            kind="edit",
            raw={"file_path": str(path), "content": text},
            locations=[str(path)],
            content=[diff],
        )
        if allowed is None:
            return None
        if not allowed:
            return f"Not allowed to write {target}."
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(new, encoding="utf-8")
        except OSError as exc:
            await self._finish(session, call_id, "failed", f"Cannot write {target}: {exc.strerror}")
            return f"Could not write {target}: {exc.strerror}."
        await self._finish(session, call_id, "completed", f"Wrote {len(new)} characters.", [diff])
        return f"Wrote {target} ({len(new.encode())} bytes)."

    async def _delete(self, session: Session, target: str) -> str | None:
        path = self._path(session, target)
        call_id = f"delete-{uuid.uuid4().hex[:8]}"
        allowed = await self._ask(
            session,
            call_id,
            title=f"Delete {target}",
            kind="delete",
            raw={"path": str(path)},
            locations=[str(path)],
        )
        if allowed is None:
            return None
        if not allowed:
            return f"Not allowed to delete {target}."
        try:
            path.unlink()
        except OSError as exc:
            await self._finish(
                session, call_id, "failed", f"Cannot delete {target}: {exc.strerror}"
            )
            return f"Could not delete {target}: {exc.strerror}."
        await self._finish(session, call_id, "completed", "Deleted.")
        return f"Deleted {target}."

    async def _read(self, session: Session, target: str) -> str | None:
        path = self._path(session, target)
        call_id = f"read-{uuid.uuid4().hex[:8]}"
        allowed = await self._ask(
            session,
            call_id,
            title=f"Read {target}",
            kind="read",
            raw={"file_path": str(path)},
            locations=[str(path)],
        )
        if allowed is None:
            return None
        if not allowed:
            return f"Not allowed to read {target}."
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            await self._finish(session, call_id, "failed", f"Cannot read {target}: {exc.strerror}")
            return f"Could not read {target}: {exc.strerror}."
        await self._finish(session, call_id, "completed", f"Read {len(text)} characters.")
        shown = text if len(text) <= SHOW_CHARS else text[:SHOW_CHARS] + "\n[...]"
        return f"{target}:\n{shown.rstrip()}"

    async def _list(self, session: Session, target: str) -> str | None:
        path = self._path(session, target)
        call_id = f"list-{uuid.uuid4().hex[:8]}"
        allowed = await self._ask(
            session,
            call_id,
            title=f"List {target}",
            kind="read",
            raw={"path": str(path)},
            locations=[str(path)],
        )
        if allowed is None:
            return None
        if not allowed:
            return f"Not allowed to list {target}."
        try:
            names = sorted(
                entry.name + ("/" if entry.is_dir() else "")
                for entry in path.iterdir()
                if entry.name != TRANSCRIPTS
            )
        except OSError as exc:
            await self._finish(session, call_id, "failed", f"Cannot list {target}: {exc.strerror}")
            return f"Could not list {target}: {exc.strerror}."
        await self._finish(session, call_id, "completed", f"{len(names)} entries.")
        return f"{target}: " + (", ".join(names) if names else "(empty)")

    async def _run(self, session: Session, command: str) -> str | None:
        call_id = f"run-{uuid.uuid4().hex[:8]}"
        allowed = await self._ask(
            session,
            call_id,
            title=command,
            kind="execute",
            raw={"command": command, "cwd": str(session.cwd)},
            locations=[],
        )
        if allowed is None:
            return None
        if not allowed:
            return f"Not allowed to run {shlex.quote(command)}."
        process = await asyncio.create_subprocess_shell(
            command,
            cwd=session.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=False,
        )
        waiter = asyncio.ensure_future(process.communicate())
        cancel = asyncio.ensure_future(session.cancelled.wait())
        done, _ = await asyncio.wait(
            {waiter, cancel}, timeout=RUN_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        cancel.cancel()
        if waiter not in done:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(BaseException):
                await waiter
            if session.cancelled.is_set():
                await self._finish(session, call_id, "failed", "Cancelled.")
                return None
            await self._finish(session, call_id, "failed", "Timed out.")
            return f"{command!r} timed out after {RUN_TIMEOUT_S:g} s."
        output = (waiter.result()[0] or b"").decode("utf-8", "replace")
        status = "completed" if process.returncode == 0 else "failed"
        await self._finish(session, call_id, status, output[-SHOW_CHARS:] or "(no output)")
        shown = output.rstrip()[-SHOW_CHARS:]
        result = f"`{command}` exited with {process.returncode}"
        return f"{result}:\n{shown}" if shown else f"{result}."

    async def _sleep(self, session: Session, amount: str) -> str | None:
        try:
            seconds = min(max(float(amount), 0.0), MAX_SLEEP_S)
        except ValueError:
            return f"{amount!r} is not a number of seconds."
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(session.cancelled.wait(), timeout=seconds)
        if session.cancelled.is_set():
            return None
        return f"Slept {seconds:g} s."


async def main() -> None:
    peer = AgentPeer()
    await peer.open()
    await peer.serve(DemoAgent(peer).handle)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    os._exit(0)
