"""What the bridge knows about real ACP adapters, as data.

Each profile is keyed by the `agentInfo.name` an adapter reports at `initialize` (never by
the command line, so a wrapper script around a known adapter is still recognised) and
records what was measured against that adapter offline (docs/adapter-tests.md, the fixtures
under tests/fixtures/acp) or read in its source where no run covered it:

- its most supervised native mode, the one the bridge forces on every session;
- the ids of the options it offers when leaving plan mode, and where each one lands;
- what refusing a permission request does to the turn (goes on, or ends it), for an
  ordinary tool call and for a plan exit, by option id and for the outcome `cancelled`;
- which "always" answers write a rule to disk that outlives the session.

Nothing here guesses from a pattern: an id missing from a table has no known effect, and
the classifier refuses what it cannot place. docs/permissions.md prints these tables.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

ANY_OTHER = "*"  # the key for "any other reject option" in the refusal tables


class ExitEffect(enum.Enum):
    """Where an option offered when leaving plan mode takes the session."""

    KEEPS_SUPERVISION = "keeps supervision"
    DROPS_SUPERVISION = "drops supervision"
    STAYS_IN_PLAN = "stays in plan mode"


class TurnEffect(enum.Enum):
    """What a refusal does to the agent's turn."""

    CONTINUES = "continues"
    ENDS = "ends"
    UNKNOWN = "unknown"


# Mode ids that switch permission checks off whatever the adapter: nothing is asked.
BYPASS_MODES = frozenset(
    {
        "bypassPermissions",
        "bypass",
        "dangerously-skip-permissions",
        "agent-full-access",
        "full-access",
        "danger-full-access",
        "yolo",
        "auto-approve",
        "auto-accept",
        "allow-all",
        "approve-all",
    }
)
# Mode ids in which edits are made without asking, whatever the adapter: claude's
# acceptEdits, gemini's autoEdit, qwen's auto-edit (compared without case, dashes or
# underscores, so accept_edits and auto_edit too).
EDITS_UNASKED_MODES = frozenset({"acceptEdits", "autoEdit", "accept-edits", "auto-edit"})
# Mode ids in which the adapter (or a model of its own) approves its own actions, so no
# permission request reaches the bridge. Configuration can never select them. The extra
# ids are bypasses only in the adapters that use them, so an adapter the bridge does not
# know is judged by BYPASS_MODES and EDITS_UNASKED_MODES alone.
UNSUPERVISED_MODES = (
    BYPASS_MODES
    | EDITS_UNASKED_MODES
    | {
        "auto",  # claude-agent-acp 0.101: its own classifier model decides
        "agent",  # codex-acp 2.6 "Auto review": its guardian model decides
        "workspace-write",  # codex-acp 2.6: edits inside the workspace unasked
        "smart_approve",  # goose: its own model decides when to ask
    }
)


def _key(mode: str) -> str:
    return mode.strip().lower().replace("-", "").replace("_", "")


_UNSUPERVISED_KEYS = frozenset(_key(mode) for mode in UNSUPERVISED_MODES)
_BYPASS_KEYS = frozenset(_key(mode) for mode in BYPASS_MODES | EDITS_UNASKED_MODES)


def is_unsupervised_mode(mode: str, *, known_adapter: bool = True) -> bool:
    """Whether `mode` names a mode in which the agent approves its own actions or edits
    without asking (compared without case, dashes or underscores). For an adapter the
    bridge does not know, only the ids that mean so in every adapter count."""
    return _key(mode) in (_UNSUPERVISED_KEYS if known_adapter else _BYPASS_KEYS)


# Modes at least as strict as any supervised mode: entering them never needs the bridge's consent.
READ_ONLY_MODES = frozenset({"plan", "read-only"})


@dataclass(frozen=True)
class KeyMethod:
    """An `authenticate` method the bridge may call, and the variables that satisfy it."""

    method_id: str
    # Alternatives, in the adapter's own order: every name of one of them must be set.
    variables: tuple[tuple[str, ...], ...]
    # A variable whose value goes in `_meta.gateway.baseUrl` (a gateway's address).
    base_url_variable: str | None = None


@dataclass(frozen=True)
class StoredLogin:
    """An interactive login (a browser, a terminal): the operator runs it once, never the bridge.

    The command is the adapter's own command line without `acp_flags`, then `args`; the
    login lands in `$override/override_subdir/file` when `override` is set in the adapter's
    environment, else in `$HOME/home_subdir/file`."""

    method_ids: frozenset[str]
    what: str
    args: tuple[str, ...]
    override: str
    override_subdir: str
    home_subdir: str
    file: str
    acp_flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Credentials:
    """How one adapter family is given its credentials (read from its source, measured offline)."""

    # Methods the bridge calls when its variables are at hand, in order of preference.
    methods: tuple[KeyMethod, ...] = ()
    logins: tuple[StoredLogin, ...] = ()
    # Variables the adapter reads by itself, without any `authenticate` (alternatives).
    read_by_adapter: tuple[tuple[str, ...], ...] = ()
    # session/new succeeds without credentials; only the first prompt is refused.
    opens_unauthenticated: bool = False

    def login_for(self, method_id: str) -> StoredLogin | None:
        for login in self.logins:
            if method_id in login.method_ids:
                return login
        return None

    def method(self, method_id: str) -> KeyMethod | None:
        for method in self.methods:
            if method.method_id == method_id:
                return method
        return None


@dataclass(frozen=True)
class AdapterProfile:
    """The measured behaviour of one adapter family (one agentInfo.name or a few)."""

    family: str
    agent_names: frozenset[str]
    supervised_mode: str
    measured: tuple[str, ...] = ()  # the versions these facts come from
    exit_plan_options: Mapping[str, ExitEffect] = field(default_factory=dict)
    # What choosing a reject option does to the turn, by option id; ANY_OTHER for the rest.
    reject_effects: Mapping[str, TurnEffect] = field(default_factory=dict)
    # What answering with the outcome `cancelled` does.
    cancelled_effect: TurnEffect = TurnEffect.UNKNOWN
    # The same two, when the request was a plan exit (adapters treat it differently).
    plan_reject_effects: Mapping[str, TurnEffect] = field(default_factory=dict)
    plan_cancelled_effect: TurnEffect = TurnEffect.UNKNOWN
    # toolCallId prefixes of tools that leave plan mode but arrive with another kind.
    plan_exit_tool_prefixes: tuple[str, ...] = ()
    # Allow options whose grant is written to disk and outlives the session.
    persistent_allow_options: frozenset[str] = frozenset()
    credentials: Credentials = field(default_factory=Credentials)


# Claude's plan-exit ids. 0.101 names them exit-plan-*; 0.23 and 0.16 named them after the
# mode they land in. The sets never overlap in meaning, so every claude profile reads both.
CLAUDE_EXIT_OPTIONS: Mapping[str, ExitEffect] = {
    # claude-agent-acp 0.101 (measured: fixtures claude-agent-acp-0.101.0-*plan*)
    "exit-plan-default": ExitEffect.KEEPS_SUPERVISION,  # lands in `default`: every edit asks
    "exit-plan-auto": ExitEffect.DROPS_SUPERVISION,  # `auto`: a classifier model decides
    "exit-plan-clear-auto": ExitEffect.DROPS_SUPERVISION,  # fresh query in `auto`
    "exit-plan-accept-edits": ExitEffect.DROPS_SUPERVISION,  # `acceptEdits`: edits unasked
    "exit-plan-clear-accept-edits": ExitEffect.DROPS_SUPERVISION,
    "exit-plan-bypass": ExitEffect.DROPS_SUPERVISION,  # `bypassPermissions` (IS_SANDBOX=1)
    "reject": ExitEffect.STAYS_IN_PLAN,  # "No, keep planning"
    # claude-agent-acp 0.23.1 and claude-code-acp 0.16.2 (measured)
    "default": ExitEffect.KEEPS_SUPERVISION,
    "acceptEdits": ExitEffect.DROPS_SUPERVISION,
    "bypassPermissions": ExitEffect.DROPS_SUPERVISION,
    "plan": ExitEffect.STAYS_IN_PLAN,
}

# claude-agent-acp 0.101 offers a client like the bridge (no terminal, no gateway capability)
# no authentication method at all: Claude Code reads its key itself, and without one it opens
# the session and refuses the first prompt (-32000). Its logins are terminal ones.
CLAUDE_CREDENTIALS = Credentials(
    read_by_adapter=(
        ("ANTHROPIC_API_KEY",),
        ("ANTHROPIC_AUTH_TOKEN",),
        ("CLAUDE_CODE_OAUTH_TOKEN",),
        # The cloud backends: their own credentials are the cloud's (ACP_AGENT_ENV).
        ("CLAUDE_CODE_USE_BEDROCK",),
        ("CLAUDE_CODE_USE_VERTEX",),
    ),
    logins=(
        StoredLogin(
            method_ids=frozenset({"claude-ai-login", "console-login", "claude-login"}),
            what="a Claude login",
            args=("--cli", "auth", "login"),
            override="CLAUDE_CONFIG_DIR",
            override_subdir="",
            home_subdir=".claude",
            file=".credentials.json",
        ),
    ),
    opens_unauthenticated=True,
)

CLAUDE = AdapterProfile(
    family="claude",
    agent_names=frozenset({"@agentclientprotocol/claude-agent-acp", "claude-agent-acp"}),
    supervised_mode="default",
    measured=("0.101.0",),
    exit_plan_options=CLAUDE_EXIT_OPTIONS,
    # `reject` on Bash or Write: "User refused permission to run tool", the model goes on.
    reject_effects={ANY_OTHER: TurnEffect.CONTINUES},
    # "Tool use aborted", then the model is called again and the turn ends end_turn.
    cancelled_effect=TurnEffect.CONTINUES,
    # "No, keep planning" interrupts: stopReason `cancelled`, no further model call.
    plan_reject_effects={ANY_OTHER: TurnEffect.ENDS},
    plan_cancelled_effect=TurnEffect.CONTINUES,
    # Bash's allow-with-updates lands in <cwd>/.claude/settings.local.json.
    persistent_allow_options=frozenset({"allow-with-updates"}),
    credentials=CLAUDE_CREDENTIALS,
)

CLAUDE_ZED = AdapterProfile(
    family="claude",
    agent_names=frozenset({"@zed-industries/claude-agent-acp"}),
    supervised_mode="default",
    measured=("0.23.1",),
    exit_plan_options=CLAUDE_EXIT_OPTIONS,
    reject_effects={ANY_OTHER: TurnEffect.CONTINUES},
    cancelled_effect=TurnEffect.CONTINUES,
    # `plan` ("No, keep planning"): "User rejected request to exit plan mode.", goes on.
    plan_reject_effects={ANY_OTHER: TurnEffect.CONTINUES},
    plan_cancelled_effect=TurnEffect.CONTINUES,
)

CLAUDE_CODE = AdapterProfile(
    family="claude",
    agent_names=frozenset({"@zed-industries/claude-code-acp", "claude-code-acp"}),
    supervised_mode="default",
    measured=("0.16.2",),
    exit_plan_options=CLAUDE_EXIT_OPTIONS,
    # A refusal is a deny with interrupt: no further model call (stopReason end_turn).
    reject_effects={ANY_OTHER: TurnEffect.ENDS},
    cancelled_effect=TurnEffect.CONTINUES,
    plan_reject_effects={ANY_OTHER: TurnEffect.ENDS},
)

# codex-acp 2.6 refuses session/new (-32000) while codex has no login. Its `api-key` method
# logs codex in with CODEX_API_KEY, else OPENAI_API_KEY, read from its own environment (so the
# key never travels over ACP); `chat-gpt` opens a browser, `chat-gpt-device-code` needs URL
# elicitation. `codex-acp cli login` runs the pinned codex CLI's own `login`.
CODEX_CREDENTIALS = Credentials(
    methods=(KeyMethod("api-key", (("CODEX_API_KEY",), ("OPENAI_API_KEY",))),),
    logins=(
        StoredLogin(
            method_ids=frozenset({"chat-gpt", "chat-gpt-device-code"}),
            what="a ChatGPT login",
            args=("cli", "login"),
            override="CODEX_HOME",
            override_subdir="",
            home_subdir=".codex",
            file="auth.json",
        ),
    ),
)

CODEX = AdapterProfile(
    family="codex",
    agent_names=frozenset(
        {"@agentclientprotocol/codex-acp", "@zed-industries/codex-acp", "codex-acp"}
    ),
    supervised_mode="read-only",
    measured=("2.6.0", "0.16.0"),
    exit_plan_options={
        # The plan review ("Implement this plan?"): implementing changes no session mode.
        "implement_plan": ExitEffect.KEEPS_SUPERVISION,
        "revise_plan": ExitEffect.STAYS_IN_PLAN,
    },
    reject_effects={
        # 2.6: "No, continue without running it" (source; never offered in the runs).
        "decline": TurnEffect.CONTINUES,
        # 2.6: "No, and tell Codex what to do differently": the whole turn is aborted.
        "cancel": TurnEffect.ENDS,
        # 2.6, permission-profile requests: nothing is granted (source).
        "reject_permissions": TurnEffect.CONTINUES,
        # 0.16: `denied` continues without running; `abort` aborts the turn.
        "denied": TurnEffect.CONTINUES,
        "abort": TurnEffect.ENDS,
        # Codex maps anything it does not recognise to cancel (find(...) ?? "cancel").
        ANY_OTHER: TurnEffect.ENDS,
    },
    cancelled_effect=TurnEffect.ENDS,
    # revise_plan, an unknown id or `cancelled` on the plan review: "User kept the session
    # in plan mode.", the turn ends end_turn normally.
    plan_reject_effects={ANY_OTHER: TurnEffect.CONTINUES},
    plan_cancelled_effect=TurnEffect.CONTINUES,
    # A prefix rule in $CODEX_HOME/rules/default.rules (2.6 and 0.16 names).
    persistent_allow_options=frozenset(
        {"accept_execpolicy_amendment", "approved-execpolicy-amendment"}
    ),
    credentials=CODEX_CREDENTIALS,
)

# gemini-cli 0.61 opens a session with the auth type stored in its settings, else `gateway`
# when GOOGLE_GEMINI_BASE_URL is set, else `gemini-api-key`; session/load has no such default
# and is refused (-32000) until one is selected. `authenticate` selects one (and stores it in
# $HOME/.gemini/settings.json); the keys are read from its own environment. `oauth-personal`
# is a browser login made in the interactive CLI.
GEMINI_CREDENTIALS = Credentials(
    methods=(
        KeyMethod(
            "gateway", (("GOOGLE_GEMINI_BASE_URL",),), base_url_variable="GOOGLE_GEMINI_BASE_URL"
        ),
        KeyMethod("gemini-api-key", (("GEMINI_API_KEY",),)),
        KeyMethod(
            "vertex-ai", (("GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION"), ("GOOGLE_API_KEY",))
        ),
    ),
    logins=(
        StoredLogin(
            method_ids=frozenset({"oauth-personal"}),
            what='"Sign in with Google" in its menu',
            args=(),
            override="GEMINI_CLI_HOME",
            override_subdir=".gemini",
            home_subdir=".gemini",
            file="oauth_creds.json",
            acp_flags=("--acp",),
        ),
    ),
)

GEMINI = AdapterProfile(
    family="gemini",
    # The name gemini-cli's ACP agent reports at initialize (its own source says so; the
    # npm package is @google/gemini-cli, the command `gemini --acp`).
    agent_names=frozenset({"gemini-cli"}),
    supervised_mode="default",
    measured=("0.61.0",),
    exit_plan_options={
        # exit_plan_mode arrives as kind `other` with only these two options; approving it
        # lands in the `default` mode ("Plan approved. Switching to Default mode"): its code
        # picks yolo only when not interactive, and `--acp` counts as interactive.
        "proceed_once": ExitEffect.KEEPS_SUPERVISION,
        "cancel": ExitEffect.STAYS_IN_PLAN,
    },
    # `cancel`: 'Tool "…" was canceled by the user.' goes to the model, the turn goes on.
    reject_effects={ANY_OTHER: TurnEffect.CONTINUES},
    cancelled_effect=TurnEffect.CONTINUES,
    plan_reject_effects={ANY_OTHER: TurnEffect.CONTINUES},
    plan_cancelled_effect=TurnEffect.CONTINUES,
    # gemini-cli starts every toolCallId with the tool's name and "__" (0.61), or "-"
    # (older): the separator belongs to the prefix, so `exit_plan_mode_x` is another tool.
    plan_exit_tool_prefixes=("exit_plan_mode__", "exit_plan_mode-"),
    # "Allow … for all future sessions" (offered only with permanent approval enabled).
    persistent_allow_options=frozenset({"proceed_always_and_save"}),
    credentials=GEMINI_CREDENTIALS,
)

QWEN = AdapterProfile(
    family="qwen",
    agent_names=frozenset({"qwen-code", "@qwen-code/qwen-code"}),
    supervised_mode="default",
)
GOOSE = AdapterProfile(family="goose", agent_names=frozenset({"goose"}), supervised_mode="approve")
MISTRAL_VIBE = AdapterProfile(
    family="mistral-vibe",
    agent_names=frozenset({"mistral-vibe", "vibe", "@mistralai/mistral-vibe"}),
    supervised_mode="ask",
)

# The embedded demo agent (a2a_acp_bridge.demo_agent) behaves like claude-agent-acp.
DEMO = AdapterProfile(
    family="demo",
    agent_names=frozenset({"a2a-acp-bridge-demo"}),
    supervised_mode="default",
    reject_effects={ANY_OTHER: TurnEffect.CONTINUES},
    cancelled_effect=TurnEffect.CONTINUES,
)

PROFILES: tuple[AdapterProfile, ...] = (
    CLAUDE,
    CLAUDE_ZED,
    CLAUDE_CODE,
    CODEX,
    GEMINI,
    QWEN,
    GOOSE,
    MISTRAL_VIBE,
    DEMO,
)

# Reject ids whose effect is the same in every adapter that uses them: used only to rank
# the refusals of an adapter the bridge does not recognise (what it reports stays unknown).
GENERIC_REJECT_EFFECTS: Mapping[str, TurnEffect] = {
    "decline": TurnEffect.CONTINUES,
    "denied": TurnEffect.CONTINUES,
    "abort": TurnEffect.ENDS,
}


def profile_for(agent_name: str | None) -> AdapterProfile | None:
    """The profile of the adapter that reported `agent_name` at initialize, if known."""
    if not agent_name:
        return None
    for profile in PROFILES:
        if agent_name in profile.agent_names:
            return profile
    return None


def exit_plan_table(profile: AdapterProfile | None) -> Mapping[str, ExitEffect]:
    """The plan-exit option table for an adapter; for an unknown one, claude's and codex's
    ids, which no other adapter reuses with another meaning."""
    if profile is not None:
        return profile.exit_plan_options
    return {**CLAUDE_EXIT_OPTIONS, **CODEX.exit_plan_options}


def refusal_effect(
    profile: AdapterProfile | None, option_id: str | None, *, leaving_plan: bool
) -> TurnEffect:
    """What refusing with `option_id` (None: the outcome `cancelled`) does to the turn, as
    measured; UNKNOWN for an adapter the bridge does not recognise."""
    if profile is None:
        return TurnEffect.UNKNOWN
    if leaving_plan:
        table, cancelled = profile.plan_reject_effects, profile.plan_cancelled_effect
    else:
        table, cancelled = profile.reject_effects, profile.cancelled_effect
    if option_id is None:
        return cancelled
    return table.get(option_id, table.get(ANY_OTHER, TurnEffect.UNKNOWN))


def likely_refusal_effect(
    profile: AdapterProfile | None, option_id: str | None, *, leaving_plan: bool
) -> TurnEffect:
    """`refusal_effect`, falling back on ids whose meaning every adapter shares: used to
    rank refusals, never to tell the caller what happened."""
    measured = refusal_effect(profile, option_id, leaving_plan=leaving_plan)
    if measured is TurnEffect.UNKNOWN and option_id is not None:
        return GENERIC_REJECT_EFFECTS.get(option_id, TurnEffect.UNKNOWN)
    return measured
