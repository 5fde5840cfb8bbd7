"""The login chooser: which `authenticate` method the operator's variables satisfy.

The offered methods are the ones the pinned adapters list at initialize for a client like
the bridge, as their sources build them (codex-acp 2.6 `getCodexAuthMethods`, gemini-cli
0.61 `GeminiAgent.initialize`), parsed by the ACP SDK exactly as the session parses them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from acp.schema import InitializeResponse
from hypothesis import given
from hypothesis import strategies as st

from a2a_acp_bridge.acp.auth import (
    Login,
    NoLogin,
    Situation,
    choose,
    describe_offer,
    login_command,
    login_path,
    offered_methods,
    remedy,
)
from a2a_acp_bridge.adapters import CLAUDE, CODEX, GEMINI, Credentials
from a2a_acp_bridge.config import ADAPTER_PACKAGES

CODEX_METHODS: list[dict[str, Any]] = [
    {
        "id": "api-key",
        "name": "API Key",
        "description": "Use an API key to authenticate",
        "_meta": {"api-key": {"provider": "openai"}},
    },
    {"id": "chat-gpt", "name": "ChatGPT", "description": "Use ChatGPT to authenticate"},
]
GEMINI_METHODS: list[dict[str, Any]] = [
    {"id": "oauth-personal", "name": "Log in with Google"},
    {
        "id": "gemini-api-key",
        "name": "Gemini API key",
        "_meta": {"api-key": {"provider": "google"}},
    },
    {"id": "vertex-ai", "name": "Vertex AI"},
    {
        "id": "gateway",
        "name": "AI API Gateway",
        "_meta": {"gateway": {"protocol": "google", "restartRequired": "false"}},
    },
]
CODEX_COMMAND = ("/opt/adapters/node_modules/.bin/codex-acp",)
GEMINI_COMMAND = ("/opt/adapters/node_modules/.bin/gemini", "--acp")
CLAUDE_COMMAND = ("/opt/adapters/node_modules/.bin/claude-agent-acp",)
HOME = {"HOME": "/home/op", "PATH": "/usr/bin"}


def parsed(methods: list[dict[str, Any]]) -> Any:
    """authMethods as the session receives them: through the SDK's InitializeResponse."""
    response = InitializeResponse.model_validate({"protocolVersion": 1, "authMethods": methods})
    return response.auth_methods


def codex(env: Mapping[str, str]) -> Situation:
    return Situation(
        "codex-acp",
        CODEX_COMMAND,
        offered_methods(parsed(CODEX_METHODS)),
        CODEX.credentials,
        {**HOME, **env},
    )


def gemini(env: Mapping[str, str], methods: list[dict[str, Any]] = GEMINI_METHODS) -> Situation:
    return Situation(
        "gemini-cli",
        GEMINI_COMMAND,
        offered_methods(parsed(methods)),
        GEMINI.credentials,
        {**HOME, **env},
    )


def claude(env: Mapping[str, str]) -> Situation:
    return Situation("claude-agent-acp", CLAUDE_COMMAND, (), CLAUDE.credentials, {**HOME, **env})


def problem(choice: Login | NoLogin) -> str:
    assert isinstance(choice, NoLogin), choice
    return choice.problem


# --- the automatic choice ---------------------------------------------------------------


def test_codex_logs_in_with_api_key_when_openai_api_key_is_set() -> None:
    assert choose(codex({"OPENAI_API_KEY": "sk-1"}), None) == Login("api-key", {}, "OPENAI_API_KEY")


def test_codex_names_codex_api_key_first_as_codex_acp_reads_it_first() -> None:
    choice = choose(codex({"OPENAI_API_KEY": "sk-1", "CODEX_API_KEY": "ck-1"}), None)
    assert choice == Login("api-key", {}, "CODEX_API_KEY")


def test_a_blank_variable_satisfies_nothing() -> None:
    assert problem(choose(codex({"OPENAI_API_KEY": "  "}), None)).startswith(
        "codex-acp is not authenticated: "
    )


def test_without_credentials_codex_is_told_every_way_in_with_the_command_and_the_file() -> None:
    text = problem(choose(codex({}), None))
    assert text == (
        "codex-acp is not authenticated: set CODEX_API_KEY or OPENAI_API_KEY (its 'api-key' "
        "method) in the bridge's environment, or log in once with "
        "`/opt/adapters/node_modules/.bin/codex-acp cli login` (a ChatGPT login), which stores "
        "it in /home/op/.codex/auth.json"
    )


def test_the_login_file_follows_codex_home() -> None:
    text = problem(choose(codex({"CODEX_HOME": "/srv/codex/"}), None))
    assert "which stores it in /srv/codex/auth.json" in text


def test_gemini_prefers_the_gateway_its_base_url_names_and_sends_that_url() -> None:
    env = {"GOOGLE_GEMINI_BASE_URL": "http://gw.internal:8080", "GEMINI_API_KEY": "g-1"}
    assert choose(gemini(env), None) == Login(
        "gateway", {"gateway": {"baseUrl": "http://gw.internal:8080"}}, "GOOGLE_GEMINI_BASE_URL"
    )


def test_gemini_api_key_needs_no_meta_the_key_stays_in_the_environment() -> None:
    assert choose(gemini({"GEMINI_API_KEY": "g-1"}), None) == Login(
        "gemini-api-key", {}, "GEMINI_API_KEY"
    )


def test_vertex_needs_both_project_and_location_or_a_google_api_key() -> None:
    assert isinstance(choose(gemini({"GOOGLE_CLOUD_PROJECT": "p"}), None), NoLogin)
    both = {"GOOGLE_CLOUD_PROJECT": "p", "GOOGLE_CLOUD_LOCATION": "us-central1"}
    assert choose(gemini(both), None) == Login(
        "vertex-ai", {}, "GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION"
    )
    assert choose(gemini({"GOOGLE_API_KEY": "k"}), None) == Login("vertex-ai", {}, "GOOGLE_API_KEY")


def test_a_method_the_adapter_did_not_offer_is_never_chosen() -> None:
    without_vertex = [m for m in GEMINI_METHODS if m["id"] != "vertex-ai"]
    text = problem(choose(gemini({"GOOGLE_API_KEY": "k"}, without_vertex), None))
    assert "vertex-ai" not in text
    assert "GEMINI_API_KEY (its 'gemini-api-key' method)" in text


def test_a_known_method_offered_as_a_terminal_login_is_never_chosen() -> None:
    # An adapter that calls its terminal login `api-key`: the type wins over the table.
    methods = [{"id": "api-key", "name": "API Key", "type": "terminal", "args": ["login"]}]
    situation = Situation(
        "codex-acp",
        CODEX_COMMAND,
        offered_methods(parsed(methods)),
        CODEX.credentials,
        {**HOME, "OPENAI_API_KEY": "sk-1"},
    )
    assert isinstance(choose(situation, None), NoLogin)
    assert "interactive login" in problem(choose(situation, "api-key"))


def test_without_credentials_gemini_names_each_method_and_the_google_login() -> None:
    text = problem(choose(gemini({}), None))
    assert text.startswith("gemini-cli is not authenticated: set ")
    assert "GEMINI_API_KEY (its 'gemini-api-key' method)" in text
    assert "GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION, or GOOGLE_API_KEY (its 'vertex-ai'" in (
        text
    )
    # The interactive CLI, without the --acp flag that makes it an ACP server.
    assert (
        'log in once with `/opt/adapters/node_modules/.bin/gemini` ("Sign in with Google"' in text
    )
    assert text.endswith("which stores it in /home/op/.gemini/oauth_creds.json")


def test_claude_offers_nothing_and_is_told_the_keys_it_reads_and_its_login() -> None:
    text = problem(choose(claude({}), None))
    assert text.startswith(
        "claude-agent-acp is not authenticated: set ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, "
        "CLAUDE_CODE_OAUTH_TOKEN"
    )
    assert "`/opt/adapters/node_modules/.bin/claude-agent-acp --cli auth login`" in text
    assert text.endswith("/home/op/.claude/.credentials.json")


def test_an_adapter_the_bridge_does_not_know_is_told_to_name_a_method() -> None:
    situation = Situation("goose", ("goose", "acp"), offered_methods(parsed(CODEX_METHODS)))
    assert problem(choose(situation, None)) == (
        "goose is not authenticated: it offers the authentication methods 'api-key', "
        "'chat-gpt', none of which the bridge knows how to satisfy: give it its credentials "
        "and name the method with ACP_AUTH_METHOD"
    )
    silent = Situation("goose", ("goose", "acp"))
    assert "give it its credentials" in remedy(silent)


# --- the operator's choice (ACP_AUTH_METHOD) --------------------------------------------


def test_a_method_that_is_not_offered_is_refused_naming_what_is() -> None:
    text = problem(choose(codex({"GEMINI_API_KEY": "g"}), "gemini-api-key"))
    assert text == (
        "codex-acp does not offer the authentication method 'gemini-api-key' named by "
        "ACP_AUTH_METHOD; it offers: 'api-key', 'chat-gpt'"
    )


@pytest.mark.parametrize(
    ("situation", "method", "command"),
    [
        (codex({}), "chat-gpt", "codex-acp cli login"),
        (gemini({}), "oauth-personal", "/opt/adapters/node_modules/.bin/gemini`"),
    ],
)
def test_an_interactive_method_is_never_started_even_when_named(
    situation: Situation, method: str, command: str
) -> None:
    text = problem(choose(situation, method))
    assert f"{method!r} (ACP_AUTH_METHOD) is an interactive login, which the bridge never" in text
    assert command in text
    assert text.endswith("then unset ACP_AUTH_METHOD")


def test_a_terminal_method_of_an_unknown_adapter_is_never_started() -> None:
    methods = [{"id": "login", "name": "Log in", "type": "terminal", "args": ["--login"]}]
    situation = Situation("goose", ("goose",), offered_methods(parsed(methods)))
    assert "is an interactive login, which the bridge never starts" in problem(
        choose(situation, "login")
    )


def test_a_named_method_without_its_variables_says_what_it_needs() -> None:
    text = problem(choose(codex({}), "api-key"))
    assert text == (
        "codex-acp's authentication method 'api-key' (ACP_AUTH_METHOD) needs CODEX_API_KEY or "
        "OPENAI_API_KEY in the bridge's environment"
    )


def test_a_named_method_wins_over_the_automatic_order() -> None:
    env = {"GOOGLE_GEMINI_BASE_URL": "http://gw", "GEMINI_API_KEY": "g"}
    assert choose(gemini(env), "gemini-api-key") == Login("gemini-api-key", {}, "GEMINI_API_KEY")


def test_an_offered_method_the_bridge_has_no_facts_about_is_called_as_named() -> None:
    situation = Situation("goose", ("goose",), offered_methods(parsed(CODEX_METHODS)))
    assert choose(situation, "api-key") == Login("api-key", {}, "ACP_AUTH_METHOD")


# --- what the adapters offered, commands and files ----------------------------------------


def test_offered_methods_keep_ids_and_mark_terminal_logins() -> None:
    methods = [*CODEX_METHODS, {"id": "tty", "name": "TTY", "type": "terminal"}]
    offered = offered_methods(parsed(methods))
    assert [(o.method_id, o.terminal) for o in offered] == [
        ("api-key", False),
        ("chat-gpt", False),
        ("tty", True),
    ]
    assert describe_offer(parsed(methods)) == "offers authentication: 'api-key', 'chat-gpt', 'tty'"
    assert describe_offer(parsed([])) == "offers no authentication method"


def test_the_login_command_is_the_presets_own_even_through_npx() -> None:
    login = GEMINI.credentials.logins[0]
    gemini_npx = ("/usr/bin/npx", "--yes", "@google/gemini-cli@0.61.0", "--acp")
    assert login_command(login, gemini_npx) == "/usr/bin/npx --yes @google/gemini-cli@0.61.0"
    package, version, _ = ADAPTER_PACKAGES["codex"]
    npx = ("npx", "--yes", f"{package}@{version}")
    assert login_command(CODEX.credentials.logins[0], npx) == (
        f"npx --yes {package}@{version} cli login"
    )


def test_the_login_file_follows_each_adapters_directory_variable() -> None:
    gemini_login = GEMINI.credentials.logins[0]
    assert login_path(gemini_login, {"GEMINI_CLI_HOME": "/g"}) == "/g/.gemini/oauth_creds.json"
    claude_login = CLAUDE.credentials.logins[0]
    assert login_path(claude_login, {"CLAUDE_CONFIG_DIR": "/c"}) == "/c/.credentials.json"
    assert login_path(claude_login, {}) == "~/.claude/.credentials.json"


def test_every_table_names_only_methods_the_adapter_offers() -> None:
    offered = {
        "codex": {m["id"] for m in CODEX_METHODS},
        "gemini": {m["id"] for m in GEMINI_METHODS},
    }
    tables: dict[str, Credentials] = {"codex": CODEX.credentials, "gemini": GEMINI.credentials}
    for family, table in tables.items():
        named = {m.method_id for m in table.methods}
        named |= {i for login in table.logins for i in login.method_ids} & offered[family]
        assert named <= offered[family], family


# --- never a secret --------------------------------------------------------------------

VARIABLES = sorted(
    {
        name
        for table in (CODEX.credentials, GEMINI.credentials, CLAUDE.credentials)
        for method in table.methods
        for group in method.variables
        for name in group
    }
    | {name for group in CLAUDE.credentials.read_by_adapter for name in group}
)
# A marker no message contains, so a value found in a text was copied there.
SECRETS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", max_size=30).map(
    lambda tail: "S3CR3T" + tail
)


@given(
    values=st.dictionaries(st.sampled_from(VARIABLES), SECRETS, max_size=len(VARIABLES)),
    requested=st.sampled_from(
        [None, "api-key", "chat-gpt", "gemini-api-key", "vertex-ai", "gateway", "oauth-personal"]
    ),
)
def test_no_message_ever_carries_a_variables_value(
    values: dict[str, str], requested: str | None
) -> None:
    for situation in (codex(values), gemini(values), claude(values)):
        choice = choose(situation, requested)
        texts = [remedy(situation)]
        if isinstance(choice, NoLogin):
            texts.append(choice.problem)
        else:
            texts.append(choice.source)
        for text in texts:
            for value in values.values():
                assert value not in text
