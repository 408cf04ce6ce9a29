"""One application process that locks through several backends at once, for lockscope's tests
of the cross-backend wait-for graph (tests/tests/pileups.rs, driven by
tests/src/support/appproc.rs).

Usage: process.py '<JSON config>'

    {"name": "svc-a",
     "zk_hosts": "127.0.0.1:2181" or null,          kazoo, identifier = name
     "pg_url": "postgresql://..." or null,          psycopg, application_name = name
     "mysql": {"host", "port", "user", "password"} or null}   PyMySQL, program_name = name

Each backend gets its own connection, named after the process the way its library lets one
name it: kazoo's lock identifier (the lock node's data), PostgreSQL's `application_name`,
MariaDB's `program_name` connection attribute.

Once connected it prints `READY {"zk_session": "0x…", "pg_pid": …, "mysql_id": …}`, then reads
one command per line:

    zk <path>      kazoo Lock(path, identifier=name).acquire()
    pg <key>       SELECT pg_advisory_lock(<key>)
    mysql <name>   SELECT GET_LOCK('<name>', 3600)
    exit           closes every connection and exits 0

Each lock command prints `STARTED <command>`, then runs on a thread of its own; when the lock
is taken it prints `ACQUIRED <command>` (always after its `STARTED`). Failures print `ERROR <message>`.
"""

import json
import sys
import threading

_say = threading.Lock()


def say(line):
    with _say:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main():
    config = json.loads(sys.argv[1])
    name = config["name"]
    zk = pg = my = None
    ready = {}
    if config.get("zk_hosts"):
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=config["zk_hosts"], timeout=10.0)
        zk.start(timeout=30)
        ready["zk_session"] = "0x%x" % zk.client_id[0]
    if config.get("pg_url"):
        import psycopg

        pg = psycopg.connect(config["pg_url"], application_name=name, autocommit=True)
        ready["pg_pid"] = pg.info.backend_pid
    if config.get("mysql"):
        import pymysql

        m = config["mysql"]
        my = pymysql.connect(
            host=m["host"],
            port=m["port"],
            user=m["user"],
            password=m["password"],
            program_name=name,
            autocommit=True,
        )
        with my.cursor() as c:
            c.execute("SELECT CONNECTION_ID()")
            ready["mysql_id"] = c.fetchone()[0]
    say("READY " + json.dumps(ready))

    def run(command, action):
        try:
            action()
            say("ACQUIRED " + command)
        except Exception as e:  # reported, the process keeps going
            say("ERROR " + json.dumps({"command": command, "message": str(e)}))

    for line in sys.stdin:
        command = line.strip()
        if not command:
            continue
        op, _, arg = command.partition(" ")
        if op == "exit":
            break
        if op == "zk":
            lock = zk.Lock(arg, identifier=name)
            action = lambda lock=lock: lock.acquire()
        elif op == "pg":
            key = int(arg)
            action = lambda key=key: pg.execute("SELECT pg_advisory_lock(%s)", (key,))
        elif op == "mysql":

            def action(lock_name=arg):
                with my.cursor() as c:
                    c.execute("SELECT GET_LOCK(%s, 3600)", (lock_name,))

        else:
            say("ERROR " + json.dumps({"command": command, "message": "unknown command"}))
            continue
        # STARTED before the thread runs: its ACQUIRED must never come first.
        say("STARTED " + command)
        threading.Thread(target=run, args=(command, action), daemon=True).start()
    if zk is not None:
        zk.stop()
        zk.close()
    say("BYE")


if __name__ == "__main__":
    main()
