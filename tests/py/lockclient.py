"""A real Python lock client for lockscope's tests: one client (one lock object) per process.

Usage: lockclient.py '<JSON config>'

The config names the library and the lock:

    {"kind": "kazoo-lock" | "kazoo-read-lock" | "kazoo-write-lock",
     "hosts": "127.0.0.1:2181,...", "path": "/locks/x", "identifier": "a",
     "session_timeout_ms": 10000,
     "tls": null or {"ca": "ca.crt", "cert": "client.crt", "key": "client.key"},
     "auth": [["digest", "app:secret"]], "acl": [[31, "digest", "app:secret"]]}
     (a digest ACL id is given as user:password and hashed here)
    {"kind": "kazoo-semaphore", ..., "max_leases": 2}
    {"kind": "kazoo-lease", ..., "duration_ms": 30000}   (NonBlockingLease)
    {"kind": "kazoo-multi-lease", ..., "duration_ms": 30000, "count": 2}
     (MultiNonBlockingLease; `acquire` and `try` are one attempt each: a lease never waits,
      `release` is refused: kazoo leases end by time only)
    {"kind": "redis-py-lock", "url": "redis://...", "name": "x",
     "timeout_ms": 30000 or null, "sleep_ms": 100}
    {"kind": "python-redis-lock", "url": "redis://...", "name": "x",
     "expire_s": null or 30, "auto_renewal": false}
    {"kind": "pottery-redlock", "urls": ["redis://...", ...], "key": "x", "ttl_ms": 10000}
    {"kind": "pymysql-get-lock", "host": "127.0.0.1", "port": 3306, "user": "app",
     "password": "...", "name_hex": "766f7465"}  (GET_LOCK with the name as `bytes`)

Once connected it prints `READY {json}` (kazoo: the session id; Redis: each connection's
`CLIENT ID`), then reads one command per line on stdin and answers with event lines on stdout,
each `WORD` or `WORD {json}`, flushed at once:

    acquire [timeout_ms]  WAITING right before the blocking call, then ACQUIRED {detail}
                          (or TIMEOUT when timeout_ms ran out)
    try                   one non-blocking attempt: ACQUIRED {detail} or BUSY
    release               RELEASED
    hold <ms>             keeps holding for <ms>, then releases: RELEASED
    info                  INFO {what is known now, e.g. a kazoo waiter's node}
    cancel                kazoo only: cancels a blocked acquire (CANCELLED)
    ping                  PONG (answered at once, even during a blocked acquire)
    exit (or EOF)         closes the client cleanly without releasing (a kazoo session is
                          closed, so its nodes go at once; Redis keys stay until their TTL),
                          prints BYE and exits 0, even while an acquire is blocked

Failures print `ERROR {"op": ..., "message": ...}` and the client keeps going. Lock commands
run one after another on one worker thread (redis-py keeps its token thread-local, so acquire
and release must run on the same thread), while the main thread keeps reading stdin: that is
what lets `exit`, `info` and `ping` work during a blocked acquire. A crash is SIGKILL from the
controlling side.
"""

import json
import logging
import os
import queue
import sys
import threading
import time

_say_lock = threading.Lock()


def say(word, detail=None):
    line = word if detail is None else word + " " + json.dumps(detail, sort_keys=True)
    with _say_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def error(op, exc):
    say("ERROR", {"op": op, "message": "%s: %s" % (type(exc).__name__, exc)})


class KazooDriver:
    def __init__(self, cfg):
        from kazoo.client import KazooClient

        self.kind = cfg["kind"]
        self.path = cfg["path"]
        timeout = cfg.get("session_timeout_ms") or 10000
        options = {}
        tls = cfg.get("tls")
        if tls:
            options.update(use_ssl=True, verify_certs=True, ca=tls["ca"],
                           certfile=tls["cert"], keyfile=tls["key"])
        if cfg.get("auth"):
            options["auth_data"] = [tuple(a) for a in cfg["auth"]]
        if cfg.get("acl"):
            from kazoo.security import ACL, Id, make_digest_acl_credential

            def acl_id(scheme, ident):
                # A digest id is given as user:password; ZooKeeper wants user:base64(sha1).
                if scheme == "digest":
                    ident = make_digest_acl_credential(*ident.split(":", 1))
                return Id(scheme, ident)

            options["default_acl"] = [ACL(perms, acl_id(scheme, ident)) for perms, scheme, ident in cfg["acl"]]
        self.zk = KazooClient(hosts=cfg["hosts"], timeout=timeout / 1000.0, **options)
        self.zk.start(timeout=30)
        identifier = cfg.get("identifier")
        if self.kind == "kazoo-lock":
            self.lock = self.zk.Lock(self.path, identifier)
        elif self.kind == "kazoo-read-lock":
            self.lock = self.zk.ReadLock(self.path, identifier)
        elif self.kind == "kazoo-write-lock":
            self.lock = self.zk.WriteLock(self.path, identifier)
        elif self.kind == "kazoo-semaphore":
            self.lock = self.zk.Semaphore(
                self.path, identifier, max_leases=int(cfg.get("max_leases") or 1)
            )
        else:
            raise ValueError("unknown kind " + self.kind)

    def ready(self):
        # As ZooKeeper shows it (`dump`, `cons`): unsigned hex.
        return {"session_id": "0x%x" % (self.zk.client_id[0] & 0xFFFFFFFFFFFFFFFF)}

    def detail(self):
        if self.kind == "kazoo-semaphore":
            return {"node": self.lock.create_path}
        return {"node": self.path + "/" + self.lock.node}

    def info(self):
        if self.kind == "kazoo-semaphore":
            return {"node": self.lock.create_path, "lock_path": self.lock.lock_path}
        node = self.lock.node
        return {"node": None if node is None else self.path + "/" + node}

    def acquire(self, timeout_s):
        from kazoo.exceptions import LockTimeout

        try:
            return self.lock.acquire(blocking=True, timeout=timeout_s)
        except LockTimeout:
            return False

    def try_acquire(self):
        return self.lock.acquire(blocking=False)

    def release(self):
        self.lock.release()

    def cancel(self):
        self.lock.cancel()

    def close(self):
        self.zk.stop()
        self.zk.close()


class KazooLeaseDriver(KazooDriver):
    """kazoo's NonBlockingLease / MultiNonBlockingLease (kazoo/recipe/lease.py): each attempt
    is a new lease object, obtained or not at once."""

    def __init__(self, cfg):
        # KazooDriver's connection, without its lock object.
        lock_cfg = dict(cfg, kind="kazoo-lock")
        super().__init__(lock_cfg)
        self.kind = cfg["kind"]
        self.identifier = cfg.get("identifier") or None
        self.duration_ms = int(cfg.get("duration_ms") or 30000)
        self.count = int(cfg.get("count") or 1)
        self.slot = None

    def _attempt(self):
        import datetime

        duration = datetime.timedelta(milliseconds=self.duration_ms)
        if self.kind == "kazoo-lease":
            lease = self.zk.NonBlockingLease(self.path, duration, identifier=self.identifier)
            self.slot = self.path if lease else None
        else:
            lease = self.zk.MultiNonBlockingLease(
                self.count, self.path, duration, identifier=self.identifier
            )
            self.slot = self._own_slot() if lease else None
        return bool(lease)

    def _own_slot(self):
        # The slot whose record names this holder with the latest end.
        import socket

        ident = self.identifier or socket.gethostname()
        best = None
        for num in range(self.count):
            node = "%s/%d/lease_holder" % (self.path, num)
            if not self.zk.exists(node):
                continue
            data = json.loads(self.zk.get(node)[0].decode("utf-8"))
            if data.get("holder") == ident and (best is None or data["end"] > best[1]):
                best = ("%s/%d" % (self.path, num), data["end"])
        return None if best is None else best[0]

    def detail(self):
        return {"node": None if self.slot is None else self.slot + "/lease_holder"}

    def info(self):
        return self.detail()

    def acquire(self, timeout_s):
        return self._attempt()

    def try_acquire(self):
        return self._attempt()

    def release(self):
        raise RuntimeError("kazoo leases have no release: they end by time")

    def cancel(self):
        raise RuntimeError("a kazoo lease never waits")


def client_id(conn):
    return int(conn.client_id())


class RedisPyDriver:
    def __init__(self, cfg):
        import redis

        self.conn = redis.Redis.from_url(cfg["url"])
        timeout_ms = cfg.get("timeout_ms")
        self.lock = self.conn.lock(
            cfg["name"],
            timeout=None if timeout_ms is None else timeout_ms / 1000.0,
            sleep=(cfg.get("sleep_ms") or 100) / 1000.0,
        )
        self.client_ids = [client_id(self.conn)]

    def ready(self):
        return {"client_ids": self.client_ids}

    def detail(self):
        return {"key": self.lock.name, "token": self.lock.local.token.decode()}

    def info(self):
        return {"key": self.lock.name}

    def acquire(self, timeout_s):
        return self.lock.acquire(blocking=True, blocking_timeout=timeout_s)

    def try_acquire(self):
        return self.lock.acquire(blocking=False)

    def release(self):
        self.lock.release()

    def close(self):
        self.conn.close()


class PythonRedisLockDriver:
    def __init__(self, cfg):
        import redis
        import redis_lock

        # redis-py 8 reads with a 5 s socket timeout by default, which ends python-redis-lock's
        # BLPOP (timeout 0: wait forever) with TimeoutError after 5 s; a blocking lock client
        # must turn it off, as this one does.
        self.conn = redis.StrictRedis.from_url(cfg["url"], socket_timeout=None)
        self.lock = redis_lock.Lock(
            self.conn,
            cfg["name"],
            expire=cfg.get("expire_s"),
            auto_renewal=bool(cfg.get("auto_renewal")),
        )
        self.client_ids = [client_id(self.conn)]

    def ready(self):
        return {"client_ids": self.client_ids}

    def detail(self):
        return {"key": self.lock._name, "token": self.lock.id}

    def info(self):
        return {"key": self.lock._name, "signal": self.lock._signal, "token": self.lock.id}

    def acquire(self, timeout_s):
        # python-redis-lock wants whole seconds; None blocks in BLPOP for as long as it takes.
        timeout = None if timeout_s is None else max(1, int(round(timeout_s)))
        return self.lock.acquire(blocking=True, timeout=timeout)

    def try_acquire(self):
        return self.lock.acquire(blocking=False)

    def release(self):
        self.lock.release()

    def close(self):
        self.conn.close()


class PotteryDriver:
    def __init__(self, cfg):
        import redis
        from pottery import Redlock

        self.masters = [redis.Redis.from_url(u) for u in cfg["urls"]]
        self.lock = Redlock(
            key=cfg["key"],
            masters=set(self.masters),
            auto_release_time=(cfg.get("ttl_ms") or 10000) / 1000.0,
        )
        self.client_ids = [client_id(m) for m in self.masters]

    def ready(self):
        return {"client_ids": self.client_ids}

    def detail(self):
        return {"key": self.lock.key, "token": self.lock._uuid}

    def info(self):
        return {"key": self.lock.key}

    def acquire(self, timeout_s):
        return self.lock.acquire(blocking=True, timeout=-1 if timeout_s is None else timeout_s)

    def try_acquire(self):
        return self.lock.acquire(blocking=False)

    def release(self):
        self.lock.release()

    def close(self):
        for m in self.masters:
            m.close()


class PyMySqlGetLockDriver:
    """MariaDB/MySQL `GET_LOCK(name, timeout)` through PyMySQL with the name passed as `bytes`:
    PyMySQL sends it as a `_binary` literal. `acquire` without a timeout waits a year."""

    def __init__(self, cfg):
        import pymysql

        self.conn = pymysql.connect(
            host=cfg["host"],
            port=int(cfg["port"]),
            user=cfg["user"],
            password=cfg.get("password") or "",
            autocommit=True,
        )
        self.name = bytes.fromhex(cfg["name_hex"])

    def ready(self):
        return {"connection_id": self.conn.thread_id()}

    def detail(self):
        return {"name_hex": self.name.hex(), "connection_id": self.conn.thread_id()}

    def info(self):
        return self.detail()

    def _scalar(self, sql, args):
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchone()[0]

    def acquire(self, timeout_s):
        # "Forever" as a year: how a negative timeout is read differs between servers.
        timeout = 31536000 if timeout_s is None else timeout_s
        got = self._scalar("SELECT GET_LOCK(%s, %s)", (self.name, timeout))
        if got not in (0, 1):
            raise RuntimeError("GET_LOCK answered %r" % (got,))
        return got == 1

    def try_acquire(self):
        return self._scalar("SELECT GET_LOCK(%s, 0)", (self.name,)) == 1

    def release(self):
        self._scalar("SELECT RELEASE_LOCK(%s)", (self.name,))

    def close(self):
        self.conn.close()


DRIVERS = {
    "kazoo-lock": KazooDriver,
    "kazoo-read-lock": KazooDriver,
    "kazoo-write-lock": KazooDriver,
    "kazoo-semaphore": KazooDriver,
    "kazoo-lease": KazooLeaseDriver,
    "kazoo-multi-lease": KazooLeaseDriver,
    "redis-py-lock": RedisPyDriver,
    "python-redis-lock": PythonRedisLockDriver,
    "pottery-redlock": PotteryDriver,
    "pymysql-get-lock": PyMySqlGetLockDriver,
}


def work(driver, commands):
    """The worker thread: every lock operation runs here, one after another."""
    while True:
        cmd, arg = commands.get()
        try:
            if cmd == "acquire":
                timeout_s = None if arg is None else arg / 1000.0
                say("WAITING")
                if driver.acquire(timeout_s):
                    say("ACQUIRED", driver.detail())
                else:
                    say("TIMEOUT")
            elif cmd == "try":
                if driver.try_acquire():
                    say("ACQUIRED", driver.detail())
                else:
                    say("BUSY")
            elif cmd == "release":
                driver.release()
                say("RELEASED")
            elif cmd == "hold":
                time.sleep(arg / 1000.0)
                driver.release()
                say("RELEASED")
        except Exception as exc:  # noqa: BLE001 - every failure is reported, the client goes on
            if cmd == "acquire" and type(exc).__name__ == "CancelledError":
                say("CANCELLED")
            else:
                error(cmd, exc)


def main():
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    if len(sys.argv) != 2:
        sys.stderr.write("usage: lockclient.py '<JSON config>'\n")
        sys.exit(2)
    try:
        cfg = json.loads(sys.argv[1])
        driver = DRIVERS[cfg["kind"]](cfg)
    except Exception as exc:  # noqa: BLE001
        error("start", exc)
        sys.exit(1)
    say("READY", driver.ready())

    commands = queue.Queue()
    threading.Thread(target=work, args=(driver, commands), daemon=True).start()
    for raw in sys.stdin:
        words = raw.split()
        if not words:
            continue
        cmd, rest = words[0], words[1:]
        try:
            if cmd == "exit":
                break
            elif cmd == "ping":
                say("PONG")
            elif cmd == "info":
                say("INFO", driver.info())
            elif cmd == "cancel":
                driver.cancel()
            elif cmd in ("acquire", "try", "release"):
                commands.put((cmd, int(rest[0]) if rest else None))
            elif cmd == "hold":
                commands.put((cmd, int(rest[0])))
            else:
                raise ValueError("unknown command %r" % raw.strip())
        except Exception as exc:  # noqa: BLE001
            error(cmd, exc)
    try:
        driver.close()
    except Exception as exc:  # noqa: BLE001
        error("exit", exc)
    say("BYE")
    sys.stdout.flush()
    # Do not wait for a worker still blocked in an acquire.
    os._exit(0)


if __name__ == "__main__":
    main()
