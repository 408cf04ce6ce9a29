-- MariaDB in the compose demo: the lock tables lockscope watches and its monitoring user.
-- Run once by the image's entrypoint (/docker-entrypoint-initdb.d) on an empty data directory.
-- The password is the demo's (docker-compose.yml gives it to lockscope as
-- LOCKSCOPE_MARIADB_PASSWORD); anywhere else, create the user with a secret of your own.

CREATE DATABASE IF NOT EXISTS app;
USE app;

-- A lock per row: insert to lock, delete to unlock (lockscope: a `lock_table`).
CREATE TABLE database_lock (
  id BIGINT AUTO_INCREMENT PRIMARY KEY,
  resource VARCHAR(255) UNIQUE,
  description VARCHAR(255)
);

-- ShedLock's JDBC table: a row per lock name, free once lock_until has passed
-- (lockscope: a `lock_table` with `until`). NULL: without it, a server with
-- explicit_defaults_for_timestamp off gives the first TIMESTAMP column ON UPDATE CURRENT_TIMESTAMP.
CREATE TABLE shedlock (
  name VARCHAR(64) PRIMARY KEY,
  lock_until TIMESTAMP(3) NULL,
  locked_at TIMESTAMP(3) NULL,
  locked_by VARCHAR(255)
);

-- Rows locked with SELECT ... FOR UPDATE: lockscope sees these row locks in INNODB_LOCKS while
-- someone waits on them, so it needs no privilege on this table.
CREATE TABLE locks (
  name VARCHAR(64) PRIMARY KEY
);
INSERT INTO locks (name) VALUES ('orders'), ('billing');

-- lockscope's monitoring user: what it reads, nothing more.
CREATE USER 'lockscope'@'%' IDENTIFIED BY 'lockscope-demo-password';
-- Every connection in the process list and every transaction in INNODB_TRX/INNODB_LOCKS
-- (without it, only its own). METADATA_LOCK_INFO (GET_LOCK holders) needs the plugin the
-- compose service loads (--plugin-load-add=metadata_lock_info).
GRANT PROCESS ON *.* TO 'lockscope'@'%';
-- The configured lock tables.
GRANT SELECT ON app.database_lock TO 'lockscope'@'%';
GRANT SELECT ON app.shedlock TO 'lockscope'@'%';
-- Force release only (the demo enables lockscope's admin API); leave these out for a read-only
-- lockscope. KILL CONNECTION of another user's connection (the holder of a row lock or a
-- GET_LOCK lock) needs CONNECTION ADMIN; releasing a lock-table row deletes it, a ShedLock
-- row gets its lock_until set to now.
GRANT CONNECTION ADMIN ON *.* TO 'lockscope'@'%';
GRANT DELETE ON app.database_lock TO 'lockscope'@'%';
GRANT UPDATE (lock_until) ON app.shedlock TO 'lockscope'@'%';
