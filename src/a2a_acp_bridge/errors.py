"""The bridge's error tree.

    BridgeError
     ├── ConfigError              a setting is invalid; names the variable (start-up only)
     ├── SandboxError             a working directory could not be made or trusted
     ├── CapacityError            a cap is reached: live adapters or one context's queue
     ├── UnsupportedInputError    a part of the message cannot reach this agent without loss
     ├── InputProblem             the message cannot be carried as it is (a2a/input.py)
     ├── StateError               the state directory cannot be used (start-up only)
     │    └── StateWriteError     the state database refused a write (full, read-only, locked)
     └── AdapterError             the coding agent could not serve the turn
          ├── AdapterStartError   spawn, initialize, session/new or the mode switch failed
          │    ├── SupervisionError   the supervised mode is missing, refused or reads back wrong
          │    └── AuthenticationError  not logged in, and no credential the bridge has can do it
          ├── AdapterExitedError  the adapter process exited or broke its pipe
          ├── AdapterSilentError  no session/update arrived within the silence limit
          └── SupervisionLostError  the agent left its supervised mode during a turn

Not errors, and outside the tree: `turn.TurnCancelled` (a task cancelled before its turn
reached the agent: control flow that ends it CANCELED).

a2a/failures.py is the one place these become what the caller sees: a JSON-RPC error for
a request, or a task's final state. Every message is written for the A2A caller or the
operator: it names the agent, the setting or the exit, never repeats a foreign exception's
text verbatim.
"""

from __future__ import annotations


class BridgeError(Exception):
    """Base of every error the bridge raises on purpose."""


class ConfigError(BridgeError):
    """A setting is invalid. The message starts with the variable's name."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable
        self.problem = problem


class SandboxError(BridgeError):
    """A working directory could not be created or is not what the bridge expected.

    The message (for the operator's log) names the path; `problem` says what went wrong
    without it, for the caller, who is never shown the bridge's layout."""

    def __init__(self, message: str, *, problem: str | None = None) -> None:
        super().__init__(message)
        self.problem = problem or "it is not a directory the bridge made"


class CapacityError(BridgeError):
    """A task is refused at once: ACP_MAX_SESSIONS or ACP_MAX_QUEUED_TASKS is reached."""


class UnsupportedInputError(BridgeError):
    """A part of the message cannot be given to this agent without losing it."""


class StateError(BridgeError):
    """The state directory or its database cannot be used: refused at start-up, with
    what to do about it (state.py)."""


class StateWriteError(StateError):
    """The state database refused a write. `problem` names the cause in a few words
    ("the disk is full", "it is read-only", "it is locked by another process"), for the
    caller and /readyz, without the bridge's paths."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"the bridge's state database cannot be written: {problem}")
        self.problem = problem


class AdapterError(BridgeError):
    """The coding agent could not serve the turn."""


class AdapterStartError(AdapterError):
    """Starting the adapter (spawn, initialize, session/new, mode) failed or timed out."""


class SupervisionError(AdapterStartError):
    """The adapter cannot be put in its supervised mode, so no session is opened."""


class AuthenticationError(AdapterStartError):
    """The adapter is not authenticated and the bridge cannot log it in with what it was given
    (or the operator's ACP_AUTH_METHOD is not one it can use). Names variables, never values."""


class AdapterExitedError(AdapterError):
    """The adapter process exited (or closed its pipes) while the bridge still needed it."""

    def __init__(self, message: str, *, returncode: int | None, stderr_tail: str) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr_tail = stderr_tail


class AdapterSilentError(AdapterError):
    """The adapter sent no session/update for longer than the silence limit."""


class SupervisionLostError(AdapterError):
    """The agent switched itself to a mode that acts without asking, during a turn."""
