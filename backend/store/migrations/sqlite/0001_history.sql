-- The store as lockscope kept it before versioned migrations (IF NOT EXISTS: a store written
-- then is adopted as it is; the columns it may lack are added before the migrator runs).
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    token_name TEXT NOT NULL,
    source TEXT NOT NULL,
    lock_id TEXT NOT NULL,
    observed_holder TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL,
    detail TEXT NOT NULL,
    client TEXT NOT NULL DEFAULT '',
    finished_ms INTEGER
);
CREATE TABLE IF NOT EXISTS lock_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    lock_id TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    node TEXT NOT NULL,
    session TEXT NOT NULL,
    cause TEXT,
    duration_ms INTEGER
);
CREATE INDEX IF NOT EXISTS lock_events_by_lock ON lock_events (lock_id, at_ms);
CREATE INDEX IF NOT EXISTS lock_events_by_time ON lock_events (at_ms);
