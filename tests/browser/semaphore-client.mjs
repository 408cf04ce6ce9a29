// One real redis-semaphore (npm, pinned in package.json) lock client, through ioredis, driven
// over stdin/stdout by tests/src/support/node.rs — or, with `demo`, the demo's workload.
//
// Client mode: `node semaphore-client.mjs <redis-url> <kind> <key> [limit] [permits]
// [lockTimeout-ms]`, kind = mutex | semaphore | multi. It prints one JSON line
// `{"ready":true,"identifier":…}` once connected, then answers each command line with one JSON
// line:
//   acquire  → {"op":"acquire","ok":true} once held, or {"op":"acquire","ok":false,"error":…}
//              (redis-semaphore polls every retryInterval until acquireTimeout, 60 s here)
//   release  → {"op":"release","ok":true} (or ok:false with the error)
//   state    → {"op":"state","ok":true,"acquired":bool,"lost":n}
//   exit     → {"op":"exit","ok":true}, then the process exits
// and prints `{"event":"lost","message":…}` whenever the library reports the lock lost: the
// `onLockLost` given records instead of throwing (the default throws inside a timer, which kills
// Node).
//
// Demo mode: `node semaphore-client.mjs demo <redis-url> <key> <clients> <rounds>`: that many
// Semaphore clients of limit 2 each take the permit, hold it a little and give it back, `rounds`
// times, then exit; the process also stops when its stdin closes (the demo went away).
import { createRequire } from 'node:module';
import readline from 'node:readline';

const require = createRequire(import.meta.url);
const { Mutex, Semaphore, MultiSemaphore } = require('redis-semaphore');
const Redis = require('ioredis');

const say = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
const args = process.argv.slice(2);

function connect(url) {
  // No retries behind the library's back: a lost server is an error the test sees.
  return new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: false });
}

async function demo([url, key, clients, rounds]) {
  const redis = connect(url);
  let stopping = false;
  process.stdin.on('close', () => { stopping = true; });
  process.stdin.resume();
  const pause = (ms) => new Promise((r) => setTimeout(r, ms));
  const worker = async (n) => {
    for (let round = 0; round < Number(rounds) && !stopping; round++) {
      const sem = new Semaphore(redis, key, 2, {
        lockTimeout: 5000, acquireTimeout: 30000, retryInterval: 50, onLockLost: () => {},
      });
      try {
        await sem.acquire();
        await pause(300 + ((n * 137 + round * 71) % 700));
        await sem.release();
      } catch (e) {
        // A force release from the dashboard, or the demo stopping the server: go on.
      }
      await pause(100 + ((n * 53 + round * 29) % 400));
    }
  };
  await Promise.all(Array.from({ length: Number(clients) }, (_, n) => worker(n)));
  redis.disconnect();
  process.exit(0);
}

async function client([url, kind, key, limit, permits, lockTimeout]) {
  const redis = connect(url);
  let lost = 0;
  const options = {
    lockTimeout: Number(lockTimeout || 10000),
    acquireTimeout: 60000,
    retryInterval: 20,
    onLockLost: (err) => { lost += 1; say({ event: 'lost', message: String(err && err.message) }); },
  };
  const lock = kind === 'mutex' ? new Mutex(redis, key, options)
    : kind === 'semaphore' ? new Semaphore(redis, key, Number(limit), options)
      : new MultiSemaphore(redis, key, Number(limit), Number(permits), options);
  await redis.ping();
  say({ ready: true, identifier: lock.identifier });
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    const op = line.trim();
    if (op === 'acquire') {
      // Answered when it completes; other commands may come meanwhile.
      lock.acquire().then(() => say({ op, ok: true }), (e) => say({ op, ok: false, error: String(e.message) }));
    } else if (op === 'release') {
      try { await lock.release(); say({ op, ok: true }); } catch (e) { say({ op, ok: false, error: String(e.message) }); }
    } else if (op === 'state') {
      say({ op, ok: true, acquired: lock.isAcquired, lost });
    } else if (op === 'exit') {
      say({ op, ok: true });
      break;
    } else if (op) {
      say({ op, ok: false, error: `unknown command ${op}` });
    }
  }
  lock.stopRefresh();
  redis.disconnect();
  process.exit(0);
}

(args[0] === 'demo' ? demo(args.slice(1)) : client(args)).catch((e) => {
  say({ ready: false, error: String(e && e.message) });
  process.exit(1);
});
