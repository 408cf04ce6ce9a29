// A real Apache Curator lock client for lockscope's tests, workload and demo.
// One process = one CuratorFramework = one ZooKeeper session.
//
// Usage: CuratorLockClient <connect> <sessionTimeoutMs> <recipe> <path> [maxLeases]
//   recipe: mutex | semaphore-mutex | semaphore <maxLeases> | read | write
//           | multi (path = comma-separated mutex paths)
// Prints "session 0x<hex id>" once connected, then reads commands from stdin, one per line:
//   acquire  -> "acquiring", then "acquired" once held
//   release  -> "released"
//   quit/EOF -> closes the client cleanly (its session and nodes go at once) and exits 0,
//               even while an acquire is still blocked.
// Failures print "error <message>" and the client keeps going. Every line is flushed at once.
//
// Curator's InterProcessMutex is re-entrant per thread and must be released by the thread that
// acquired it, so lock commands run one after another on a single worker thread while the main
// thread keeps reading stdin (that is what lets "quit" work during a blocked acquire).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMultiLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorLockClient {
    private static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static String oneLine(Throwable e) {
        String text = e.toString();
        return text.replace('\n', ' ').replace('\r', ' ');
    }

    private static void usage(String why) {
        say("error " + why);
        System.err.println("usage: CuratorLockClient <connect> <sessionTimeoutMs> <recipe> <path> [maxLeases]");
        System.exit(2);
    }

    // Only touched from the worker thread.
    private static InterProcessLock lock;
    private static InterProcessSemaphoreV2 semaphore;
    private static Lease lease;

    private static void acquire() throws Exception {
        say("acquiring");
        if (semaphore != null) {
            lease = semaphore.acquire();
        } else {
            lock.acquire();
        }
        say("acquired");
    }

    private static void release() throws Exception {
        if (semaphore != null) {
            if (lease == null) {
                throw new IllegalStateException("no lease held");
            }
            semaphore.returnLease(lease);
            lease = null;
        } else {
            lock.release();
        }
        say("released");
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            usage("expected <connect> <sessionTimeoutMs> <recipe> <path> [maxLeases]");
        }
        String connect = args[0];
        int sessionTimeout = Integer.parseInt(args[1]);
        String recipe = args[2];
        String path = args[3];

        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(sessionTimeout)
                .connectionTimeoutMs(5000)
                .retryPolicy(new ExponentialBackoffRetry(100, 10, 1000))
                .build();
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            say("error not connected to " + connect + " within 30 s");
            client.close();
            System.exit(1);
        }

        switch (recipe) {
            case "mutex":
                lock = new InterProcessMutex(client, path);
                break;
            case "semaphore-mutex":
                lock = new InterProcessSemaphoreMutex(client, path);
                break;
            case "semaphore":
                if (args.length < 5) {
                    usage("semaphore needs maxLeases");
                }
                semaphore = new InterProcessSemaphoreV2(client, path, Integer.parseInt(args[4]));
                break;
            case "read":
                lock = new InterProcessReadWriteLock(client, path).readLock();
                break;
            case "write":
                lock = new InterProcessReadWriteLock(client, path).writeLock();
                break;
            case "multi": {
                List<InterProcessLock> locks = new ArrayList<>();
                for (String p : path.split(",")) {
                    if (!p.isEmpty()) {
                        locks.add(new InterProcessMutex(client, p));
                    }
                }
                lock = new InterProcessMultiLock(locks);
                break;
            }
            default:
                usage("unknown recipe " + recipe);
        }

        say("session 0x" + Long.toHexString(client.getZookeeperClient().getZooKeeper().getSessionId()));

        ExecutorService worker = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "lock-worker");
            t.setDaemon(true);
            return t;
        });
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.equals("quit")) {
                break;
            } else if (line.equals("acquire")) {
                worker.execute(() -> {
                    try {
                        acquire();
                    } catch (Exception e) {
                        say("error " + oneLine(e));
                    }
                });
            } else if (line.equals("release")) {
                worker.execute(() -> {
                    try {
                        release();
                    } catch (Exception e) {
                        say("error " + oneLine(e));
                    }
                });
            } else if (!line.isEmpty()) {
                say("error unknown command " + line);
            }
        }
        // A clean close ends the session at once: the server deletes its ephemeral nodes.
        worker.shutdownNow();
        client.close();
        System.exit(0);
    }
}
