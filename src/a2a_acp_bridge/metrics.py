"""Metrics: the bridge's Prometheus instruments, in a registry of its own.

Each `Metrics` owns a `CollectorRegistry`, so two bridges in one process (tests) never
share a counter. The bridge and the executor report lifecycle edges through the methods
below; gauges of what is live (adapters, queued and running tasks) are read from the
bridge at scrape time. `GET /metrics` renders `exposition()`.

    (every name starts with a2a_acp_bridge_)
    tasks_total{state}                        finished tasks by final state
    tasks_in_progress{phase}                  queued | running, now
    task_duration_seconds{state}              histogram: accepted to final state
    task_first_event_seconds                  histogram: accepted to the agent's first update
    adapters_live{role}                       conversation | warm, now
    adapter_starts_total{outcome}             ok | failed
    adapter_crashes_total                     exits the bridge did not ask for
    permission_decisions_total{verdict,rule}  every session/request_permission
    tasks_accepted_total{principal}           tasks accepted, by principal (below)
    capacity_refusals_total{limit}            sessions | principal | queue
    http_refusals_total{reason}               host | unauthorized | token_unverifiable |
                                              body_too_large | bad_length
    background_failures_total{task}           warm_start | the bridge's own background tasks
    decisions_total{decider,verdict}          every decider's verdict (shadow ones too)
    decision_seconds{decider}                 histogram: a request's arrival to its verdict
    decision_timeouts_total                   supervisors that did not answer in time
    supervisor_answers_total{supervisor,verdict}  webhook | console; allow | deny
    supervisor_latency_seconds{supervisor}    histogram: question asked to answer
    supervisor_failures_total{supervisor,cause}   no verdict: down | timeout | status |
                                              garbage | signature | too_large | abstained |
                                              cancelled

The `principal` label is bounded: it is the principal's name only for the names the
operator wrote down (the token file's, `default`, A2A_ADMIN_PRINCIPALS, see
`name_principals`); any other principal (a JWT subject: as many as the identity provider
has users) counts as `other`. Logs carry every principal's name.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

PREFIX = "a2a_acp_bridge"
CONTENT_TYPE = CONTENT_TYPE_LATEST
# A turn takes from a fraction of a second (the demo agent) to many minutes (a real agent
# editing a repository).
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
# The first update arrives within milliseconds on a live adapter and after tens of seconds
# when one has to start (claude's session/new has been seen at ~46 s on a cold machine).
# A decision by the policy or the table takes microseconds; a supervisor's, from
# milliseconds (a webhook) to minutes (a human at the console).
DECISION_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 15, 30, 60, 120, 300)
FIRST_EVENT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
# A webhook answers in milliseconds; a human in seconds to minutes (the deadline's 120 s).
SUPERVISOR_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    """Counters, gauges and histograms of one bridge."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._tasks = Counter(
            f"{PREFIX}_tasks", "Tasks finished, by final state.", ["state"], registry=r
        )
        self._in_progress = Gauge(
            f"{PREFIX}_tasks_in_progress",
            "Tasks accepted and not finished: queued behind another turn, or running.",
            ["phase"],
            registry=r,
        )
        self._duration = Histogram(
            f"{PREFIX}_task_duration_seconds",
            "Time from accepting a task to its final state.",
            ["state"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self._first_event = Histogram(
            f"{PREFIX}_task_first_event_seconds",
            "Time from accepting a task to the first update of its turn from the agent.",
            buckets=FIRST_EVENT_BUCKETS,
            registry=r,
        )
        self._adapters = Gauge(
            f"{PREFIX}_adapters_live",
            "Adapter processes alive: serving a conversation, or warm in the pool.",
            ["role"],
            registry=r,
        )
        self._starts = Counter(
            f"{PREFIX}_adapter_starts",
            "Adapter starts (spawn, initialize, session and mode), by outcome.",
            ["outcome"],
            registry=r,
        )
        self._crashes = Counter(
            f"{PREFIX}_adapter_crashes",
            "Adapters that exited without the bridge asking them to.",
            registry=r,
        )
        self._decisions = Counter(
            f"{PREFIX}_permission_decisions",
            "Permission requests answered, by verdict and by the rule that decided.",
            ["verdict", "rule"],
            registry=r,
        )
        self._by_decider = Counter(
            f"{PREFIX}_decisions",
            "Verdicts of each decider of the decision chain (shadow ones included)",
            ["decider", "verdict"],
            registry=r,
        )
        self._decision_time = Histogram(
            f"{PREFIX}_decision_seconds",
            "Time from a permission request's arrival to a decider's verdict",
            ["decider"],
            buckets=DECISION_BUCKETS,
            registry=r,
        )
        self._decision_timeouts = Counter(
            f"{PREFIX}_decision_timeouts",
            "Supervisors that did not answer within ACP_DECISION_TIMEOUT_MS",
            registry=r,
        )
        self._capacity = Counter(
            f"{PREFIX}_capacity_refusals",
            "Tasks rejected because a cap was reached (ACP_MAX_SESSIONS, ACP_MAX_QUEUED_TASKS "
            "or ACP_MAX_SESSIONS_PER_PRINCIPAL).",
            ["limit"],
            registry=r,
        )
        self._http = Counter(
            f"{PREFIX}_http_refusals",
            "Requests refused at the door, by reason.",
            ["reason"],
            registry=r,
        )
        self._background = Counter(
            f"{PREFIX}_background_failures",
            "Failures of the bridge's background work (warm starts, reaping, stopping), by task.",
            ["task"],
            registry=r,
        )
        # --- issue 20: the supervisors ---
        self._supervisor_answers = Counter(
            f"{PREFIX}_supervisor_answers",
            "Questions a supervisor answered (no verdict counts as deny), by supervisor, verdict.",
            ["supervisor", "verdict"],
            registry=r,
        )
        self._supervisor_latency = Histogram(
            f"{PREFIX}_supervisor_latency_seconds",
            "Time from asking a supervisor to its answer.",
            ["supervisor"],
            buckets=SUPERVISOR_BUCKETS,
            registry=r,
        )
        self._supervisor_failures = Counter(
            f"{PREFIX}_supervisor_failures",
            "Questions a supervisor gave no verdict on, by supervisor and cause.",
            ["supervisor", "cause"],
            registry=r,
        )
        # --- end of the supervisors ---
        self._accepted = Counter(
            f"{PREFIX}_tasks_accepted",
            "Tasks accepted, by principal (a name the operator configured, else `other`).",
            ["principal"],
            registry=r,
        )
        self._named: frozenset[str] = frozenset()
        for outcome in ("ok", "failed"):
            self._starts.labels(outcome)
        for limit in ("sessions", "principal", "queue"):
            self._capacity.labels(limit)

    # --- gauges read at scrape time ------------------------------------------------------

    def watch(
        self,
        *,
        conversation_adapters: Callable[[], float],
        warm_adapters: Callable[[], float],
        queued_tasks: Callable[[], float],
        running_tasks: Callable[[], float],
    ) -> None:
        self._adapters.labels("conversation").set_function(conversation_adapters)
        self._adapters.labels("warm").set_function(warm_adapters)
        self._in_progress.labels("queued").set_function(queued_tasks)
        self._in_progress.labels("running").set_function(running_tasks)

    # --- events ------------------------------------------------------------------------

    def task_finished(self, state: str, duration_s: float) -> None:
        self._tasks.labels(state).inc()
        self._duration.labels(state).observe(duration_s)

    def name_principals(self, names: Collection[str]) -> None:
        """The principals whose names may be a label value (a bounded set)."""
        self._named = frozenset(names)

    def task_accepted(self, principal: str) -> None:
        self._accepted.labels(principal if principal in self._named else "other").inc()

    def first_event(self, latency_s: float) -> None:
        self._first_event.observe(latency_s)

    def adapter_started(self, ok: bool) -> None:
        self._starts.labels("ok" if ok else "failed").inc()

    def adapter_crashed(self) -> None:
        self._crashes.inc()

    def permission_decided(self, verdict: str, rule: str) -> None:
        self._decisions.labels(verdict, rule).inc()

    def decided_by(self, decider: str, verdict: str, latency_s: float) -> None:
        self._by_decider.labels(decider=decider, verdict=verdict).inc()
        self._decision_time.labels(decider=decider).observe(latency_s)

    def decision_timed_out(self) -> None:
        self._decision_timeouts.inc()

    def capacity_refused(self, limit: str) -> None:
        self._capacity.labels(limit).inc()

    def http_refused(self, reason: str) -> None:
        self._http.labels(reason).inc()

    def background_failed(self, task: str) -> None:
        self._background.labels(task).inc()

    def supervisor_answered(
        self, supervisor: str, verdict: str, latency_s: float, cause: str | None
    ) -> None:
        """One supervisor's answer (issue 20); `cause`: why it gave no verdict, if so."""
        self._supervisor_answers.labels(supervisor, verdict).inc()
        self._supervisor_latency.labels(supervisor).observe(latency_s)
        if cause is not None:
            self._supervisor_failures.labels(supervisor, cause).inc()

    def exposition(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)
