"""Logging an adapter in with the credentials the operator gave the bridge (ACP `authenticate`).

The adapter lists its methods at `initialize`. When it refuses `session/new` or
`session/load` for want of authentication (-32000), `choose` picks the first method of its
profile's table (`adapters.Credentials`) that it offered and whose variables are set in the
adapter's own environment; `Authenticator.retry` calls `authenticate` with it once and asks
again. ACP_AUTH_METHOD names the method instead: it must be offered and not interactive,
and it is called right after `initialize`, so it is the one in use rather than whatever the
adapter found stored. A browser or terminal login is never started by the bridge: the error
names the command that makes it once and the file it leaves. The keys stay in the adapter's
environment, which it reads itself; messages and logs name variables, never their values.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from acp import RequestError

from a2a_acp_bridge.adapters import Credentials, KeyMethod, StoredLogin
from a2a_acp_bridge.errors import AuthenticationError

logger = logging.getLogger(__name__)

# The ACP error for "authentication required".
AUTH_REQUIRED = -32000
# Told of each start step that succeeded: (step, what it found). For `doctor`.
StepCallback = Callable[[str, str], None]
T = TypeVar("T")


@dataclass(frozen=True)
class Offered:
    """One method the adapter listed in `authMethods` at initialize."""

    method_id: str
    terminal: bool = False  # ACP's `terminal` type: a login the client would run in a terminal


@dataclass(frozen=True)
class Situation:
    """What the chooser knows: the adapter, what it offered, its table, its environment."""

    agent: str  # the name in messages (`codex-acp`)
    command: tuple[str, ...]  # how the bridge runs it, for the login command it names
    offered: tuple[Offered, ...] = ()
    credentials: Credentials = field(default_factory=Credentials)
    env: Mapping[str, str] = field(default_factory=dict)
    # Where an operator's login is stored: the operator's own environment, from which the
    # login files are handed to each conversation's HOME (None: `env`).
    login_env: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Login:
    """Call `authenticate` with this method."""

    method_id: str
    meta: Mapping[str, Any]
    source: str  # what satisfies it: variable names, or "ACP_AUTH_METHOD"


@dataclass(frozen=True)
class NoLogin:
    """No method the bridge may call: the whole sentence for the operator."""

    problem: str


def offered_methods(methods: Sequence[Any] | None) -> tuple[Offered, ...]:
    """The SDK's parsed `authMethods` in the bridge's words (items without an id dropped)."""
    found = []
    for method in methods or ():
        method_id = getattr(method, "id", None)
        if isinstance(method_id, str) and method_id:
            found.append(Offered(method_id, terminal=getattr(method, "type", None) == "terminal"))
    return tuple(found)


def describe_offer(methods: Sequence[Any] | None) -> str:
    """The methods an adapter offered, for doctor's initialize line."""
    offered = offered_methods(methods)
    if not offered:
        return "offers no authentication method"
    return "offers authentication: " + ", ".join(repr(o.method_id) for o in offered)


def choose(situation: Situation, requested: str | None) -> Login | NoLogin:
    """The method to log in with: the operator's (ACP_AUTH_METHOD), else the first of the
    profile's table that was offered and whose variables are set."""
    credentials = situation.credentials
    agent = situation.agent
    if requested:
        offered = next((o for o in situation.offered if o.method_id == requested), None)
        if offered is None:
            listed = ", ".join(repr(o.method_id) for o in situation.offered) or "none"
            return NoLogin(
                f"{agent} does not offer the authentication method {requested!r} named by "
                f"ACP_AUTH_METHOD; it offers: {listed}"
            )
        login = credentials.login_for(requested)
        if login is not None or offered.terminal:
            how = (
                f"; {_login_sentence(login, situation)}, then unset ACP_AUTH_METHOD"
                if login is not None
                else "; make that login with the agent's own CLI, then unset ACP_AUTH_METHOD"
            )
            return NoLogin(
                f"{agent}'s authentication method {requested!r} (ACP_AUTH_METHOD) is an "
                f"interactive login, which the bridge never starts{how}"
            )
        method = credentials.method(requested)
        if method is None:
            # A method the bridge has no facts about: the operator's call, made as named.
            return Login(requested, {}, "ACP_AUTH_METHOD")
        login_found = _login(method, situation.env)
        if login_found is None:
            return NoLogin(
                f"{agent}'s authentication method {requested!r} (ACP_AUTH_METHOD) needs "
                f"{_needs(method)} in the bridge's environment"
            )
        return login_found
    # A method offered as a terminal login is interactive whatever the table says.
    offered_ids = {o.method_id for o in situation.offered if not o.terminal}
    for method in credentials.methods:
        if method.method_id in offered_ids:
            login_found = _login(method, situation.env)
            if login_found is not None:
                return login_found
    return NoLogin(f"{agent} is not authenticated: {remedy(situation)}")


def remedy(situation: Situation) -> str:
    """What the operator does once so that the adapter can log in (no values, only names)."""
    credentials = situation.credentials
    offered_ids = {o.method_id for o in situation.offered}
    ways = []
    keys = [m for m in credentials.methods if m.method_id in offered_ids]
    if keys:
        ways.append(
            "set "
            + _alternatives([f"{_needs(m)} (its {m.method_id!r} method)" for m in keys])
            + " in the bridge's environment"
        )
    if credentials.read_by_adapter:
        ways.append(
            "set "
            + _alternatives([" and ".join(group) for group in credentials.read_by_adapter])
            + " in the bridge's environment"
        )
    ways.extend(_login_sentence(login, situation) for login in credentials.logins)
    if ways:
        return ", or ".join(ways)
    if situation.offered:
        listed = ", ".join(repr(o.method_id) for o in situation.offered)
        return (
            f"it offers the authentication methods {listed}, none of which the bridge knows how "
            "to satisfy: give it its credentials and name the method with ACP_AUTH_METHOD"
        )
    return (
        "give it its credentials (an API key in the bridge's environment, or a login made "
        "with its own CLI) and try again"
    )


def login_command(login: StoredLogin, command: Sequence[str]) -> str:
    """The command line an operator runs once: the adapter's own, without its ACP flags."""
    words = [word for word in command if word not in login.acp_flags]
    return shlex.join([*words, *login.args])


def login_path(login: StoredLogin, env: Mapping[str, str]) -> str:
    """Where the adapter reads that login, under the environment the bridge gives it."""
    override = env.get(login.override, "").strip()
    if override:
        parts = [override.rstrip("/"), login.override_subdir, login.file]
    else:
        home = env.get("HOME", "").strip().rstrip("/") or "~"
        parts = [home, login.home_subdir, login.file]
    return "/".join(part for part in parts if part)


def _login_sentence(login: StoredLogin, situation: Situation) -> str:
    return (
        f"log in once with `{login_command(login, situation.command)}` ({login.what}), which "
        f"stores it in {login_path(login, situation.login_env or situation.env)}"
    )


def _login(method: KeyMethod, env: Mapping[str, str]) -> Login | None:
    for group in method.variables:
        if all(env.get(name, "").strip() for name in group):
            meta: dict[str, Any] = {}
            if method.base_url_variable is not None:
                meta["gateway"] = {"baseUrl": env[method.base_url_variable].strip()}
            return Login(method.method_id, meta, " and ".join(group))
    return None


def _needs(method: KeyMethod) -> str:
    return _alternatives([" and ".join(group) for group in method.variables])


def _alternatives(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    glue = ", or " if any(" and " in item or "," in item for item in items) else " or "
    if glue == " or " and len(items) > 2:
        return ", ".join(items[:-1]) + " or " + items[-1]
    return glue.join(items)


class Authenticator:
    """One adapter connection's logins: at most one `authenticate` call per start."""

    def __init__(
        self,
        conn: Any,
        *,
        label: str,
        command: Sequence[str],
        env: Mapping[str, str],
        requested: str | None,
        on_step: StepCallback | None = None,
        login_env: Mapping[str, str] | None = None,
    ) -> None:
        self._conn = conn
        self._requested = requested
        self._on_step = on_step
        self.situation = Situation(
            agent=label, command=tuple(command), env=env, login_env=login_env
        )
        self.used: Login | None = None

    async def start(self, agent: str, credentials: Credentials | None, methods: Any) -> None:
        """Learn what the adapter offered at initialize; with ACP_AUTH_METHOD, log in now."""
        self.situation = Situation(
            agent=agent,
            command=self.situation.command,
            offered=offered_methods(methods),
            credentials=credentials or Credentials(),
            env=self.situation.env,
            login_env=self.situation.login_env,
        )
        if self._requested:
            await self._log_in(self._choose())

    async def retry(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call` (session/new or session/load); refused for want of authentication, log in
        once with a method the operator's credentials satisfy and call it again."""
        try:
            return await call()
        except RequestError as exc:
            if exc.code != AUTH_REQUIRED:
                raise
            if self.used is not None:
                raise self._still_refused() from None
            await self._log_in(self._choose())
        try:
            return await call()
        except RequestError as exc:
            if exc.code == AUTH_REQUIRED:
                raise self._still_refused() from None
            raise

    def not_authenticated(self) -> AuthenticationError:
        """The error for a refusal the bridge could not act on (claude's first prompt)."""
        if self.used is not None:
            return self._still_refused()
        return AuthenticationError(
            f"{self.situation.agent} is not authenticated: {remedy(self.situation)}"
        )

    def _choose(self) -> Login:
        choice = choose(self.situation, self._requested)
        if isinstance(choice, NoLogin):
            raise AuthenticationError(choice.problem)
        return choice

    async def _log_in(self, login: Login) -> None:
        agent = self.situation.agent
        try:
            await self._conn.authenticate(method_id=login.method_id, **dict(login.meta))
        except RequestError as exc:
            raise AuthenticationError(
                f"{agent} refused to log in with its {login.method_id!r} method "
                f"(JSON-RPC error {exc.code}), given {login.source}: check "
                + ("that setting" if login.source == "ACP_AUTH_METHOD" else "that value")
            ) from None
        self.used = login
        logger.info(
            "adapter authenticated",
            extra={"agent": agent, "method": login.method_id, "source": login.source},
        )
        if self._on_step is not None:
            self._on_step("authenticate", f"{login.method_id!r} with {login.source}")

    def _still_refused(self) -> AuthenticationError:
        used = self.used
        assert used is not None
        return AuthenticationError(
            f"{self.situation.agent} is still not authenticated after logging in with its "
            f"{used.method_id!r} method (given {used.source}): {remedy(self.situation)}"
        )
