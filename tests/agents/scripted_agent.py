"""A scripted ACP agent for tests: a real subprocess over stdio, driven by data.

    python tests/agents/scripted_agent.py SCRIPT.json

The script (JSON) says who the agent is and what it does on each prompt:

    {
      "agent_info": {"name": "@agentclientprotocol/claude-agent-acp", "version": "0.101.0"},
      "load_session": true, "close": true, "string_ids": false,
      "resume": false,                # offer session/resume (sessionCapabilities.resume)
      "modes": {"current": "auto", "available": ["default", "auto", "plan"]},   # or null
      "config_mode": true,            # also offer a config option of category "mode"
      "refuse_modes": ["default"],    # set_mode / set_config_option to these fail
      "refuse_modes_after_prompt": [],# ... once a prompt has started
      "refuse_message": "...",        # the agent's own text for a refusal
      "config_call_error": null,      # {"code": -32601, ...}: set_config_option fails so
      "readback": {"default": "auto"},# the mode reads back as something else
      "new_session_error": null,      # {"code": -32000, "message": "..."} fails session/new
      "auth_methods": [],             # what initialize lists in authMethods
      "auth": {"api-key": "MY_KEY"},  # session/new and load refused (-32000) until an
                                      # `authenticate` with one of these ids while the
                                      # variable is set in the agent's own environment
      "auth_error": "...",            # the agent's text when authenticate fails
      "auth_ignored": false,          # authenticate succeeds but sessions stay refused
      "prompt_capabilities": {...},   # what initialize advertises (default: image, embedded)
      "init_meta": {...},             # initialize's _meta (e.g. {"a2a": {"directReplies": true}})
      "echo_meta": true, "echo_prompt": true,  # say the prompt's _meta / its blocks first
      "turns": [[step, ...], ...],    # the Nth prompt runs turns[N] (the last one repeats)
      "by_prompt": {"TEXT": [step, ...]},  # or chosen by the prompt's exact text
      "log": "/path/log.jsonl",       # one JSON line per event (pids, calls, prompts, answers)
      "delay": {"initialize": 2.0},   # seconds before answering these methods
      "delay_after_prompt": {},       # ... once a prompt has started
      "hang": ["session/new"],        # never answer these methods
      "ignore_eof": false,            # keep running after stdin closes (codex-acp 0.16)
      "ignore_sigterm": false         # only SIGKILL ends it
    }

Every process the agent starts is logged as {"event": "start"|"grandchild"|"child"|"daemon",
"pid": N, "start": T} (T: its start time, to tell a reused pid apart), so a test can check
that none is left.

Steps (`op`):
    say TEXT | think TEXT              agent_message_chunk / agent_thought_chunk
    chunks N SIZE                      N message chunks of SIZE characters (a counter each)
    tool_call {call} | tool_update {call}  tool_call / tool_call_update (`call`: the wire fields)
    permission {tool_call, options: [[id, name, kind]...], end_turn_on: [ids], act: {...}}
                                       ask; `end_turn_on`: answers that make the turn stop
                                       with `end_reason` (default `cancelled`: codex's
                                       abort); `act` runs if allowed:
                                       {"write": PATH, "text": TEXT} or {"say": TEXT};
                                       the answer is reported as "permission ID: ANSWER"
    mode ID                            current_mode_update
    config_mode ID                     the same change as a config_option_update (codex)
    plan [[content, status], ...]      plan update
    sleep SECONDS                      wait (session/cancel ends the turn `cancelled`)
    wait_cancel [delay] [reason] [then_continue]
                                       wait for session/cancel, then `delay` more seconds;
                                       end the turn with `reason`, or go on to the next step
    stop REASON                        end the turn with this stopReason now
    crash [code]                       exit at once
    signal NAME                        kill itself with that signal
    hang                               never answer this prompt
    error CODE MESSAGE                 answer the prompt with a JSON-RPC error
    stderr BYTES [text]                write that much to stderr (then `text`, if given)
    grandchild SECONDS                 start a child that holds stdout open, then crash
    child SECONDS                      start a child (same group, no pipes) and go on
    daemon SECONDS                     start a child in a session of its own (setsid)
    wait_file PATH                     wait until PATH exists (a test's go-ahead)
    raw LINE                           write LINE to stdout as it is (broken frames)
    long_line BYTES                    one agent_message_chunk line of about BYTES bytes,
                                       written in pieces (the agent never holds it whole)
    stale_cancel                       the next prompt answers `cancelled` at once
    content {block}                    agent_message_chunk carrying this content block
    update {update}                    a session/update carrying this update as it is
    ask MESSAGE [schema]               elicitation/create (form mode); says
                                       "answer: {action, content, _meta}" as JSON on a line;
                                       a decline or cancel ends the turn `cancelled`
    end_meta {...}                     the prompt's answer carries this `_meta`
    after {delay, steps}               run `steps` that much later, outside the turn
    close_stdin                        close stdin and go on (the client's writes fail)
    env                                say the sorted names of its environment, as JSON
Every prompt that reaches its end answers `end_turn`. In every string of a step, {CWD} is
the session's cwd and {WORKROOT} its parent (the fixtures' placeholders).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from a2a_acp_bridge.agent_wire import AgentPeer, RpcError, method_not_found


class ScriptedAgent:
    def __init__(self, peer: AgentPeer, script: dict[str, Any]) -> None:
        self.peer = peer
        self.script = script
        self.sessions: dict[str, dict[str, Any]] = {}
        self.prompts = 0
        self.authenticated = False
        self.cancelled = asyncio.Event()
        self.stale_cancel = False
        self.end_meta: dict[str, Any] | None = None
        self.later: set[asyncio.Task[None]] = set()
        modes = script.get("modes")
        self.mode: str | None = modes["current"] if modes else None

    # --- protocol ----------------------------------------------------------------------

    def log(self, event: str, **fields: Any) -> None:
        path = self.script.get("log")
        if path:
            line = json.dumps({"event": event, "agent": os.getpid(), **fields}) + "\n"
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(line)

    def log_process(self, event: str, pid: int) -> None:
        self.log(event, pid=pid, start=start_time(pid))

    async def handle(self, method: str, params: dict[str, Any]) -> Any:
        self.log(method, params=params)
        if method in self.script.get("hang", []):
            await asyncio.Event().wait()
        delay = self.script.get("delay", {}).get(method)
        if self.prompts:
            delay = self.script.get("delay_after_prompt", {}).get(method, delay)
        if delay:
            await asyncio.sleep(float(delay))
        if method == "initialize":
            caps: dict[str, Any] = {
                "loadSession": bool(self.script.get("load_session", False)),
                "promptCapabilities": self.script.get(
                    "prompt_capabilities", {"embeddedContext": True, "image": True}
                ),
            }
            session_caps: dict[str, Any] = {}
            if self.script.get("close", True):
                session_caps["close"] = {}
            if self.script.get("resume", False):
                session_caps["resume"] = {}
            if session_caps:
                caps["sessionCapabilities"] = session_caps
            return {
                "protocolVersion": self.script.get("protocol_version", 1),
                "agentCapabilities": caps,
                "agentInfo": self.script.get(
                    "agent_info", {"name": "scripted-agent", "version": "1"}
                ),
                "authMethods": self.script.get("auth_methods", []),
                **({"_meta": self.script["init_meta"]} if "init_meta" in self.script else {}),
            }
        if method == "authenticate":
            variable = (self.script.get("auth") or {}).get(params.get("methodId"))
            if not variable or not os.environ.get(variable):
                raise RpcError(-32000, self.script.get("auth_error", "Authentication failed"))
            self.authenticated = not self.script.get("auth_ignored", False)
            return {}
        if method in ("session/new", "session/load", "session/resume"):
            if self.script.get("auth") and not self.authenticated:
                raise RpcError(-32000, "Authentication required")
            error = self.script.get("new_session_error")
            if error:
                raise RpcError(error["code"], error["message"])
            reopened = method != "session/new"
            session_id = params.get("sessionId") if reopened else str(uuid.uuid4())
            if reopened and session_id not in self.script.get("loadable", [session_id]):
                raise RpcError(-32002, "Resource not found")
            self.sessions[str(session_id)] = {"cwd": params.get("cwd")}
            result: dict[str, Any] = {"sessionId": session_id}
            modes = self.script.get("modes")
            if modes:
                result["modes"] = {
                    "currentModeId": self.mode,
                    "availableModes": [{"id": m, "name": m} for m in modes["available"]],
                }
                if self.script.get("config_mode"):
                    result["configOptions"] = [self._mode_option()]
            return result
        if method == "session/set_mode":
            await self._set_mode(str(params.get("modeId")), params["sessionId"])
            return {}
        if method == "session/set_config_option":
            if not self.script.get("config_mode"):
                raise method_not_found(method)
            error = self.script.get("config_call_error")
            if error:
                raise RpcError(error["code"], error["message"])
            await self._set_mode(str(params.get("value")), params["sessionId"], notify=False)
            return {"configOptions": [self._mode_option()]}
        if method == "session/prompt":
            result = await self._prompt(params)
            self.log("prompt_done", stopReason=result.get("stopReason"))
            return result
        if method == "session/cancel":
            self.cancelled.set()
            return None
        if method == "session/close":
            self.sessions.pop(str(params.get("sessionId")), None)
            return {}
        raise method_not_found(method)

    def _mode_option(self) -> dict[str, Any]:
        return {
            "id": "mode",
            "name": "Mode",
            "category": "mode",
            "type": "select",
            "currentValue": self.mode,
            "options": [{"value": m, "name": m} for m in self.script["modes"]["available"]],
        }

    async def _set_mode(self, mode: str, session_id: str, notify: bool = True) -> None:
        refused = self.script.get("refuse_modes", [])
        if self.prompts:
            refused = refused + self.script.get("refuse_modes_after_prompt", [])
        if mode in refused:
            raise RpcError(-32603, self.script.get("refuse_message", f"Mode {mode} refused"))
        self.mode = self.script.get("readback", {}).get(mode, mode)
        if notify:
            await self._update(
                session_id, {"sessionUpdate": "current_mode_update", "currentModeId": self.mode}
            )

    async def _update(self, session_id: str, update: dict[str, Any]) -> None:
        await self.peer.notify("session/update", {"sessionId": session_id, "update": update})

    # --- turns -------------------------------------------------------------------------

    def _steps_for(self, prompt_text: str) -> list[dict[str, Any]]:
        by_prompt = self.script.get("by_prompt", {})
        if prompt_text in by_prompt:
            return list(by_prompt[prompt_text])
        turns = self.script.get("turns") or [[{"op": "say", "text": f"echo: {prompt_text}"}]]
        return list(turns[min(self.prompts, len(turns) - 1)])

    async def _prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session_id = str(params["sessionId"])
        text = "\n".join(
            b.get("text", "") for b in params.get("prompt", []) if b.get("type") == "text"
        )
        self.cancelled.clear()
        if self.stale_cancel:
            self.stale_cancel = False
            return {"stopReason": "cancelled"}
        cwd = str(self.sessions.get(session_id, {}).get("cwd") or "")
        steps = _with_cwd(self._steps_for(text), cwd)
        self.prompts += 1
        self._forget_end_meta()
        meta = params.get("_meta")
        if meta is not None and self.script.get("echo_meta"):
            await self._say(session_id, "meta: " + json.dumps(meta, sort_keys=True) + "\n")
        if self.script.get("echo_prompt"):
            blocks = json.dumps(params.get("prompt", []), sort_keys=True)
            await self._say(session_id, "prompt: " + blocks + "\n")
        for step in steps:
            if self.cancelled.is_set():
                return {"stopReason": "cancelled"}
            outcome = await self._step(session_id, step)
            if outcome is not None:
                return outcome
        end: dict[str, Any] = {
            "stopReason": "end_turn",
            "usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3},
        }
        if self.end_meta is not None:
            end["_meta"] = self.end_meta
        return end

    def _forget_end_meta(self) -> None:
        self.end_meta = None

    async def _say(self, session_id: str, text: str, kind: str = "agent_message_chunk") -> None:
        await self._update(
            session_id, {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
        )

    async def _step(self, session_id: str, step: dict[str, Any]) -> dict[str, Any] | None:
        op = step["op"]
        if op == "say":
            await self._say(session_id, step["text"])
        elif op == "think":
            await self._say(session_id, step["text"], "agent_thought_chunk")
        elif op == "chunks":
            for i in range(int(step["n"])):
                await self._say(
                    session_id, f"{i:08d}:".ljust(int(step["size"]), "x")[: int(step["size"])]
                )
        elif op == "tool_call":
            await self._update(session_id, {"sessionUpdate": "tool_call", **step["call"]})
        elif op == "tool_update":
            await self._update(session_id, {"sessionUpdate": "tool_call_update", **step["call"]})
        elif op == "permission":
            return await self._permission(session_id, step)
        elif op == "mode":
            self.mode = step["id"]
            await self._update(
                session_id, {"sessionUpdate": "current_mode_update", "currentModeId": step["id"]}
            )
        elif op == "config_mode":
            self.mode = step["id"]
            await self._update(
                session_id,
                {"sessionUpdate": "config_option_update", "configOptions": [self._mode_option()]},
            )
        elif op == "plan":
            entries = [
                {"content": c, "status": s, "priority": "medium"} for c, s in step["entries"]
            ]
            await self._update(session_id, {"sessionUpdate": "plan", "entries": entries})
        elif op == "sleep":
            try:
                await asyncio.wait_for(self.cancelled.wait(), timeout=float(step["seconds"]))
                return {"stopReason": "cancelled"}
            except TimeoutError:
                pass
        elif op == "wait_cancel":
            await self.cancelled.wait()
            await asyncio.sleep(float(step.get("delay", 0)))
            if step.get("then_continue"):
                self.cancelled.clear()
                return None
            return {"stopReason": step.get("reason", "cancelled")}
        elif op == "stop":
            return {"stopReason": step["reason"]}
        elif op == "crash":
            sys.stdout.flush()
            os._exit(int(step.get("code", 3)))
        elif op == "signal":
            os.kill(os.getpid(), getattr(signal, step["name"]))
            await asyncio.Event().wait()
        elif op == "hang":
            await asyncio.Event().wait()
        elif op == "error":
            raise RpcError(int(step["code"]), str(step["message"]))
        elif op == "stderr":
            sys.stderr.write(
                "e" * int(step.get("bytes", 0)) + "\nlast words of the scripted agent\n"
            )
            if "text" in step:
                sys.stderr.write(str(step["text"]) + "\n")
            sys.stderr.flush()
        elif op == "grandchild":
            child = subprocess.Popen(
                ["sleep", str(step["seconds"])], stdout=sys.stdout, stderr=subprocess.DEVNULL
            )
            self.log_process("grandchild", child.pid)
            os._exit(int(step.get("code", 4)))
        elif op in ("child", "daemon"):
            child = subprocess.Popen(
                ["sleep", str(step["seconds"])],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=op == "daemon",
            )
            self.log_process(op, child.pid)
        elif op == "wait_file":
            while not Path(step["path"]).exists():  # noqa: ASYNC110 - a file, no event
                await asyncio.sleep(0.02)
        elif op == "after":
            task = asyncio.create_task(self._later(session_id, step))
            self.later.add(task)
            task.add_done_callback(self.later.discard)
        elif op == "close_stdin":
            self.peer.close_input()
        elif op == "env":
            await self._say(session_id, json.dumps(sorted(os.environ)))
        elif op == "raw":
            await self.peer.write_raw(step["line"].encode() + b"\n")
        elif op == "long_line":
            await self._long_line(session_id, int(step["bytes"]))
        elif op == "stale_cancel":
            self.stale_cancel = True
        elif op == "update":
            await self._update(session_id, step["update"])
        elif op == "content":
            await self._update(
                session_id, {"sessionUpdate": "agent_message_chunk", "content": step["block"]}
            )
        elif op == "ask":
            return await self._ask(session_id, step)
        elif op == "end_meta":
            self.end_meta = step["meta"]
        else:
            raise RpcError(-32603, f"unknown scripted op {op!r}")
        return None

    async def _long_line(self, session_id: str, size: int) -> None:
        head = json.dumps(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {
                    "sessionId": session_id,
                    "update": {
                        "sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": "@"},
                    },
                },
            },
            separators=(",", ":"),
        ).encode()
        before, after = head.split(b"@")
        piece = b"x" * (1024 * 1024)
        await self.peer.write_raw(before)
        written = len(before) + len(after) + 1
        while written < size:
            chunk = piece[: size - written]
            await self.peer.write_raw(chunk)
            written += len(chunk)
        await self.peer.write_raw(after + b"\n")

    async def _ask(self, session_id: str, step: dict[str, Any]) -> dict[str, Any] | None:
        schema = step.get("schema") or {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
        }
        ask = asyncio.ensure_future(
            self.peer.request(
                "elicitation/create",
                {
                    "sessionId": session_id,
                    "mode": "form",
                    "message": step["message"],
                    "requestedSchema": schema,
                },
            )
        )
        stop = asyncio.ensure_future(self.cancelled.wait())
        done, _ = await asyncio.wait({ask, stop}, return_when=asyncio.FIRST_COMPLETED)
        if ask not in done:
            # A cancel: the client still answers the question (declined); wait for it.
            await ask
        stop.cancel()
        answer = ask.result() or {}
        self.log("question_answer", action=answer.get("action"))
        await self._say(session_id, "answer: " + json.dumps(answer, sort_keys=True) + "\n")
        if answer.get("action") != "accept":
            return {"stopReason": "cancelled"}
        return None

    async def _later(self, session_id: str, step: dict[str, Any]) -> None:
        await asyncio.sleep(float(step.get("delay", 0)))
        for later_step in step["steps"]:
            await self._step(session_id, later_step)

    async def _permission(self, session_id: str, step: dict[str, Any]) -> dict[str, Any] | None:
        options = [{"optionId": o[0], "name": o[1], "kind": o[2]} for o in step["options"]]
        tool_call = step["tool_call"]
        ask = self.peer.request(
            "session/request_permission",
            {"sessionId": session_id, "toolCall": tool_call, "options": options},
        )
        answer_task = asyncio.ensure_future(ask)
        cancel_task = asyncio.ensure_future(self.cancelled.wait())
        done, _ = await asyncio.wait(
            {answer_task, cancel_task}, return_when=asyncio.FIRST_COMPLETED
        )
        cancel_task.cancel()
        if answer_task not in done:
            if step.get("wait_answer_on_cancel"):  # gemini waits for the late answer
                await answer_task
            else:
                answer_task.cancel()
            return {"stopReason": "cancelled"}
        outcome = (answer_task.result() or {}).get("outcome") or {}
        answer = outcome.get("optionId") if outcome.get("outcome") == "selected" else "cancelled"
        self.log("permission_answer", toolCallId=tool_call.get("toolCallId"), answer=answer)
        await self._say(session_id, f"permission {tool_call.get('toolCallId')}: {answer}\n")
        if answer in step.get("end_turn_on", []):
            return {"stopReason": step.get("end_reason", "cancelled")}
        chosen = next((o for o in options if o["optionId"] == answer), None)
        if chosen is not None and chosen["kind"].startswith("allow"):
            act = step.get("act") or {}
            if "write" in act:
                path = Path(act["write"])
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(act.get("text", ""))
            if "say" in act:
                await self._say(session_id, act["say"])
        return None


def _with_cwd(value: Any, cwd: str) -> Any:
    """`value` with {CWD} (the session's cwd) and {WORKROOT} (its parent) filled in."""
    if isinstance(value, str):
        return value.replace("{CWD}", cwd).replace("{WORKROOT}", os.path.dirname(cwd))
    if isinstance(value, list):
        return [_with_cwd(item, cwd) for item in value]
    if isinstance(value, dict):
        return {key: _with_cwd(item, cwd) for key, item in value.items()}
    return value


def start_time(pid: int) -> str:
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    return raw[raw.rfind(b")") + 2 :].split()[19].decode()


async def main() -> None:
    script = json.loads(Path(sys.argv[1]).read_text())
    if script.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    peer = AgentPeer(string_ids=bool(script.get("string_ids")))
    agent = ScriptedAgent(peer, script)
    agent.log_process("start", os.getpid())
    await peer.open()
    await peer.serve(agent.handle)
    agent.log("eof")
    if script.get("ignore_eof") or peer.keep_handlers:
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
