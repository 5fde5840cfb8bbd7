"""The operator's commands for the decision channel: `policy check`, `policy explain` and
`decisions` (cli.py parses the arguments and calls these).

- `policy check FILE`: validates the file, runs its examples, prints each rule; exit 0
  when it would load, 1 with the problem (its line named) when not.
- `policy explain FILE --kind K [--command C] [--path P] [--url U] [--title T] [--root DIR]`:
  the chain without a supervisor (the floor, the policy, the table) on one made-up
  request in a handed root (`--owned`: a sandbox of the bridge's; `--allow-execute`), and
  prints the decision, the decider, the rule and the reason.
- `decisions [--context ID] [--since T] [--limit N] [--json]`: the ledger of the state
  directory (ACP_STATE_DIR), read from its SQLite file without writing to it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import anyio
from sqlalchemy.exc import SQLAlchemyError

from a2a_acp_bridge.boundary import Boundary
from a2a_acp_bridge.decisions import judge
from a2a_acp_bridge.ledger import LedgerEntry, parse_since, read_ledger
from a2a_acp_bridge.permissions import PermissionOption, PermissionRequest, Supervision
from a2a_acp_bridge.policy import Policy, PolicyError, load_policy
from a2a_acp_bridge.state_writer import describe_failure

EXIT_OK = 0
EXIT_FAILED = 1
# What an explained request offers, as claude-agent-acp offers it.
EXPLAIN_OPTIONS = (
    PermissionOption("allow", "allow_once", "Allow"),
    PermissionOption("reject", "reject_once", "Reject"),
)


def check_policy(path: Path, out: TextIO) -> int:
    try:
        policy = load_policy(path)
    except PolicyError as exc:
        out.write(f"invalid: {exc}\n")
        return EXIT_FAILED
    examples = sum(len(rule.match) + len(rule.not_match) for rule in policy.rules)
    for rule in policy.rules:
        where = f"line {rule.line}" if rule.line is not None else "-"
        protected = " (lifts protection)" if rule.protected else ""
        out.write(
            f"{where:>9}  {rule.id}: {rule.decision} {rule.kind} "
            f"{', '.join(rule.specifier)}{protected}\n"
            f"           reason: {rule.reason}\n"
        )
    for kind, value in policy.defaults:
        out.write(f"  default  {kind}: {value}\n")
    out.write(
        f"ok: {len(policy.rules)} rule(s), {examples} example(s) checked; "
        "deny wins over ask over allow whatever the order\n"
    )
    return EXIT_OK


def explain(
    path: Path,
    out: TextIO,
    *,
    kind: str,
    command: str | None = None,
    paths: Sequence[str] = (),
    url: str | None = None,
    title: str | None = None,
    root: Path | None = None,
    owned: bool = False,
    allow_execute: bool = False,
) -> int:
    try:
        policy: Policy = load_policy(path)
    except PolicyError as exc:
        out.write(f"invalid: {exc}\n")
        return EXIT_FAILED
    where = (root or Path.cwd()).resolve()
    raw: dict[str, object] = {}
    if command is not None:
        raw["command"] = command
    if url is not None:
        raw["url"] = url
    request = PermissionRequest(
        tool_call_id="explain",
        title=title or command or url or (paths[0] if paths else kind),
        kind=kind,
        locations=tuple(paths),
        raw_input=raw or None,
        options=EXPLAIN_OPTIONS,
    )
    boundary = Boundary(where, owned=owned, allow_execute=allow_execute)
    judgement = judge(request, boundary, Supervision(), policy)
    ruling = judgement.ruling
    decision = ruling.verdict
    if decision == "ask":
        decision = "ask (a supervisor decides; with none configured, deny)"
    out.write(
        f"decision: {decision}\ndecider:  {ruling.decider}\nrule:     {ruling.rule}\n"
        f"reason:   {ruling.reason}\n"
    )
    return EXIT_OK


def show_decisions(
    state_dir: Path,
    out: TextIO,
    *,
    database_url: str | None = None,
    context_id: str | None,
    since: str | None,
    limit: int,
    as_json: bool,
) -> int:
    since_ns = None
    if since is not None:
        since_ns = parse_since(since)
        if since_ns is None:
            out.write(
                f"--since {since!r} is not ISO 8601 (2026-12-01T12:00:00Z) or epoch seconds\n"
            )
            return EXIT_FAILED
    try:
        entries = anyio.run(
            functools.partial(
                read_ledger,
                state_dir,
                database_url,
                context_id=context_id,
                since_ns=since_ns,
                limit=limit,
            )
        )
    except FileNotFoundError:
        out.write(f"no state database in {state_dir} (ACP_STATE_DIR)\n")
        return EXIT_FAILED
    except (SQLAlchemyError, OSError) as exc:
        out.write(f"the ledger cannot be read: {describe_failure(exc, 'postgresql')}\n")
        return EXIT_FAILED
    if as_json:
        out.write(json.dumps([entry.to_json() for entry in entries], indent=2) + "\n")
        return EXIT_OK
    for entry in entries:
        out.write(_line(entry) + "\n")
    if not entries:
        out.write("no decisions\n")
    return EXIT_OK


def _line(entry: LedgerEntry) -> str:
    shown = entry.to_json()
    what = entry.command or entry.title or entry.tool_call_id
    shadow = " (shadow)" if entry.shadow else ""
    return (
        f"{shown['time']}  {entry.verdict:<9} {entry.decider}{shadow} [{entry.rule}] "
        f"{entry.kind or '-'}: {' '.join(what.split())[:80]}  "
        f"context={entry.context_id or '-'} task={entry.task_id or '-'} "
        f"{shown['latencyMs']} ms"
    )
