-- The history writer's role is a lease in the store, judged by the store's clock: the writer
-- renews `expires_ms` and every history write checks, in its own transaction, that `token` is
-- still its own and the lease has not run out; a replica that takes over ends the stale
-- writer's session (`backend_pid`) and bumps `token`. Times written by replicas across the
-- store (beats, `through_ms`, lock events) are in the store's time from here on.
ALTER TABLE store_writer ADD COLUMN token BIGINT NOT NULL DEFAULT 0;
ALTER TABLE store_writer ADD COLUMN backend_pid BIGINT NOT NULL DEFAULT 0;
ALTER TABLE store_writer ADD COLUMN expires_ms BIGINT NOT NULL DEFAULT 0;
-- When the store received an audit record, by its own clock: how a record left `pending` is
-- compared with its replica's beats (a replica restarted since, or silent, will not finish it).
ALTER TABLE audit ADD COLUMN store_at_ms BIGINT;
CREATE INDEX audit_pending ON audit (id) WHERE outcome = 'pending';
