"""The ledger's schema: its tables, opening a connection, and the columns added since version 1.

Schema (version 1). Times are epoch seconds (UTC). JSON columns hold JSON text. A ledger written
by an earlier build gains the columns added since when the runner opens it; none is ever dropped.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL                      -- JSON
);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,                     -- <variant>-<8 hex>
    variant TEXT NOT NULL,
    category TEXT NOT NULL,
    config_hash TEXT NOT NULL,               -- the 8 hex digits
    state TEXT NOT NULL,                     -- queued|running|finished|failed|stopped|aborted|refused
    run_dir TEXT NOT NULL,                   -- absolute path of runs/<id>
    planned_hours REAL NOT NULL,
    queued_at REAL,
    launched_at REAL,                        -- first launch
    ended_at REAL,                           -- last end (NULL while running)
    active_seconds REAL NOT NULL DEFAULT 0,  -- summed time of all attempts that ended
    attempts INTEGER NOT NULL DEFAULT 0,     -- launches, resumes included
    supervisor_pid INTEGER,
    supervisor_create_time REAL,             -- psutil create_time: a reused pid is never re-adopted
    pid INTEGER,                             -- the training process (group leader)
    pid_create_time REAL,
    gpu_slot TEXT,                           -- CUDA_VISIBLE_DEVICES value, or "cpu"
    returncode INTEGER,
    stop_reason TEXT,                        -- words, for stopped/aborted/refused/failed
    stop_rule TEXT,                          -- rule kind that fired (stopped)
    stop_value TEXT,                         -- the value that broke it
    stop_step INTEGER,
    cut_by_decision INTEGER NOT NULL DEFAULT 0,
    attempt_started_at REAL,                 -- when the current (or last) attempt was launched
    exit_attempt INTEGER                     -- the attempt whose exit.json has been recorded
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    t REAL NOT NULL,
    run_id TEXT,                             -- NULL for campaign-wide events
    kind TEXT NOT NULL,                      -- queued, launched, resumed, adopted, lost, checkpoint,
                                             -- verdict, stopped, aborted, refused, finished, failed,
                                             -- decision, runner_start, runner_stop, plan_frozen, ...
    data TEXT NOT NULL DEFAULT '{}'          -- JSON
);
CREATE INDEX IF NOT EXISTS events_run ON events(run_id, seq);
CREATE INDEX IF NOT EXISTS runs_state ON runs(state);
CREATE TABLE IF NOT EXISTS checkpoints (
    run_id TEXT NOT NULL,
    path TEXT NOT NULL,                      -- absolute
    step INTEGER,
    t REAL NOT NULL,                         -- when it was seen
    bytes INTEGER,
    verified INTEGER,                        -- NULL: not yet checked; 0/1
    grade TEXT,                              -- full | weights+optimizer | weights | unreadable
    holds TEXT,                              -- JSON list of parts found
    problems TEXT,                           -- JSON list of strings
    write_seconds REAL,                      -- from the sidecar, when the harness wrote it
    verify_seconds REAL,
    PRIMARY KEY (run_id, path)
);
CREATE TABLE IF NOT EXISTS metric_last (
    run_id TEXT NOT NULL,
    name TEXT NOT NULL,
    step INTEGER,
    value REAL,                              -- NaN/inf stored as REAL where SQLite allows, else NULL
    text TEXT,                               -- the value as written ('nan', 'inf', ...)
    t REAL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS run_progress (
    run_id TEXT PRIMARY KEY,
    offset INTEGER NOT NULL DEFAULT 0,       -- bytes of metrics.jsonl already read
    lines INTEGER NOT NULL DEFAULT 0,
    bad_lines INTEGER NOT NULL DEFAULT 0,
    first_t REAL, last_t REAL,
    first_step INTEGER, last_step INTEGER,
    truncated INTEGER NOT NULL DEFAULT 0,    -- summed truncated inputs
    samples INTEGER NOT NULL DEFAULT 0,      -- summed inputs
    restarts INTEGER NOT NULL DEFAULT 0,     -- times the file was truncated or replaced
    step_rate REAL,                          -- steps per second over the last ingested stretch
    matched_no_numbers INTEGER NOT NULL DEFAULT 0  -- stdout lines metrics_regex/format matched without a number
);
CREATE TABLE IF NOT EXISTS decisions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    t REAL NOT NULL,
    who TEXT NOT NULL,                       -- user@host (console|shell), or "runner"
    choice TEXT NOT NULL,                    -- continue | cut | revisit
    variants TEXT NOT NULL DEFAULT '[]',     -- JSON: the variants kept (cut)
    note TEXT,
    estimate TEXT,                           -- JSON: the re-estimate shown when deciding
    how TEXT,                                -- console | shell | wait_ended
    dropped TEXT                             -- JSON: the variants a cut took out of the queue
);
"""


def connect(
    path: str | Path, *, readonly: bool = False, timeout: float = 5.0, journal: str = "wal"
) -> sqlite3.Connection:
    """Open the ledger. Writers get WAL (or, where the file system cannot map WAL's shared memory,
    a rollback journal: `journal="delete"`) and the schema; readers never create or change it."""
    path = Path(path)
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        return conn
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    if journal not in ("wal", "delete"):
        raise ValueError(f"journal must be wal or delete, not {journal!r}")
    if journal == "delete":
        # a ledger still in WAL mode (made on another disk) is converted without ever mapping its
        # -shm file: in exclusive locking mode SQLite keeps the WAL index in its own memory
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("PRAGMA locking_mode=NORMAL")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # NORMAL takes effect: the lock goes
    else:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(SCHEMA)
    _add_missing_columns(conn)
    conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    return conn


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """A ledger written by an earlier build gains the columns added since (never loses any)."""
    for table, columns in _ADDED_COLUMNS.items():
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        for name, decl in columns:
            if name not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")


_ADDED_COLUMNS = {
    "runs": [("attempt_started_at", "REAL"), ("exit_attempt", "INTEGER")],
    "run_progress": [
        ("restarts", "INTEGER NOT NULL DEFAULT 0"),
        ("step_rate", "REAL"),
        ("matched_no_numbers", "INTEGER NOT NULL DEFAULT 0"),
    ],
    "decisions": [("how", "TEXT"), ("dropped", "TEXT")],
}

RUN_COLUMNS = (
    "id",
    "variant",
    "category",
    "config_hash",
    "state",
    "run_dir",
    "planned_hours",
    "queued_at",
    "launched_at",
    "ended_at",
    "active_seconds",
    "attempts",
    "supervisor_pid",
    "supervisor_create_time",
    "pid",
    "pid_create_time",
    "gpu_slot",
    "returncode",
    "stop_reason",
    "stop_rule",
    "stop_value",
    "stop_step",
    "cut_by_decision",
    "attempt_started_at",
    "exit_attempt",
)
