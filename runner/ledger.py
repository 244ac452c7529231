"""The campaign's ledger: one SQLite file (WAL) that the runner alone writes.

It holds every run, launch, checkpoint, metric summary, rule verdict, stop, abort, resume and
decision, with times. Runs are never deleted. The full metric stream stays in the run's folder;
the ledger keeps what the console and the report read. Readers (report, verify, console through the
runner) open it read-only.

Schema (version 1). Times are epoch seconds (UTC). JSON columns hold JSON text.
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
    cut_by_decision INTEGER NOT NULL DEFAULT 0
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
    samples INTEGER NOT NULL DEFAULT 0       -- summed inputs
);
CREATE TABLE IF NOT EXISTS decisions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    t REAL NOT NULL,
    who TEXT NOT NULL,                       -- user@host, or "console"
    choice TEXT NOT NULL,                    -- continue | cut | revisit
    variants TEXT NOT NULL DEFAULT '[]',     -- JSON: the variants kept (cut)
    note TEXT,
    estimate TEXT                            -- JSON: the re-estimate shown when deciding
);
"""


def connect(path: str | Path, *, readonly: bool = False, timeout: float = 5.0) -> sqlite3.Connection:
    """Open the ledger. Writers get WAL and the schema; readers never create or change it."""
    path = Path(path)
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        return conn
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(SCHEMA)
    conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    return conn
