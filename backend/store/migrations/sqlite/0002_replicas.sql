-- History that outlives lockscope and its replicas: who wrote each event and audit record, a
-- lock's history paged by id, every lock's last state, and the replica writing the history.
ALTER TABLE lock_events ADD COLUMN replica TEXT NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN replica TEXT NOT NULL DEFAULT '';
DROP INDEX IF EXISTS lock_events_by_lock;
CREATE INDEX lock_events_by_lock ON lock_events (lock_id, id);
CREATE TABLE lock_state (
    lock_id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    view TEXT NOT NULL,
    seen_ms INTEGER NOT NULL,
    gone_ms INTEGER,
    gone_unseen INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX lock_state_live ON lock_state (source, seen_ms) WHERE gone_ms IS NULL;
CREATE INDEX lock_state_gone ON lock_state (gone_ms) WHERE gone_ms IS NOT NULL;
CREATE INDEX audit_by_time ON audit (at_ms);
CREATE TABLE store_writer (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    replica TEXT NOT NULL,
    since_ms INTEGER NOT NULL,
    through_ms INTEGER NOT NULL,
    beat_ms INTEGER NOT NULL
);
