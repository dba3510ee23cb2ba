"""Numbered schema migrations, recorded in ``rs_schema``.

Each migration is applied once, in order, inside one transaction. A ledger
whose highest recorded version is above :data:`SCHEMA_VERSION` was written by
a newer retrysafe: it is refused, never "repaired".
"""

from __future__ import annotations

from .backend import Backend

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "WORDS", "statements"]

_V1 = """
CREATE TABLE rs_outcomes (
    key TEXT PRIMARY KEY,
    job TEXT NOT NULL,
    params TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    fence BIGINT NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    budget_base INTEGER NOT NULL DEFAULT 0,
    current_attempt TEXT,
    accepted_attempt TEXT,
    created_at {float} NOT NULL,
    updated_at {float} NOT NULL
);
CREATE INDEX rs_outcomes_job ON rs_outcomes (job, state);
CREATE TABLE rs_attempts (
    id TEXT PRIMARY KEY,
    outcome_key TEXT NOT NULL REFERENCES rs_outcomes (key),
    number INTEGER NOT NULL,
    fence BIGINT NOT NULL,
    state TEXT NOT NULL,
    result TEXT NOT NULL DEFAULT '',
    holder_host TEXT NOT NULL,
    holder_pid INTEGER,
    holder_started TEXT,
    lease_expires {float} NOT NULL,
    context TEXT NOT NULL DEFAULT '{{}}',
    started_at {float} NOT NULL,
    ended_at {float},
    UNIQUE (outcome_key, number)
);
CREATE TABLE rs_steps (
    step_key TEXT PRIMARY KEY,
    outcome_key TEXT NOT NULL REFERENCES rs_outcomes (key),
    name TEXT NOT NULL,
    item TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL,
    effect_class TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    attempt_id TEXT,
    fence BIGINT NOT NULL DEFAULT 0,
    evidence TEXT,
    artifact TEXT,
    checksum TEXT,
    check_cmd TEXT,
    connector TEXT,
    fingerprint TEXT,
    reason TEXT NOT NULL DEFAULT '',
    approved_by TEXT,
    runner_host TEXT,
    runner_pid INTEGER,
    runner_started TEXT,
    tries INTEGER NOT NULL DEFAULT 0,
    created_at {float} NOT NULL,
    updated_at {float} NOT NULL
);
CREATE INDEX rs_steps_outcome ON rs_steps (outcome_key);
CREATE TABLE rs_events (
    id {serial},
    outcome_key TEXT NOT NULL,
    step_key TEXT NOT NULL DEFAULT '',
    at {float} NOT NULL,
    attempt_id TEXT,
    fence BIGINT NOT NULL DEFAULT 0,
    actor TEXT NOT NULL,
    kind TEXT NOT NULL,
    from_state TEXT NOT NULL DEFAULT '',
    to_state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX rs_events_outcome ON rs_events (outcome_key, id)
"""

_V2 = """
ALTER TABLE rs_steps ADD COLUMN previous_state TEXT
"""

# SQLite has no writable WITH, so it cannot write a step and its history row in
# one statement as PostgreSQL does (ledger/moves.py); these triggers write the
# history row of every step move instead, in the move's own statement. They
# fire only for moves made on behalf of an attempt: a step created with an
# attempt, or an update that sets previous_state (which only a move does).
# Human decisions and lease breaks write their history rows themselves.
_STEP_EVENT = """
INSERT INTO rs_events (outcome_key, step_key, at, attempt_id, fence, actor, kind, from_state,
                       to_state, reason)
VALUES (NEW.outcome_key, NEW.step_key, NEW.updated_at, NEW.attempt_id, NEW.fence,
        COALESCE((SELECT 'attempt-' || number FROM rs_attempts WHERE id = NEW.attempt_id),
                 'retrysafe'),
        'step', {frm}, NEW.state, NEW.reason);
"""
_V3_SQLITE = [
    "CREATE TRIGGER rs_steps_created AFTER INSERT ON rs_steps"
    " WHEN NEW.attempt_id IS NOT NULL BEGIN" + _STEP_EVENT.format(frm="''") + "END",
    "CREATE TRIGGER rs_steps_moved AFTER UPDATE OF previous_state ON rs_steps BEGIN"
    + _STEP_EVENT.format(frm="NEW.previous_state") + "END",
]

# Why a step or outcome is blocked, as a type the code decides by (states.BlockCause);
# the reason stays English for people. Existing blocked rows get the cause their
# reason text was written for; a blocked outcome takes the cause of its blocked step.
_V4 = """
ALTER TABLE rs_steps ADD COLUMN cause TEXT NOT NULL DEFAULT '';
ALTER TABLE rs_outcomes ADD COLUMN cause TEXT NOT NULL DEFAULT '';
UPDATE rs_steps SET cause = CASE
    WHEN reason LIKE 'awaiting approval%' THEN 'approval'
    WHEN reason LIKE 'lookup is ambiguous%' THEN 'ambiguous'
    WHEN reason LIKE 'the lookup found nothing, but it cannot prove%' THEN 'not_provable'
    WHEN reason LIKE '%and there is no lookup to tell%' THEN 'no_lookup'
    WHEN reason LIKE '%is never retried blindly after an unclear result%' THEN 'never_blind'
    WHEN reason LIKE '%is not retried automatically%' THEN 'not_retried'
    ELSE 'agent' END
WHERE state = 'blocked';
UPDATE rs_outcomes SET cause = CASE
    WHEN reason LIKE 'attempts exhausted%' THEN 'exhausted'
    ELSE COALESCE((SELECT MIN(s.cause) FROM rs_steps s
                   WHERE s.outcome_key = rs_outcomes.key AND s.state = 'blocked'), 'agent') END
WHERE state = 'blocked'
"""

# Step keys that name their outcome unambiguously (keys.step_key): an outcome key
# containing "/" is now followed by "//". Keys of outcomes without "/" keep their
# value, so providers find what was recorded under them. Steps of "/" outcomes are
# re-keyed; one that may have an effect in flight under its old key (running or
# unknown) cannot be settled by a lookup under the new key, so it is blocked for a
# human with both keys in its reason. A step is one (outcome, name, item).
_V5_REASON = ("the key of this step changed in the upgrade to unambiguous step keys (it was ' || "
              "step_key || '): check whether its effect exists under that old key, then "
              "resolve it")
_V5 = f"""
UPDATE rs_events SET step_key = outcome_key || '/' || substr(step_key, length(outcome_key) + 1)
WHERE step_key <> '' AND outcome_key LIKE '%/%';
INSERT INTO rs_events (outcome_key, step_key, at, attempt_id, fence, actor, kind, from_state,
                       to_state, reason)
SELECT outcome_key, outcome_key || '/' || substr(step_key, length(outcome_key) + 1), updated_at,
       attempt_id, fence, 'retrysafe', 'step', state, 'blocked', '{_V5_REASON}'
FROM rs_steps WHERE outcome_key LIKE '%/%' AND state IN ('running', 'unknown');
UPDATE rs_steps SET state = 'blocked', cause = 'not_provable', reason = '{_V5_REASON}'
WHERE outcome_key LIKE '%/%' AND state IN ('running', 'unknown');
UPDATE rs_steps SET step_key = outcome_key || '/' || substr(step_key, length(outcome_key) + 1)
WHERE outcome_key LIKE '%/%';
CREATE UNIQUE INDEX rs_steps_identity ON rs_steps (outcome_key, name, item)
"""

# Indexes that serve the listing orders, newest first, with or without a filter on
# job or state (ls, needs-attention, the dashboard's pages), so a page of a ledger
# with a million outcomes reads a page of index entries, never the whole table.
# Each ends in the key: the tie-break of the order and of a page's cursor.
_V6 = """
CREATE INDEX rs_outcomes_updated ON rs_outcomes (updated_at, key);
CREATE INDEX rs_outcomes_job_updated ON rs_outcomes (job, updated_at, key);
CREATE INDEX rs_outcomes_state_updated ON rs_outcomes (state, updated_at, key)
"""

# Notifications are effects of their own: one row per (transition, channel), so two
# processes that notify the same transition send it once (the unique key), a send
# that fails stays pending for a later try, and the message (``body``) is what the
# transition said, whenever it is sent. ``event_id`` is the rs_events row of the
# outcome's transition (0 for a missed occurrence, which has none).
_V7 = """
CREATE TABLE rs_notifications (
    id {serial},
    outcome_key TEXT NOT NULL,
    job TEXT NOT NULL,
    event_id BIGINT NOT NULL DEFAULT 0,
    event TEXT NOT NULL,
    channel TEXT NOT NULL,
    state TEXT NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0,
    last_error TEXT NOT NULL DEFAULT '',
    body TEXT NOT NULL,
    claimed_until {float},
    created_at {float} NOT NULL,
    updated_at {float} NOT NULL,
    sent_at {float},
    UNIQUE (outcome_key, event_id, event, channel)
);
CREATE INDEX rs_notifications_state ON rs_notifications (state, job, id)
"""

# (8) Facts about the ledger itself: its identity, which the home records in
# runs/.ledger-id so that a deleted, emptied or replaced ledger is noticed.
_V8 = """
CREATE TABLE rs_meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
)
"""

# (9) rs_steps_identity (outcome_key, name, item) serves every lookup by outcome that
# rs_steps_outcome (outcome_key) served: one index fewer to write per new step, and
# about 25 bytes less per step.
_V9 = """
DROP INDEX rs_steps_outcome
"""

# (10) Drill trials (keys holding keys.DRILL_MARK, "~") in an index of their own, so the
# metrics can leave them out of the counts without reading every key. Only trials are
# in it: no other outcome writes to it.
_V10 = """
CREATE INDEX rs_outcomes_drills ON rs_outcomes (job, state) WHERE key LIKE '%~%'
"""

# (11) A compact history. The outcomes get an integer id (in SQLite the rowid they
# always had, now named, so it survives VACUUM: the table is rebuilt, with foreign
# keys off as SQLite requires, see SqliteBackend.migration_lock). History rows move to
# ``rs_history`` and name their outcome by that id, their attempt by its number, their
# step by what its key adds to the outcome's key (``/send``), and their actor only
# when it is not the attempt itself (empty); about a third of the ledger's bytes per
# outcome. ``rs_events`` becomes a view with the old columns, which every reader
# keeps reading; the writers write ``rs_history``. The ids are kept, and so is the
# next id to draw (notifications and the metrics name history rows by id).


def _statements(script: str) -> list[str]:
    return list(Backend.iter_split(script))


_OUTCOMES_V11 = """
CREATE TABLE rs_outcomes_v11 (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    job TEXT NOT NULL,
    params TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    fence BIGINT NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    budget_base INTEGER NOT NULL DEFAULT 0,
    current_attempt TEXT,
    accepted_attempt TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    cause TEXT NOT NULL DEFAULT ''
)"""
_OUTCOME_COLS_V11 = ("key, job, params, state, reason, fence, attempts, budget_base,"
                     " current_attempt, accepted_attempt, created_at, updated_at, cause")
_HISTORY_V11 = """
CREATE TABLE rs_history (
    id {serial},
    outcome BIGINT NOT NULL,
    step TEXT NOT NULL DEFAULT '',
    at {float} NOT NULL,
    attempt INTEGER,
    fence BIGINT NOT NULL DEFAULT 0,
    actor TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL,
    from_state TEXT NOT NULL DEFAULT '',
    to_state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
INSERT INTO rs_history (id, outcome, step, at, attempt, fence, actor, kind, from_state, to_state,
                        reason)
SELECT e.id, o.id, CASE WHEN e.step_key = '' THEN '' ELSE substr(e.step_key, length(o.key) + 1) END,
       e.at, a.number, e.fence,
       CASE WHEN a.number IS NOT NULL AND e.actor = 'attempt-' || a.number THEN '' ELSE e.actor END,
       e.kind, e.from_state, e.to_state, e.reason
FROM rs_events e JOIN rs_outcomes o ON o.key = e.outcome_key
LEFT JOIN rs_attempts a ON a.id = e.attempt_id;
CREATE INDEX rs_history_outcome ON rs_history (outcome, id)
"""
# the old columns, as every reader knows them; a join the query does not use is left
# out by both databases (the attempt's, by its unique (outcome_key, number))
_EVENTS_VIEW = """
CREATE VIEW rs_events AS
SELECT h.id AS id, o.key AS outcome_key,
       CASE WHEN h.step = '' THEN '' ELSE o.key || h.step END AS step_key,
       h.at AS at, a.id AS attempt_id, h.fence AS fence,
       CASE WHEN h.actor = '' AND h.attempt IS NOT NULL THEN 'attempt-' || h.attempt
            ELSE h.actor END AS actor,
       h.kind AS kind, h.from_state AS from_state, h.to_state AS to_state, h.reason AS reason
FROM rs_history h JOIN rs_outcomes o ON o.id = h.outcome
LEFT JOIN rs_attempts a ON a.outcome_key = o.key AND a.number = h.attempt
"""
# SQLite's step triggers (migration 3), writing rs_history
_STEP_HISTORY = """
INSERT INTO rs_history (outcome, step, at, attempt, fence, actor, kind, from_state, to_state,
                        reason)
VALUES ((SELECT id FROM rs_outcomes WHERE key = NEW.outcome_key),
        substr(NEW.step_key, length(NEW.outcome_key) + 1), NEW.updated_at,
        (SELECT number FROM rs_attempts WHERE id = NEW.attempt_id), NEW.fence,
        COALESCE((SELECT '' FROM rs_attempts WHERE id = NEW.attempt_id), 'retrysafe'),
        'step', {frm}, NEW.state, NEW.reason);
"""
_V11_SQLITE = [
    "DROP TRIGGER rs_steps_created",
    "DROP TRIGGER rs_steps_moved",
    # SQLite's way (its "other kinds of table schema changes"): a new table, the rows
    # copied, the old one dropped, the new one renamed to the old name, which the
    # references of attempts and steps name
    _OUTCOMES_V11,
    f"INSERT INTO rs_outcomes_v11 (id, {_OUTCOME_COLS_V11})"
    f" SELECT rowid, {_OUTCOME_COLS_V11} FROM rs_outcomes",
    "DROP TABLE rs_outcomes",
    "ALTER TABLE rs_outcomes_v11 RENAME TO rs_outcomes",
    "CREATE INDEX rs_outcomes_job ON rs_outcomes (job, state)",
    "CREATE INDEX rs_outcomes_updated ON rs_outcomes (updated_at, key)",
    "CREATE INDEX rs_outcomes_job_updated ON rs_outcomes (job, updated_at, key)",
    "CREATE INDEX rs_outcomes_state_updated ON rs_outcomes (state, updated_at, key)",
    "CREATE INDEX rs_outcomes_drills ON rs_outcomes (job, state) WHERE key LIKE '%~%'",
    *_statements(_HISTORY_V11.format(serial="INTEGER PRIMARY KEY AUTOINCREMENT", float="REAL")),
    # the next id drawn continues rs_events' sequence, not the highest id kept
    "DELETE FROM sqlite_sequence WHERE name = 'rs_history'",
    "INSERT INTO sqlite_sequence (name, seq) SELECT 'rs_history', seq FROM sqlite_sequence"
    " WHERE name = 'rs_events'",
    "DROP TABLE rs_events",
    _EVENTS_VIEW,
    "CREATE TRIGGER rs_steps_created AFTER INSERT ON rs_steps"
    " WHEN NEW.attempt_id IS NOT NULL BEGIN" + _STEP_HISTORY.format(frm="''") + "END",
    "CREATE TRIGGER rs_steps_moved AFTER UPDATE OF previous_state ON rs_steps BEGIN"
    + _STEP_HISTORY.format(frm="NEW.previous_state") + "END",
]
_V11_POSTGRES = [
    "ALTER TABLE rs_outcomes ADD COLUMN id BIGSERIAL",
    "CREATE UNIQUE INDEX rs_outcomes_id ON rs_outcomes (id)",
    *_statements(_HISTORY_V11.format(serial="BIGSERIAL PRIMARY KEY", float="DOUBLE PRECISION")),
    "SELECT setval(pg_get_serial_sequence('rs_history', 'id'),"
    " GREATEST((SELECT last_value FROM rs_events_id_seq), 1),"
    " (SELECT is_called FROM rs_events_id_seq))",
    "DROP TABLE rs_events",
    _EVENTS_VIEW,
]

# (12) History rows store their kind and states as the codes of ``rs_words`` (a word is
# 4 to 10 bytes, a code 0 or 1), and the reasons an attempt writes in every outcome as
# NULL: "attempt N started: <holder>" of its start (read back from its row) and "attempt
# N started it" of each step's first move (moves.STARTED_IT); about 170 bytes per
# outcome with one effect. ``rs_events`` reads them back as they were. The words are the
# kinds and states this version writes; any other word an older ledger holds (an
# import of an edited file), or a writer of a later version writes, gets a code from
# 1000 on (moves.add_words), so that words added by a later migration can have small
# codes.
WORDS = ("", "outcome", "step", "attempt", "approval", "forget", "answer", "planned",
         "running", "generated", "delivered", "done", "failed", "unknown", "blocked", "settled",
         "active", "finished", "superseded", "forgotten", "busy")
"""The words of migration 12, each coded by its place (``''`` is 0)."""
_WORDS_V12 = """
CREATE TABLE rs_words (
    code INTEGER PRIMARY KEY,
    word TEXT NOT NULL UNIQUE
);
INSERT INTO rs_words (code, word) VALUES """ + ", ".join(
    f"({i}, '{w}')" for i, w in enumerate(WORDS)) + """;
INSERT INTO rs_words (code, word)
SELECT 999 + ROW_NUMBER() OVER (ORDER BY w), w FROM (
    SELECT kind AS w FROM rs_history UNION SELECT from_state FROM rs_history
    UNION SELECT to_state FROM rs_history) x
WHERE w NOT IN (SELECT word FROM rs_words);
DROP VIEW rs_events
"""
_HISTORY_V12 = """
CREATE TABLE rs_history_v12 (
    id {serial},
    outcome BIGINT NOT NULL,
    step TEXT NOT NULL DEFAULT '',
    at {float} NOT NULL,
    attempt INTEGER,
    fence BIGINT NOT NULL DEFAULT 0,
    actor TEXT NOT NULL DEFAULT '',
    kind INTEGER NOT NULL{kind},
    from_state INTEGER NOT NULL DEFAULT 0{from_state},
    to_state INTEGER NOT NULL{to_state},
    reason TEXT
);
INSERT INTO rs_history_v12 (id, outcome, step, at, attempt, fence, actor, kind, from_state,
                            to_state, reason)
SELECT h.id, h.outcome, h.step, h.at, h.attempt, h.fence, h.actor, k.code, f.code, t.code,
       CASE WHEN h.step = '' AND k.word = 'attempt' AND t.word = 'active' AND f.word = ''
                 AND h.actor = '' AND h.reason = 'attempt ' || h.attempt || ' started: ' ||
                     CASE WHEN a.holder_pid IS NULL
                          THEN 'an agent on ' || a.holder_host || ' (no process)'
                          ELSE 'pid ' || a.holder_pid || ' on ' || a.holder_host END THEN NULL
            WHEN h.step <> '' AND k.word = 'step' AND h.actor = ''
                 AND h.reason = 'attempt ' || h.attempt || ' started it' THEN NULL
            ELSE h.reason END
FROM rs_history h JOIN rs_words k ON k.word = h.kind JOIN rs_words f ON f.word = h.from_state
JOIN rs_words t ON t.word = h.to_state
LEFT JOIN rs_outcomes o ON o.id = h.outcome
LEFT JOIN rs_attempts a ON a.outcome_key = o.key AND a.number = h.attempt
"""
# the old columns again; a NULL reason is the usual one of the row (see above)
_EVENTS_VIEW_V12 = """
CREATE VIEW rs_events AS
SELECT h.id AS id, o.key AS outcome_key,
       CASE WHEN h.step = '' THEN '' ELSE o.key || h.step END AS step_key,
       h.at AS at, a.id AS attempt_id, h.fence AS fence,
       CASE WHEN h.actor = '' AND h.attempt IS NOT NULL THEN 'attempt-' || h.attempt
            ELSE h.actor END AS actor,
       k.word AS kind, f.word AS from_state, t.word AS to_state,
       COALESCE(h.reason, CASE WHEN h.step <> '' THEN 'attempt ' || h.attempt || ' started it'
                               WHEN a.holder_pid IS NULL THEN 'attempt ' || h.attempt
                                    || ' started: an agent on ' || a.holder_host || ' (no process)'
                               ELSE 'attempt ' || h.attempt || ' started: pid ' || a.holder_pid
                                    || ' on ' || a.holder_host END, '') AS reason
FROM rs_history h JOIN rs_outcomes o ON o.id = h.outcome
JOIN rs_words k ON k.code = h.kind JOIN rs_words f ON f.code = h.from_state
JOIN rs_words t ON t.code = h.to_state
LEFT JOIN rs_attempts a ON a.outcome_key = o.key AND a.number = h.attempt
"""
# SQLite's step triggers (migrations 3 and 11), writing codes
_STEP_HISTORY_V12 = """
INSERT INTO rs_history (outcome, step, at, attempt, fence, actor, kind, from_state, to_state,
                        reason)
SELECT (SELECT id FROM rs_outcomes WHERE key = NEW.outcome_key),
       substr(NEW.step_key, length(NEW.outcome_key) + 1), NEW.updated_at, a.number, NEW.fence,
       CASE WHEN a.number IS NULL THEN 'retrysafe' ELSE '' END,
       (SELECT code FROM rs_words WHERE word = 'step'),
       (SELECT code FROM rs_words WHERE word = {frm}),
       (SELECT code FROM rs_words WHERE word = NEW.state),
       CASE WHEN a.number IS NOT NULL AND NEW.reason = 'attempt ' || a.number || ' started it'
            THEN NULL ELSE NEW.reason END
FROM (SELECT (SELECT number FROM rs_attempts WHERE id = NEW.attempt_id) AS number) a;
"""
# the listing indexes (migration 6) end in the outcome's id instead of its key: the
# tie-break of their order and of a page's cursor; SQLite ends every index in the rowid
# (the id) anyway, so there the key is left out. About 35 bytes per outcome with short
# keys, 80 with keys of a realistic length.
_LISTING_V12 = """
DROP INDEX rs_outcomes_updated;
DROP INDEX rs_outcomes_job_updated;
DROP INDEX rs_outcomes_state_updated;
CREATE INDEX rs_outcomes_updated ON rs_outcomes (updated_at{id});
CREATE INDEX rs_outcomes_job_updated ON rs_outcomes (job, updated_at{id});
CREATE INDEX rs_outcomes_state_updated ON rs_outcomes (state, updated_at{id})
"""
_V12_SQLITE = [
    *_statements(_WORDS_V12),
    *_statements(_LISTING_V12.format(id="")),
    "DROP TRIGGER rs_steps_created",
    "DROP TRIGGER rs_steps_moved",
    # SQLite would keep a word written by an older process still running as text, which
    # the view would not find: refused, as PostgreSQL refuses it
    *_statements(_HISTORY_V12.format(serial="INTEGER PRIMARY KEY AUTOINCREMENT", float="REAL",
                                     **{c: f" CHECK (typeof({c}) = 'integer')"
                                        for c in ("kind", "from_state", "to_state")})),
    "DELETE FROM sqlite_sequence WHERE name = 'rs_history_v12'",
    "INSERT INTO sqlite_sequence (name, seq) SELECT 'rs_history_v12', seq FROM sqlite_sequence"
    " WHERE name = 'rs_history'",
    "DROP TABLE rs_history",
    "ALTER TABLE rs_history_v12 RENAME TO rs_history",
    "CREATE INDEX rs_history_outcome ON rs_history (outcome, id)",
    _EVENTS_VIEW_V12,
    "CREATE TRIGGER rs_steps_created AFTER INSERT ON rs_steps"
    " WHEN NEW.attempt_id IS NOT NULL BEGIN" + _STEP_HISTORY_V12.format(frm="''") + "END",
    "CREATE TRIGGER rs_steps_moved AFTER UPDATE OF previous_state ON rs_steps BEGIN"
    + _STEP_HISTORY_V12.format(frm="NEW.previous_state") + "END",
]
_V12_POSTGRES = [
    *_statements(_WORDS_V12),
    *_statements(_LISTING_V12.format(id=", id")),
    *_statements(_HISTORY_V12.format(serial="BIGSERIAL PRIMARY KEY", float="DOUBLE PRECISION",
                                     kind="", from_state="", to_state="")),
    "SELECT setval(pg_get_serial_sequence('rs_history_v12', 'id'),"
    " (SELECT last_value FROM rs_history_id_seq), (SELECT is_called FROM rs_history_id_seq))",
    "DROP TABLE rs_history",
    "ALTER TABLE rs_history_v12 RENAME TO rs_history",
    "CREATE INDEX rs_history_outcome ON rs_history (outcome, id)",
    _EVENTS_VIEW_V12,
]

Script = str | dict[str, list[str]]
"""A migration: one script for every backend (statements split on ``;``), or
each backend's own statements, by backend name (a backend not named has none)."""

MIGRATIONS: list[tuple[int, str, Script]] = [
    (1, "outcomes, attempts, steps and history", _V1),
    (2, "steps remember the state of their last transition (one-statement moves)", _V2),
    (3, "SQLite: step moves write their own history rows", {"sqlite": _V3_SQLITE}),
    (4, "why a step or outcome is blocked, as its own column", _V4),
    (5, "step keys name their outcome unambiguously", _V5),
    (6, "indexes for listing outcomes in order", _V6),
    (7, "notifications, one per transition and channel", _V7),
    (8, "the ledger's identity, recorded by the homes that use it", _V8),
    (9, "drop an index another one already serves", _V9),
    (10, "an index of the drill trials, to count outcomes without them", _V10),
    (11, "a compact history: outcomes by id, attempts by number", {"sqlite": _V11_SQLITE,
                                                                   "postgresql": _V11_POSTGRES}),
    (12, "history kinds and states as codes, the usual reasons as NULL, listing by id",
     {"sqlite": _V12_SQLITE, "postgresql": _V12_POSTGRES}),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]

SCHEMA_TABLE = """
CREATE TABLE IF NOT EXISTS rs_schema (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at {float} NOT NULL
)
"""


def render(backend: Backend, script: str) -> str:
    return script.format(float=backend.float_type, serial=backend.serial_pk)


def statements(backend: Backend, script: Script) -> list[str]:
    """The statements ``script`` runs on ``backend``."""
    if isinstance(script, dict):
        return list(script.get(backend.name, []))
    return list(backend.iter_split(render(backend, script)))
