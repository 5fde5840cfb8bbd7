"""The policy file (`ACP_POLICY`): the operator's rules, read once at start, and the verdict
they give on one permission request.

A policy is TOML: `[[rule]]` tables, each with a `kind`, a `decision` (`allow`, `ask`,
`deny`), the specifier of its kind, an optional `id`, `reason`, `match` and `not_match`
examples; and an optional `[default]` table saying what a request no rule matches gets, by
kind (`table`, the built-in table, unless set to `ask` or `deny`). The specifiers:

    execute               commands  = ["npm test", "git status"]   prefixes, on parsed words
    edit, delete, move    paths     = ["src/**", "/srv/shared/**"] globs; relative to the root,
                                                                   absolute ones reach outside
    read                  paths     = [".env*", "**/*.pem"]        globs (read and search)
    fetch                 hosts     = ["example.com", "*.npmjs.org", "*"]
    other                 tools     = ["mcp__github__*"]           the tool's title or name

Whatever the order, deny wins over ask over allow. Commands are matched on the words of
each simple command (command_line.py): every part of a compound line must be allowed on
its own, and a line that cannot be read for certain (substitutions, `eval`, `sh -c`,
patterns, here-documents, redirections outside the root or refused by the floor as a
change would be) is `ask` at best. An allow of commands names them: it is how a policy
grants execute in a handed root for those commands only. An `edit` allow with `protected =
true` lifts the protected names (protection.py) for the paths it matches, when no other path
of the request holds them; the bridge's own files and /proc stay refused (the floor).

Paths are placed as the table places them (permissions.locate: `..` collapsed, symlinks
resolved against the root) before any glob sees them; a relative glob matches only inside
the root; `**` spans whole path components, so `src/**` never matches `src-evil/x`. Allow
and ask look where a path lands; deny also where it is named. An allow compares the
command's first word exactly (`./npm` is not `npm`); deny and ask also by its base name
and behind wrappers (`env`, `sudo`, `xargs`, ...: at every word after one), so a denial is
hard to walk around.

Examples are checked when the file loads: a failing one is a startup error naming its line.
No I/O besides reading the file and resolving paths; frozen values in and out.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from a2a_acp_bridge.boundary import Boundary
from a2a_acp_bridge.command_line import CommandLine, command_positions, parse_command
from a2a_acp_bridge.errors import ConfigError
from a2a_acp_bridge.permissions import (
    CHANGE_KINDS,
    MODE_KIND,
    PermissionRequest,
    Supervision,
    _under,
    floor,
    is_change,
    is_inside,
    locate,
    named_paths,
)
from a2a_acp_bridge.protection import protected_name

KINDS = ("execute", "edit", "delete", "move", "read", "fetch", "other")
PATH_KINDS = frozenset({"edit", "delete", "move", "read"})
# ACP's tool kinds other than `other`.
NAMED_KINDS = frozenset(
    {"read", "edit", "delete", "move", "search", "execute", "think", "fetch", MODE_KIND}
)
# Strictness: a higher rank wins whatever the order of the rules.
RANK = {"allow": 0, "ask": 1, "deny": 2}
DEFAULT_CHOICES = ("table", "ask", "deny")
SPECIFIER = {
    "execute": "commands",
    "edit": "paths",
    "delete": "paths",
    "move": "paths",
    "read": "paths",
    "fetch": "hosts",
    "other": "tools",
}
RULE_KEYS = frozenset(
    {"id", "kind", "decision", "reason", "match", "not_match", "protected", *SPECIFIER.values()}
)
TOP_KEYS = frozenset({"rule", "default", "version"})
# The tool call id of the change a redirection's target is judged as (never sent).
REDIRECT_CALL_ID = "redirection"
# Examples are placed against this root (it need not exist).
EXAMPLE_ROOT = Path("/policy-example-root")
_RULE_HEADER = re.compile(r"^\s*\[\[\s*rule\s*\]\]")
_TOML_LINE = re.compile(r"at line (\d+)")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")
_HOST_PATTERN = re.compile(
    r"(\*|(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*)"
)


class PolicyError(ValueError):
    """A policy file that cannot be used; `line` is where (None: the file as a whole)."""

    def __init__(self, source: str, line: int | None, problem: str) -> None:
        self.source = source
        self.line = line
        self.problem = problem
        where = f"{source}, line {line}" if line is not None else source
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class Glob:
    """A path glob: `*` and `?` within one component, `**` across whole components."""

    text: str
    absolute: bool
    regex: re.Pattern[str]
    folded: re.Pattern[str]  # the same, ignoring case (for deny)

    @classmethod
    def compile(cls, text: str) -> Glob:
        absolute = text.startswith("/")
        body = text.strip("/") if absolute else text.rstrip("/")
        pattern = _glob_regex(body)
        if absolute:
            pattern = "/" + pattern if pattern else ""
            pattern = pattern or "/"
        return cls(
            text,
            absolute,
            re.compile(rf"\A{pattern}\Z", re.S),
            re.compile(rf"\A{pattern}\Z", re.S | re.I),
        )

    def matches(self, path: str, *, fold: bool = False) -> bool:
        return bool((self.folded if fold else self.regex).match(path))


def _glob_regex(body: str) -> str:
    parts: list[str] = []
    for part in body.split("/"):
        if not (part == "**" and parts and parts[-1] == "**"):  # `**/**` is `**`
            parts.append(part)
    out = ""
    after_stars = False
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            # Zero or more whole components: `a/**` is `a` and below, `**/b` any `b`.
            if last:
                out = ".*" if index == 0 else out + "(?:/.*)?"
            else:
                out += ("" if index == 0 else "/") + "(?:[^/]+/)*"
            after_stars = True
            continue
        if index > 0 and not after_stars:
            out += "/"
        out += "".join(
            "[^/]*" if ch == "*" else "[^/]" if ch == "?" else re.escape(ch) for ch in part
        )
        after_stars = False
    return out


@dataclass(frozen=True)
class PolicyRule:
    """One `[[rule]]` of the file."""

    id: str
    kind: str
    decision: str
    reason: str
    line: int | None
    commands: tuple[tuple[str, ...], ...] = ()
    paths: tuple[Glob, ...] = ()
    hosts: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    # Per entry of `tools`: its glob (compiled at load) when it holds a `*`, else None (the
    # name is compared exactly).
    tool_globs: tuple[Glob | None, ...] = ()
    protected: bool = False
    match: tuple[str, ...] = ()
    not_match: tuple[str, ...] = ()

    @property
    def rank(self) -> int:
        return RANK[self.decision]

    @property
    def specifier(self) -> tuple[str, ...]:
        """The specifier as written, for `policy check`."""
        if self.kind == "execute":
            return tuple(" ".join(words) for words in self.commands)
        if self.kind in PATH_KINDS:
            return tuple(glob.text for glob in self.paths)
        return self.hosts if self.kind == "fetch" else self.tools

    # --- matching one item of its kind --------------------------------------------------

    def matches_words(self, words: tuple[str, ...]) -> bool:
        strict = self.decision != "allow"
        return any(_prefix_of(prefix, words, strict=strict) for prefix in self.commands)

    def matches_path(self, relative: str | None, absolute: str, *, named: str | None) -> bool:
        """`relative`: the path under the root (None: outside it); `absolute`: where it lands;
        `named`: for deny, also where the agent named it (lexically)."""
        relative_globs, absolute_globs = self._path_regexes
        if relative is not None and relative_globs is not None and relative_globs.match(relative):
            return True
        if absolute_globs is None:
            return False
        return bool(
            absolute_globs.match(absolute) or (named is not None and absolute_globs.match(named))
        )

    @functools.cached_property
    def _path_regexes(self) -> tuple[re.Pattern[str] | None, re.Pattern[str] | None]:
        """The rule's relative and absolute globs, each kind as one regex (one match per
        path instead of one per glob); deny ignores case."""
        flags = re.S | (re.I if self.decision == "deny" else 0)

        def joined(globs: list[Glob]) -> re.Pattern[str] | None:
            if not globs:
                return None
            return re.compile("|".join(f"(?:{g.regex.pattern})" for g in globs), flags)

        return (
            joined([g for g in self.paths if not g.absolute]),
            joined([g for g in self.paths if g.absolute]),
        )

    def matches_host(self, host: str | None) -> bool:
        for pattern in self.hosts:
            if pattern == "*":
                return True
            if host is None:
                continue
            if pattern.startswith("*."):
                if host.endswith(pattern[1:]) or host == pattern[2:]:
                    return True
            elif host == pattern:
                return True
        return False

    def matches_tool(self, names: Iterable[str]) -> bool:
        candidates = [name for name in names if name]
        return any(
            glob.matches(name, fold=True) if glob is not None else tool == name
            for tool, glob in zip(self.tools, self.tool_globs, strict=True)
            for name in candidates
        )


def _prefix_of(prefix: tuple[str, ...], words: tuple[str, ...], *, strict: bool) -> bool:
    if not strict:
        return _starts_with(words, prefix, by_name=False)
    # Deny and ask: wherever a command may start (`FOO=1 env -i sudo -u x curl`: behind a
    # wrapper, whose options are not read, every word may be what runs).
    return any(
        _starts_with(words[index:], prefix, by_name=True) for index in command_positions(words)
    )


def _starts_with(words: tuple[str, ...], prefix: tuple[str, ...], *, by_name: bool) -> bool:
    if len(words) < len(prefix) or not prefix:
        return False
    first, head = words[0], prefix[0]
    if first != head and not (by_name and os.path.basename(first) == head):
        return False
    return words[1 : len(prefix)] == prefix[1:]


@dataclass(frozen=True)
class PolicyVerdict:
    """What the policy says about one request: `decision`, the rule that decided (its id,
    or `default:<kind>`, or a name for what could not be read), and why."""

    decision: str
    rule: str
    reason: str
    # Protected names (case-folded) the policy opens for this request (`protected = true`).
    lifted: frozenset[str] = frozenset()


@dataclass(frozen=True, repr=False)
class Policy:
    """A loaded policy file."""

    source: str
    rules: tuple[PolicyRule, ...]
    defaults: tuple[tuple[str, str], ...] = ()
    _by_kind: Mapping[str, tuple[PolicyRule, ...]] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        grouped = {kind: tuple(r for r in self.rules if r.kind == kind) for kind in KINDS}
        object.__setattr__(self, "_by_kind", grouped)

    def __repr__(self) -> str:
        return f"Policy({self.source!r}, {len(self.rules)} rules)"

    def default_for(self, kind: str) -> str:
        return dict(self.defaults).get(kind, "table")

    def rules_of(self, kind: str) -> tuple[PolicyRule, ...]:
        return self._by_kind.get(kind, ())

    # --- the verdict on one request -----------------------------------------------------

    def evaluate(self, request: PermissionRequest, boundary: Boundary) -> PolicyVerdict | None:
        """The policy's verdict, or None when it leaves the request to the built-in table."""
        facets = list(self._facets(request, boundary))
        verdict = _combine(facets)
        if verdict is not None:
            return verdict
        kind = _policy_kind(request)
        if kind is None:
            return None
        default = self.default_for(kind)
        if default == "table":
            return None
        return PolicyVerdict(
            default,
            f"default:{kind}",
            f"no rule of the policy matches this {kind} request, and its default is {default}",
        )

    def _facets(
        self, request: PermissionRequest, boundary: Boundary
    ) -> Iterable[PolicyVerdict | None]:
        kind = request.kind
        if kind == MODE_KIND:
            return
        if is_change(request):
            change_kind = kind if kind in CHANGE_KINDS else "edit"
            yield self._paths_verdict(change_kind, named_paths(request), boundary)
        elif kind in ("read", "search"):
            yield self._paths_verdict("read", named_paths(request), boundary)
        command = command_of(request)
        if kind == "execute" or command is not None:
            yield self._command_verdict(command, request.raw_input, boundary)
        if kind == "fetch":
            yield self._fetch_verdict(request)
        # `other`, no kind, or a kind ACP does not define: judged by the tool's name too,
        # whatever else it carries (a `command`, a change). A tool's command or paths say
        # nothing of what the tool is (`mcp__prod__exec` with `git status`): allowing it
        # takes an allow of its name as well, and a deny of its name wins.
        if kind not in NAMED_KINDS:
            yield self._other_verdict(request)

    def _command_verdict(
        self, command: str | None, raw_input: Any, boundary: Boundary
    ) -> PolicyVerdict | None:
        if not self.rules_of("execute") and self.default_for("execute") == "table":
            return None  # a policy that says nothing of commands leaves them to the table
        if command is None:
            return PolicyVerdict(
                "ask", "no-command", "the request names no command the policy could check"
            )
        line = parse_command(command)
        return self.command_line_verdict(line, boundary, cwd=_cwd_of(raw_input))

    def command_line_verdict(
        self, line: CommandLine, boundary: Boundary, *, cwd: object = None
    ) -> PolicyVerdict | None:
        rules = self.rules_of("execute")
        verdicts = [_strictest(r for r in rules if r.matches_words(part)) for part in line.parts]
        denied = next((v for v in verdicts if v is not None and v.decision == "deny"), None)
        if denied is not None:
            return denied
        doubts = list(line.uncertain)
        root = boundary.root
        where = root
        if cwd is not None:
            found = locate(cwd, root)
            if found.resolved is None or found.special or not _under(found.resolved, root):
                doubts.append("it runs in a directory outside the root")
            else:
                where = found.resolved
        for redirection in line.redirections:
            if redirection.names_file and not _redirect_ok(redirection.target, where, boundary):
                doubts.append(
                    f"it redirects to {redirection.target!r}, outside the root or protected"
                )
        if doubts:
            return PolicyVerdict(
                "ask",
                "uncertain-command",
                "the command cannot be read for certain: " + "; ".join(doubts),
            )
        if not line.parts:
            return None
        return _combine(verdicts)

    def _paths_verdict(
        self, kind: str, paths: Sequence[object], boundary: Boundary
    ) -> PolicyVerdict | None:
        if not paths:
            return None
        rules = self.rules_of(kind)
        verdicts: list[PolicyVerdict | None] = []
        # Protected names a protecting rule opens for some path, and those another path
        # holds without one. The floor lifts a name for the whole request, so a name is
        # lifted only when no path of it holds the name unprotected.
        lifted: set[str] = set()
        kept: set[str] = set()
        for path in paths:
            found = locate(path, boundary.root)
            if found.resolved is None:
                verdicts.append(
                    PolicyVerdict("ask", "unplaceable-path", f"a path cannot be placed: {path!r}")
                )
                continue
            relative = _relative(found.resolved, boundary.root)
            named = str(found.lexical) if found.lexical is not None else None
            named_relative = (
                _relative(found.lexical, boundary.root) if found.lexical is not None else None
            )
            matching = [
                rule
                for rule in rules
                if rule.matches_path(relative, str(found.resolved), named=None)
                or (
                    rule.decision == "deny"
                    and rule.matches_path(named_relative, named or "", named=named)
                )
            ]
            verdict = _strictest(matching)
            verdicts.append(verdict)
            # Where it lands, a protecting rule's match opens its names; as named (a link
            # named `.git` is where git looks), and without one, nothing is opened.
            held = _protected_names(relative) | _protected_names(named_relative)
            opened = _protected_names(relative) if any(r.protected for r in matching) else set()
            lifted |= opened
            kept |= held - opened
        combined = _combine(verdicts)
        lifted -= kept
        if combined is not None and combined.decision == "allow" and lifted:
            return PolicyVerdict(
                combined.decision, combined.rule, combined.reason, frozenset(lifted)
            )
        return combined

    def _fetch_verdict(self, request: PermissionRequest) -> PolicyVerdict | None:
        hosts = fetch_hosts(request)
        rules = self.rules_of("fetch")
        if not hosts:
            # No host can be read: only a rule for every host (`*`) applies, and never as allow.
            verdict = _strictest(r for r in rules if r.matches_host(None))
            if verdict is not None and verdict.decision == "allow":
                return PolicyVerdict("ask", "unknown-host", "the fetch names no host to check")
            return verdict
        return _combine([_strictest(r for r in rules if r.matches_host(h)) for h in hosts])

    def _other_verdict(self, request: PermissionRequest) -> PolicyVerdict | None:
        names = [request.title or "", tool_name_of(request) or ""]
        return _strictest(r for r in self.rules_of("other") if r.matches_tool(names))


def _policy_kind(request: PermissionRequest) -> str | None:
    kind = request.kind
    if kind == MODE_KIND or kind == "think":
        return None
    if is_change(request):
        return kind if kind in CHANGE_KINDS else "edit"
    if kind == "search":
        return "read"
    if kind in KINDS:
        return kind
    return "other"


def _strictest(rules: Iterable[PolicyRule]) -> PolicyVerdict | None:
    best: PolicyRule | None = None
    for rule in rules:
        if best is None or rule.rank > best.rank:
            best = rule
    if best is None:
        return None
    return PolicyVerdict(best.decision, best.id, best.reason)


def _combine(verdicts: Sequence[PolicyVerdict | None]) -> PolicyVerdict | None:
    """Deny if any part is denied, ask if any is asked, allow only if every part is allowed;
    else (some part matched nothing) None."""
    if not verdicts:
        return None
    for decision in ("deny", "ask"):
        found = next((v for v in verdicts if v is not None and v.decision == decision), None)
        if found is not None:
            return found
    if all(v is not None for v in verdicts):
        first = verdicts[0]
        assert first is not None
        ids = list(dict.fromkeys(v.rule for v in verdicts if v is not None))
        lifted = frozenset().union(*(v.lifted for v in verdicts if v is not None))
        return PolicyVerdict("allow", ",".join(ids), first.reason, lifted)
    return None


def _relative(path: Path, root: Path) -> str | None:
    if not _under(path, root):
        return None
    relative = path.relative_to(root)
    return str(relative) if relative.parts else ""


def _protected_names(relative: str | None) -> set[str]:
    """The protected names (case-folded) a path under the root passes through."""
    names: set[str] = set()
    if relative is None:
        return names
    for part in Path(relative).parts:
        entry = protected_name(part)
        if entry is not None:
            names.add(entry.name.casefold())
    return names


def _redirect_ok(target: str, cwd: Path, boundary: Boundary) -> bool:
    """A redirection writes its target: it must land inside the root, and pass the floor
    as a change of that path would (protected names but those the operator opened, the
    bridge's own files, /proc)."""
    path = os.path.join(cwd, target)
    if not is_inside(path, boundary.root):
        return False
    write = PermissionRequest(REDIRECT_CALL_ID, kind="edit", locations=(path,))
    return floor(write, boundary, Supervision()) is None


def _cwd_of(raw_input: Any) -> object:
    if isinstance(raw_input, Mapping):
        return raw_input.get("cwd")
    return None


def command_of(request: PermissionRequest) -> str | None:
    """The command line of an execute request: rawInput's `command` (text, or a list of
    words), else for an execute its title (gemini sends the command only there)."""
    raw = request.raw_input
    if isinstance(raw, Mapping):
        value = raw.get("command", raw.get("cmd"))
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return " ".join(_quoted(v) for v in value)
    if request.kind == "execute" and request.title and request.title.strip():
        return request.title
    return None


def _quoted(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def tool_name_of(request: PermissionRequest) -> str | None:
    raw = request.raw_input
    if isinstance(raw, Mapping):
        for key in ("tool_name", "toolName", "tool", "name"):
            value = raw.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def fetch_hosts(request: PermissionRequest) -> tuple[str, ...]:
    """The hosts a fetch names, lower-case; () when none can be read, and also when a URL's
    host cannot be read with certainty (the fetch then names no host to check)."""
    urls: list[str] = []
    raw = request.raw_input
    if isinstance(raw, Mapping):
        for key in ("url", "urls", "uri"):
            value = raw.get(key)
            if isinstance(value, str):
                urls.append(value)
            elif isinstance(value, list):
                urls.extend(v for v in value if isinstance(v, str))
        prompt = raw.get("prompt")
        if isinstance(prompt, str) and not urls:
            urls.extend(_URL.findall(prompt))
    if not urls and request.title:
        urls.extend(_URL.findall(request.title))
    hosts: list[str] = []
    for url in urls:
        host = _host_of(url)
        if host is None:
            return ()
        hosts.append(host)
    return tuple(dict.fromkeys(hosts))


def _host_of(url: str) -> str | None:
    # A backslash, a space or a control character is read differently by different URL
    # parsers (WHATWG takes `\` as `/`): such a URL names no host with certainty.
    if any(ch == "\\" or ch.isspace() or ord(ch) < 32 for ch in url):
        return None
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not host:
        return None
    return host.rstrip(".").lower()


# --- loading ------------------------------------------------------------------------------


def load_policy(path: Path) -> Policy:
    """Read and validate a policy file; PolicyError names the line of any problem."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError(source, None, "no such file") from None
    except OSError as exc:
        raise PolicyError(source, None, f"cannot be read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise PolicyError(source, None, "is not UTF-8 text") from None
    return parse_policy(text, source)


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """A policy from its TOML text (see the module docstring); PolicyError on a problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = _TOML_LINE.search(str(exc))
        line = int(found.group(1)) if found else None
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise PolicyError(source, line, f"is not valid TOML: {message}") from None
    lines = text.splitlines()
    headers = [n for n, line in enumerate(lines, 1) if _RULE_HEADER.match(line)]
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise PolicyError(
            source,
            _key_line(lines, unknown[0], 1, len(lines)),
            f"unknown key {unknown[0]!r} (a policy has [[rule]] tables and a [default] table)",
        )
    version = data.get("version", 1)
    if version != 1:
        raise PolicyError(source, _key_line(lines, "version", 1, len(lines)), "version must be 1")
    raw_rules = data.get("rule", [])
    if not isinstance(raw_rules, list):
        raise PolicyError(source, None, "`rule` must be [[rule]] tables")
    rules: list[PolicyRule] = []
    seen: dict[str, int | None] = {}
    for index, raw in enumerate(raw_rules):
        start = headers[index] if index < len(headers) and len(headers) == len(raw_rules) else None
        end = (
            headers[index + 1] - 1 if start is not None and index + 1 < len(headers) else len(lines)
        )
        rule = _rule(raw, index, source, lines, start, end)
        if rule.id in seen:
            raise PolicyError(source, start, f"the rule id {rule.id!r} is used twice")
        seen[rule.id] = start
        rules.append(rule)
    defaults = _defaults(data.get("default", {}), source, lines)
    policy = Policy(source, tuple(rules), defaults)
    for rule in rules:
        check_examples(rule, source, lines)
    return policy


def _key_line(lines: Sequence[str], key: str, start: int, end: int) -> int | None:
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for number in range(start, min(end, len(lines)) + 1):
        if pattern.match(lines[number - 1]):
            return number
    return start if start <= len(lines) else None


def _rule(
    raw: Any, index: int, source: str, lines: Sequence[str], start: int | None, end: int
) -> PolicyRule:
    def fail(problem: str, key: str | None = None) -> PolicyError:
        line = start
        if key is not None and start is not None:
            line = _key_line(lines, key, start, end)
        return PolicyError(source, line, f"rule {index + 1}: {problem}")

    if not isinstance(raw, dict):
        raise fail("must be a table")
    unknown = sorted(set(raw) - RULE_KEYS)
    if unknown:
        raise fail(f"unknown key {unknown[0]!r}", unknown[0])
    rule_id = raw.get("id", f"rule-{index + 1}")
    if not isinstance(rule_id, str) or not re.fullmatch(
        r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}", rule_id
    ):
        raise fail("`id` must be letters, digits, `.`, `_`, `:` or `-` (64 at most)", "id")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise fail(f"`kind` must be one of {', '.join(KINDS)} (found {kind!r})", "kind")
    decision = raw.get("decision")
    if decision not in RANK:
        raise fail(f"`decision` must be allow, ask or deny (found {decision!r})", "decision")
    reason = raw.get("reason", f"the policy's rule {rule_id!r} says {decision}")
    if not isinstance(reason, str) or not reason.strip():
        raise fail("`reason` must be non-empty text", "reason")
    wanted = SPECIFIER[kind]
    for other in set(SPECIFIER.values()) - {wanted}:
        if other in raw:
            raise fail(f"a rule of kind {kind} takes `{wanted}`, not `{other}`", other)
    values = raw.get(wanted)
    if (
        not isinstance(values, list)
        or not values
        or not all(isinstance(v, str) and v.strip() for v in values)
    ):
        raise fail(f"`{wanted}` must be a non-empty list of non-empty strings", wanted)
    protected = raw.get("protected", False)
    if not isinstance(protected, bool):
        raise fail("`protected` must be true or false", "protected")
    if protected and (kind not in CHANGE_KINDS or decision != "allow"):
        raise fail(
            "`protected = true` lifts protection only in an allow of edit, delete or move",
            "protected",
        )
    examples: dict[str, tuple[str, ...]] = {}
    for key in ("match", "not_match"):
        found = raw.get(key, [])
        if not isinstance(found, list) or not all(isinstance(v, str) for v in found):
            raise fail(f"`{key}` must be a list of strings", key)
        examples[key] = tuple(found)
    fields: dict[str, Any] = {}
    if kind == "execute":
        commands = []
        for value in values:
            line = parse_command(value)
            if not line.certain or len(line.parts) != 1 or line.redirections:
                raise fail(
                    f"the command {value!r} must be one simple command of plain words", wanted
                )
            if decision == "allow" and any("*" in word for word in line.parts[0]):
                raise fail(f"an allow names its commands: {value!r} holds a wildcard", wanted)
            commands.append(line.parts[0])
        fields["commands"] = tuple(commands)
    elif kind in PATH_KINDS:
        globs = []
        for value in values:
            if any(part == ".." for part in value.split("/")):
                raise fail(f"the glob {value!r} holds `..`: write where it lands", wanted)
            if protected and value.startswith("/"):
                raise fail("`protected = true` takes globs relative to the root only", wanted)
            globs.append(Glob.compile(value))
        fields["paths"] = tuple(globs)
    elif kind == "fetch":
        hosts = []
        for value in values:
            host = value.strip().lower().rstrip(".")
            if not _HOST_PATTERN.fullmatch(host):
                raise fail(f"{value!r} is not a host name, `*.domain` or `*`", wanted)
            hosts.append(host)
        fields["hosts"] = tuple(hosts)
    else:
        fields["tools"] = tuple(values)
        fields["tool_globs"] = tuple(Glob.compile(v) if "*" in v else None for v in values)
    return PolicyRule(
        id=rule_id,
        kind=kind,
        decision=decision,
        reason=" ".join(reason.split()),
        line=start,
        protected=protected,
        match=examples["match"],
        not_match=examples["not_match"],
        **fields,
    )


def _defaults(raw: Any, source: str, lines: Sequence[str]) -> tuple[tuple[str, str], ...]:
    start = next(
        (n for n, line in enumerate(lines, 1) if re.match(r"^\s*\[\s*default\s*\]", line)), None
    )
    if not isinstance(raw, dict):
        raise PolicyError(source, start, "`default` must be a table")
    out = []
    for kind, value in raw.items():
        line = _key_line(lines, kind, start, len(lines)) if start is not None else None
        if kind not in KINDS:
            raise PolicyError(source, line, f"[default]: unknown kind {kind!r}")
        if value not in DEFAULT_CHOICES:
            raise PolicyError(
                source,
                line,
                f"[default]: {kind} must be table, ask or deny (an allow is always a rule's)",
            )
        out.append((kind, value))
    return tuple(out)


# --- examples -------------------------------------------------------------------------------


def example_matches(rule: PolicyRule, example: str) -> bool:
    """Whether `rule` fires on `example` (a command line, a path, a URL or host, a tool
    name), placed against EXAMPLE_ROOT. An allow of commands fires only when it alone would
    allow the whole line (every part, and nothing uncertain)."""
    boundary = Boundary(EXAMPLE_ROOT, owned=False)
    if rule.kind == "execute":
        single = Policy("<example>", (rule,))
        verdict = single.command_line_verdict(parse_command(example), boundary)
        return verdict is not None and verdict.decision == rule.decision and verdict.rule == rule.id
    if rule.kind in PATH_KINDS:
        found = locate(example, EXAMPLE_ROOT)
        if found.resolved is None:
            return False
        relative = _relative(found.resolved, EXAMPLE_ROOT)
        return rule.matches_path(relative, str(found.resolved), named=None)
    if rule.kind == "fetch":
        host = _host_of(example) if "://" in example else example.strip().lower()
        return rule.matches_host(host)
    return rule.matches_tool([example])


def check_examples(rule: PolicyRule, source: str, lines: Sequence[str]) -> None:
    start = rule.line
    end = len(lines)
    for key, expected in (("match", True), ("not_match", False)):
        for example in getattr(rule, key):
            if example_matches(rule, example) != expected:
                line = _key_line(lines, key, start, end) if start is not None else None
                said = "does not match" if expected else "matches"
                raise PolicyError(
                    source, line, f"rule {rule.id!r}: the example {example!r} {said} the rule"
                )


# --- the setting ----------------------------------------------------------------------------


def policy_setting_error(exc: PolicyError) -> ConfigError:
    return ConfigError("ACP_POLICY", str(exc))
