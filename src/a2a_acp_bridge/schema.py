"""The state database's schema: its tables as they are now, and the versioned steps that
build them, each once, in order.

The tables (SQLAlchemy Core, no ORM) say only what SQLite and PostgreSQL both have: text,
64-bit integers, booleans and bytes. A task is stored whole as its protobuf bytes beside
the columns a query needs (its context, owner, state and when it finished); a push config
as its protobuf bytes encrypted; a conversation as plain columns.

`migrate` reads the version the database is at (the `meta` table's `schema_version` row),
refuses a database written by a newer bridge (its version above `SCHEMA_VERSION`: running
on would silently misread it), and applies the missing steps in one transaction, so an
upgrade interrupted half-way leaves the old version intact. A step describes the tables as
they were at its version, never the module-level ones, which keep changing: a test builds
the database from scratch through every step and checks that it matches these tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Index,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    inspect,
    select,
)

from a2a_acp_bridge.errors import StateError

# The principal of a caller when the bridge has no tokens, and of rows stored before principals.
DEFAULT_PRINCIPAL = "default"
SCHEMA_VERSION_KEY = "schema_version"

metadata = MetaData()

meta = Table(
    "meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

# One A2A task: the Task protobuf in `body`; the rest is what queries filter and sort on.
tasks = Table(
    "tasks",
    metadata,
    Column("id", String(255), primary_key=True),
    Column("context_id", String(255), nullable=False),
    # The SDK's owner partition (the caller's user name; empty without authentication).
    Column("owner", String(255), nullable=False, default=""),
    Column("state", String(32), nullable=False),
    Column("updated_ns", BigInteger, nullable=False),
    # Wall clock (ns since the epoch) when the task reached a terminal state, else null.
    Column("finished_ns", BigInteger, nullable=True),
    Column("body", LargeBinary, nullable=False),
    # With A2A_DATABASE_URL: the replica running the task (cluster/membership.py), while it runs.
    Column("replica", String(64), nullable=True),
    Index("tasks_context", "context_id"),
    Index("tasks_finished", "finished_ns"),
)

# With A2A_DATABASE_URL: the replicas alive, each renewing its heartbeat (database clock).
replicas = Table(
    "replicas",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("started_ns", BigInteger, nullable=False),
    Column("heartbeat_ns", BigInteger, nullable=False),
    # Its adapters running, those of them busy, and ACP_MAX_SESSIONS, as of its last heartbeat.
    Column("live", BigInteger, nullable=False, default=0),
    Column("capacity", BigInteger, nullable=False, default=0),
    Column("busy", BigInteger, nullable=False, default=0),
)

# With A2A_DATABASE_URL: every event of a running task, in order (`n` from 1), so a replica
# that does not run it streams it to a subscriber (a2a/event_log.py).
task_events = Table(
    "task_events",
    metadata,
    Column("task_id", String(255), primary_key=True),
    Column("n", BigInteger, primary_key=True, autoincrement=False),
    # The StreamResponse protobuf.
    Column("body", LargeBinary, nullable=False),
    Column("created_ns", BigInteger, nullable=False),
)

# With A2A_DATABASE_URL: which replica runs each conversation's adapter, until when
# (renewed with its heartbeat; cluster/leases.py).
leases = Table(
    "leases",
    metadata,
    Column("context_id", String(255), primary_key=True),
    Column("replica", String(64), nullable=False),
    Column("expires_ns", BigInteger, nullable=False),
)

# With A2A_DATABASE_URL: a message handed to the replica holding its conversation's lease
# (a2a/handover.py): the request, then the task it became or the error it met.
handovers = Table(
    "handovers",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("replica", String(64), nullable=False),
    Column("owner", String(255), nullable=False),
    Column("request", LargeBinary, nullable=False),
    Column("task_id", String(255), nullable=True),
    Column("error", Text, nullable=True),
    Column("created_ns", BigInteger, nullable=False),
    # The holder's count of the task's events when it took the message: the follow-up's
    # events are those after it (the receiver's view of task_events may lag a batch).
    Column("after_n", BigInteger, nullable=True),
    # The A2A version the caller spoke (a 0.3 caller's inline push config stays 0.3).
    Column("protocol", String(8), nullable=True),
)

# A push-notification config: the TaskPushNotificationConfig protobuf, encrypted (Fernet).
push_configs = Table(
    "push_configs",
    metadata,
    Column("task_id", String(255), primary_key=True),
    Column("config_id", String(255), primary_key=True),
    Column("owner", String(255), nullable=False, default=""),
    Column("body", LargeBinary, nullable=False),
    # The A2A version it was registered over ("0.3" or "1.0"): its webhook gets that shape.
    Column("protocol", String(8), nullable=False, default="1.0"),
)

# A conversation (A2A context): where it works and which ACP session holds its memory.
conversations = Table(
    "conversations",
    metadata,
    Column("context_id", String(255), primary_key=True),
    Column("principal", String(255), nullable=False, default=DEFAULT_PRINCIPAL),
    # The sandbox (or ACP_CWD) and the identity the bridge saw: "st_dev:st_ino:generation".
    Column("root", Text, nullable=False),
    Column("identity", String(64), nullable=True),
    Column("owned", Boolean, nullable=False),
    # Which agent made the session: the preset, or the command line.
    Column("agent", Text, nullable=False),
    Column("session_id", String(255), nullable=True),
    Column("created_ns", BigInteger, nullable=False),
    Column("last_used_ns", BigInteger, nullable=False),
)

# One permission decision of one decider (the ledger, ledger.py): what was asked, by whom,
# what was answered, by which decider and rule, and how long it took.
decisions = Table(
    "decisions",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("time_ns", BigInteger, nullable=False),
    Column("principal", String(255), nullable=False, default=DEFAULT_PRINCIPAL),
    Column("context_id", String(255), nullable=True),
    Column("task_id", String(255), nullable=True),
    Column("session_id", String(255), nullable=True),
    Column("adapter", Text, nullable=False),
    Column("tool_call_id", Text, nullable=False),
    Column("kind", String(32), nullable=True),
    Column("title", Text, nullable=True),
    # JSON: the paths as named, and the offered options [{optionId, kind}].
    Column("locations", Text, nullable=False),
    Column("command", Text, nullable=True),
    Column("offered", Text, nullable=False),
    Column("chosen", Text, nullable=True),
    Column("verdict", String(16), nullable=False),
    Column("decider", String(64), nullable=False),
    Column("rule", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("latency_ns", BigInteger, nullable=False),
    # Recorded by a decider that did not decide (ACP_POLICY_MODE=log-only).
    Column("shadow", Boolean, nullable=False, default=False),
    Index("decisions_time", "time_ns"),
    Index("decisions_context", "context_id"),
)


@dataclass(frozen=True)
class Migration:
    """One step: the schema at `version` from the one before."""

    version: int
    summary: str
    apply: Callable[[Connection], None]


def _v1(conn: Connection) -> None:
    step = MetaData()
    Table(
        "meta",
        step,
        Column("key", String(64), primary_key=True),
        Column("value", Text, nullable=False),
    )
    Table(
        "tasks",
        step,
        Column("id", String(255), primary_key=True),
        Column("context_id", String(255), nullable=False),
        Column("owner", String(255), nullable=False, default=""),
        Column("state", String(32), nullable=False),
        Column("updated_ns", BigInteger, nullable=False),
        Column("finished_ns", BigInteger, nullable=True),
        Column("body", LargeBinary, nullable=False),
        Index("tasks_context", "context_id"),
        Index("tasks_finished", "finished_ns"),
    )
    Table(
        "push_configs",
        step,
        Column("task_id", String(255), primary_key=True),
        Column("config_id", String(255), primary_key=True),
        Column("owner", String(255), nullable=False, default=""),
        Column("body", LargeBinary, nullable=False),
    )
    step.create_all(conn)


def _v2(conn: Connection) -> None:
    step = MetaData()
    Table(
        "conversations",
        step,
        Column("context_id", String(255), primary_key=True),
        Column("principal", String(255), nullable=False, default=DEFAULT_PRINCIPAL),
        Column("root", Text, nullable=False),
        Column("identity", String(64), nullable=True),
        Column("owned", Boolean, nullable=False),
        Column("agent", Text, nullable=False),
        Column("session_id", String(255), nullable=True),
        Column("created_ns", BigInteger, nullable=False),
        Column("last_used_ns", BigInteger, nullable=False),
    )
    step.create_all(conn)


def _v3(conn: Connection) -> None:
    # Rows from before were served over 1.0 after a restart: they stay so.
    conn.exec_driver_sql(
        "ALTER TABLE push_configs ADD COLUMN protocol VARCHAR(8) NOT NULL DEFAULT '1.0'"
    )


def _v4(conn: Connection) -> None:
    step = MetaData()
    Table(
        "decisions",
        step,
        Column("id", String(64), primary_key=True),
        Column("time_ns", BigInteger, nullable=False),
        Column("principal", String(255), nullable=False, default=DEFAULT_PRINCIPAL),
        Column("context_id", String(255), nullable=True),
        Column("task_id", String(255), nullable=True),
        Column("session_id", String(255), nullable=True),
        Column("adapter", Text, nullable=False),
        Column("tool_call_id", Text, nullable=False),
        Column("kind", String(32), nullable=True),
        Column("title", Text, nullable=True),
        # JSON: the paths as named, and the offered options [{optionId, kind}].
        Column("locations", Text, nullable=False),
        Column("command", Text, nullable=True),
        Column("offered", Text, nullable=False),
        Column("chosen", Text, nullable=True),
        Column("verdict", String(16), nullable=False),
        Column("decider", String(64), nullable=False),
        Column("rule", Text, nullable=False),
        Column("reason", Text, nullable=False),
        Column("latency_ns", BigInteger, nullable=False),
        # Recorded by a decider that did not decide (ACP_POLICY_MODE=log-only).
        Column("shadow", Boolean, nullable=False, default=False),
        Index("decisions_time", "time_ns"),
        Index("decisions_context", "context_id"),
    )
    step.create_all(conn)


def _v5(conn: Connection) -> None:
    conn.exec_driver_sql("ALTER TABLE tasks ADD COLUMN replica VARCHAR(64)")
    step = MetaData()
    Table(
        "replicas",
        step,
        Column("id", String(64), primary_key=True),
        Column("started_ns", BigInteger, nullable=False),
        Column("heartbeat_ns", BigInteger, nullable=False),
        Column("live", BigInteger, nullable=False, default=0),
        Column("capacity", BigInteger, nullable=False, default=0),
    )
    Table(
        "task_events",
        step,
        Column("task_id", String(255), primary_key=True),
        Column("n", BigInteger, primary_key=True, autoincrement=False),
        Column("body", LargeBinary, nullable=False),
        Column("created_ns", BigInteger, nullable=False),
    )
    Table(
        "leases",
        step,
        Column("context_id", String(255), primary_key=True),
        Column("replica", String(64), nullable=False),
        Column("expires_ns", BigInteger, nullable=False),
    )
    Table(
        "handovers",
        step,
        Column("id", String(64), primary_key=True),
        Column("replica", String(64), nullable=False),
        Column("owner", String(255), nullable=False),
        Column("request", LargeBinary, nullable=False),
        Column("task_id", String(255), nullable=True),
        Column("error", Text, nullable=True),
        Column("created_ns", BigInteger, nullable=False),
    )
    step.create_all(conn)
    if conn.dialect.name == "postgresql":
        # Subscribers on other replicas are woken by each committed batch of a task's events
        # (PostgreSQL delivers one notification per task and transaction).
        conn.exec_driver_sql(
            "CREATE FUNCTION a2a_bridge_task_event() RETURNS trigger AS $$ BEGIN "
            "PERFORM pg_notify('a2a_bridge_events', json_build_object('task', NEW.task_id)::text);"
            " RETURN NULL; END; $$ LANGUAGE plpgsql"
        )
        conn.exec_driver_sql(
            "CREATE TRIGGER a2a_bridge_task_event AFTER INSERT ON task_events "
            "FOR EACH ROW EXECUTE FUNCTION a2a_bridge_task_event()"
        )


def _v6(conn: Connection) -> None:
    # Replicas from before report it with their next heartbeat.
    conn.exec_driver_sql("ALTER TABLE replicas ADD COLUMN busy BIGINT NOT NULL DEFAULT 0")


def _v7(conn: Connection) -> None:
    conn.exec_driver_sql("ALTER TABLE handovers ADD COLUMN after_n BIGINT")
    conn.exec_driver_sql("ALTER TABLE handovers ADD COLUMN protocol VARCHAR(8)")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "tasks and push-notification configs", _v1),
    Migration(2, "conversations: sandbox, identity, agent, ACP session, principal", _v2),
    Migration(3, "push configs: the A2A version each was registered over", _v3),
    Migration(4, "decisions: the ledger of every permission decision", _v4),
    Migration(
        5, "replicas: who is alive, which runs each task and conversation, tasks' events", _v5
    ),
    Migration(6, "replicas: how many of each replica's adapters are busy", _v6),
    Migration(7, "handovers: the event a follow-up's stream starts after, the A2A version", _v7),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def schema_version(conn: Connection) -> int:
    """The version the database is at: 0 when it is empty. A database holding tables but
    no version is not the bridge's, and is refused rather than written into."""
    names = set(inspect(conn).get_table_names())
    if not names:
        return 0
    if meta.name not in names:
        raise StateError(
            f"the database holds tables ({', '.join(sorted(names))}) but no schema version: "
            "it is not an a2a-acp-bridge state database"
        )
    value = conn.execute(select(meta.c.value).where(meta.c.key == SCHEMA_VERSION_KEY)).scalar()
    if value is None or not str(value).isdigit():
        raise StateError(f"the database's schema version is unreadable ({value!r})")
    return int(value)


def migrate(conn: Connection, target: int = SCHEMA_VERSION) -> tuple[int, int]:
    """Bring the database to `target` inside the caller's transaction; (from, to)."""
    found = schema_version(conn)
    if found > SCHEMA_VERSION:
        migrate_refusal(found)
    for step in MIGRATIONS:
        if found < step.version <= target:
            step.apply(conn)
            _set_version(conn, step.version)
    return found, max(found, min(target, SCHEMA_VERSION))


def migrate_refusal(found: int) -> NoReturn:
    """A database newer than this code: refused, never read as if it were older."""
    raise StateError(
        f"the database is at schema version {found}, newer than this bridge knows "
        f"({SCHEMA_VERSION}): it was written by a newer a2a-acp-bridge; run that version, "
        "or restore a backup made before the upgrade"
    )


def _set_version(conn: Connection, version: int) -> None:
    updated = conn.execute(
        meta.update().where(meta.c.key == SCHEMA_VERSION_KEY).values(value=str(version))
    )
    if updated.rowcount == 0:
        conn.execute(meta.insert().values(key=SCHEMA_VERSION_KEY, value=str(version)))
