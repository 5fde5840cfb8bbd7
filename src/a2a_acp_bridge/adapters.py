"""What the bridge knows about real ACP adapters, as data.

Each profile is keyed by the `agentInfo.name` an adapter reports at `initialize` (never by
the command line, so a wrapper script around a known adapter is still recognised) and
records what was measured against that adapter (../shared/reference/realagents*.md):

- its most supervised native mode, the one the bridge forces on every session;
- the ids of the options it offers when leaving plan mode, and where each one lands;
- what refusing a permission request does to the turn (goes on, or ends it).

Nothing here guesses from a pattern: an id missing from a table has no known effect,
and the classifier refuses what it cannot place.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


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


# Mode ids in which the adapter (or a model of its own) approves its own actions, so no
# permission request reaches the bridge. Configuration can never select them.
UNSUPERVISED_MODES = frozenset(
    {
        "auto",
        "auto-approve",
        "auto_approve",
        "bypassPermissions",
        "bypass",
        "agent",
        "agent-full-access",
        "full-access",
        "yolo",
    }
)
# Modes at least as strict as any supervised mode: entering them never needs the bridge's consent.
READ_ONLY_MODES = frozenset({"plan", "read-only"})


@dataclass(frozen=True)
class AdapterProfile:
    """The measured behaviour of one adapter family."""

    family: str
    agent_names: frozenset[str]
    supervised_mode: str
    exit_plan_options: Mapping[str, ExitEffect] = field(default_factory=dict)
    # Effect of choosing a reject option, by option id; "*" is any other reject option.
    reject_effects: Mapping[str, TurnEffect] = field(default_factory=dict)
    # Effect of answering with the outcome `cancelled`.
    cancelled_effect: TurnEffect = TurnEffect.UNKNOWN
    # Effect of refusing a request to leave plan mode (any refusal).
    plan_refusal_effect: TurnEffect = TurnEffect.UNKNOWN
    # toolCallId prefixes of tools that leave plan mode but arrive with another kind.
    plan_exit_tool_prefixes: tuple[str, ...] = ()


CLAUDE = AdapterProfile(
    family="claude",
    agent_names=frozenset(
        {
            "@agentclientprotocol/claude-agent-acp",
            "@zed-industries/claude-agent-acp",
            "@zed-industries/claude-code-acp",
            "claude-agent-acp",
            "claude-code-acp",
        }
    ),
    supervised_mode="default",
    exit_plan_options={
        # claude-agent-acp 0.101
        "exit-plan-default": ExitEffect.KEEPS_SUPERVISION,
        "exit-plan-auto": ExitEffect.DROPS_SUPERVISION,
        "exit-plan-clear-auto": ExitEffect.DROPS_SUPERVISION,
        "exit-plan-accept-edits": ExitEffect.DROPS_SUPERVISION,
        "exit-plan-clear-accept-edits": ExitEffect.DROPS_SUPERVISION,
        "exit-plan-bypass": ExitEffect.DROPS_SUPERVISION,
        "reject": ExitEffect.STAYS_IN_PLAN,
        # claude-agent-acp 0.23 named the options after the modes
        "default": ExitEffect.KEEPS_SUPERVISION,
        "acceptEdits": ExitEffect.DROPS_SUPERVISION,
        "bypassPermissions": ExitEffect.DROPS_SUPERVISION,
        "plan": ExitEffect.STAYS_IN_PLAN,
    },
    reject_effects={"*": TurnEffect.CONTINUES},
    cancelled_effect=TurnEffect.CONTINUES,
    plan_refusal_effect=TurnEffect.ENDS,
)

CODEX = AdapterProfile(
    family="codex",
    agent_names=frozenset(
        {"@agentclientprotocol/codex-acp", "@zed-industries/codex-acp", "codex-acp"}
    ),
    supervised_mode="read-only",
    exit_plan_options={
        "implement_plan": ExitEffect.KEEPS_SUPERVISION,  # changes no mode
        "revise_plan": ExitEffect.STAYS_IN_PLAN,
    },
    reject_effects={
        "decline": TurnEffect.CONTINUES,
        "denied": TurnEffect.CONTINUES,
        "reject_permissions": TurnEffect.CONTINUES,
        "cancel": TurnEffect.ENDS,
        "abort": TurnEffect.ENDS,
        "revise_plan": TurnEffect.CONTINUES,
        "*": TurnEffect.ENDS,
    },
    cancelled_effect=TurnEffect.ENDS,
    plan_refusal_effect=TurnEffect.CONTINUES,
)

GEMINI = AdapterProfile(
    family="gemini",
    agent_names=frozenset({"gemini-cli", "@google/gemini-cli", "gemini"}),
    supervised_mode="default",
    exit_plan_options={
        # exit_plan_mode arrives as kind "other"; approving lands in the default mode.
        "proceed_once": ExitEffect.KEEPS_SUPERVISION,
        "cancel": ExitEffect.STAYS_IN_PLAN,
    },
    reject_effects={"*": TurnEffect.CONTINUES},
    cancelled_effect=TurnEffect.CONTINUES,
    plan_refusal_effect=TurnEffect.CONTINUES,
    plan_exit_tool_prefixes=("exit_plan_mode",),
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
    reject_effects={"*": TurnEffect.CONTINUES},
    cancelled_effect=TurnEffect.CONTINUES,
)

PROFILES: tuple[AdapterProfile, ...] = (CLAUDE, CODEX, GEMINI, QWEN, GOOSE, MISTRAL_VIBE, DEMO)

# Reject ids known to refuse only the call, or to end the turn, whatever the adapter: used
# to rank refusals for an adapter the bridge does not recognise.
GENERIC_REJECT_EFFECTS: Mapping[str, TurnEffect] = {
    "decline": TurnEffect.CONTINUES,
    "denied": TurnEffect.CONTINUES,
    "cancel": TurnEffect.ENDS,
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
    return {**CLAUDE.exit_plan_options, **CODEX.exit_plan_options}


def refusal_effect(
    profile: AdapterProfile | None, option_id: str | None, *, leaving_plan: bool
) -> TurnEffect:
    """What refusing with `option_id` (None: the outcome `cancelled`) does to the turn."""
    if profile is None:
        if option_id is None:
            return TurnEffect.UNKNOWN
        return GENERIC_REJECT_EFFECTS.get(option_id, TurnEffect.UNKNOWN)
    if leaving_plan and profile.plan_refusal_effect is not TurnEffect.UNKNOWN:
        return profile.plan_refusal_effect
    if option_id is None:
        return profile.cancelled_effect
    return profile.reject_effects.get(
        option_id, profile.reject_effects.get("*", TurnEffect.UNKNOWN)
    )
