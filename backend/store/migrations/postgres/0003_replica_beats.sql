-- Every replica's start and last beat: when the history writer dies, the replica running the
-- longest (which saw the most of what the writer may not have written) takes over.
CREATE TABLE replica_beats (
    replica TEXT PRIMARY KEY,
    started_ms BIGINT NOT NULL,
    beat_ms BIGINT NOT NULL
);
