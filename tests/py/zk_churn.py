"""A churn of real kazoo Locks for lockscope's counting test (tests/tests/zk_churn.rs).

Usage: zk_churn.py '<JSON config>'

    {"hosts": "127.0.0.1:2181,...", "paths": ["/r/a", "/r/b"], "identifier": "c0",
     "iterations": 300, "offset": 0}

One KazooClient (one session) takes and releases a kazoo `Lock` `iterations` times, as fast as
the library goes, on the paths in turn starting at `offset` (one `Lock` object per path, reused).
Other processes run the same on the same paths, so acquisitions queue behind each other. Prints
`READY {"session_id": "0x.."}` once connected, then `DONE {"acquired": n, "released": m}`: the
acquisitions kazoo reported and the releases that returned, which is what lockscope must count.
The session stays open until stdin ends (so every release is one its client made while alive),
then closes. Failures print `ERROR {"message": ...}` and exit 1.
"""

import json
import sys


def main():
    cfg = json.loads(sys.argv[1])
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cfg["hosts"], timeout=10.0)
    zk.start(timeout=30)
    print("READY " + json.dumps({"session_id": "0x%x" % (zk.client_id[0] & 0xFFFFFFFFFFFFFFFF)}))
    sys.stdout.flush()
    locks = [zk.Lock(path, cfg["identifier"]) for path in cfg["paths"]]
    acquired = released = 0
    try:
        for i in range(cfg["iterations"]):
            lock = locks[(i + cfg.get("offset", 0)) % len(locks)]
            if not lock.acquire(blocking=True, timeout=60):
                raise RuntimeError("no acquisition within 60 s")
            acquired += 1
            lock.release()
            released += 1
    except Exception as exc:  # reported, the counts so far too
        print("ERROR " + json.dumps({"message": "%s: %s" % (type(exc).__name__, exc),
                                     "acquired": acquired, "released": released}))
        sys.stdout.flush()
        zk.stop()
        zk.close()
        sys.exit(1)
    print("DONE " + json.dumps({"acquired": acquired, "released": released}))
    sys.stdout.flush()
    sys.stdin.read()
    zk.stop()
    zk.close()


if __name__ == "__main__":
    main()
