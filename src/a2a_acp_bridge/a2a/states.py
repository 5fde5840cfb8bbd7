"""The A2A task states, grouped once for every module that asks "is it over?"."""

from __future__ import annotations

from a2a.types.a2a_pb2 import TaskState

from a2a_acp_bridge.progress import FinalState

# Nothing more happens to the task.
TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_REJECTED,
    }
)
# The task waits for its caller: a message (INPUT_REQUIRED) or credentials (AUTH_REQUIRED).
INTERRUPTED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
# The agent works on it (or is about to).
BUSY = frozenset({TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING})

# How a turn's final state (progress.py) is written on the wire.
OF_FINAL_STATE = {
    FinalState.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    FinalState.CANCELED: TaskState.TASK_STATE_CANCELED,
    FinalState.REJECTED: TaskState.TASK_STATE_REJECTED,
    FinalState.FAILED: TaskState.TASK_STATE_FAILED,
}
