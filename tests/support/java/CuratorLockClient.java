// A real Apache Curator lock client for lockscope's tests, workload and demo.
// One process = one CuratorFramework = one ZooKeeper session.
// Usage: CuratorLockClient <connect> <sessionTimeoutMs> <recipe> <path> [maxLeases]
//   recipe: mutex | semaphore-mutex | semaphore | read | write | multi (path = comma-separated)
// Prints "session 0x<id>" once connected, then reads commands from stdin, one per line:
//   acquire -> "acquiring", then "acquired" once held;  release -> "released";  quit/EOF -> exit 0.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
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
    private static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: CuratorLockClient <connect> <sessionTimeoutMs> <recipe> <path> [maxLeases]");
            System.exit(2);
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
            say("error not connected");
            System.exit(1);
        }
        say("session 0x" + Long.toHexString(client.getZookeeperClient().getZooKeeper().getSessionId()));

        InterProcessLock lock = null;
        InterProcessSemaphoreV2 semaphore = null;
        switch (recipe) {
            case "mutex": lock = new InterProcessMutex(client, path); break;
            case "semaphore-mutex": lock = new InterProcessSemaphoreMutex(client, path); break;
            case "semaphore": semaphore = new InterProcessSemaphoreV2(client, path, Integer.parseInt(args[4])); break;
            case "read": lock = new InterProcessReadWriteLock(client, path).readLock(); break;
            case "write": lock = new InterProcessReadWriteLock(client, path).writeLock(); break;
            case "multi": {
                List<InterProcessLock> locks = new ArrayList<>();
                for (String p : path.split(",")) {
                    locks.add(new InterProcessMutex(client, p));
                }
                lock = new InterProcessMultiLock(locks);
                break;
            }
            default:
                say("error unknown recipe " + recipe);
                System.exit(2);
        }

        Lease lease = null;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            try {
                if (line.equals("acquire")) {
                    say("acquiring");
                    if (semaphore != null) {
                        lease = semaphore.acquire();
                    } else {
                        lock.acquire();
                    }
                    say("acquired");
                } else if (line.equals("release")) {
                    if (semaphore != null) {
                        if (lease != null) {
                            semaphore.returnLease(lease);
                            lease = null;
                        }
                    } else {
                        lock.release();
                    }
                    say("released");
                } else if (line.equals("quit")) {
                    break;
                } else if (!line.isEmpty()) {
                    say("error unknown command " + line);
                }
            } catch (Exception e) {
                say("error " + e);
            }
        }
        client.close();
        System.exit(0);
    }
}
