<?php
/*
 * A real PHP lock client for lockscope's tests: one lock object per process, from the libraries
 * Debian ships (php-illuminate-cache 8.83 — Laravel's cache locks — and php-symfony-lock 5.4),
 * loaded through Debian's autoloaders (include_path /usr/share/php).
 *
 * Usage: php lockclient.php '<JSON config>'
 *
 *   {"kind": "laravel-redis", "host": "127.0.0.1", "port": 6379, "prefix": "laravel_database_",
 *    "cache_prefix": "laravel_cache", "name": "invoice-42", "seconds": 30}
 *       Illuminate\Cache\PhpRedisLock (phpredis): SET <prefix><cache_prefix>:<name> owner EX NX
 *   {"kind": "laravel-db", "driver": "pgsql" | "mysql", "host": ..., "port": ..., "database": ...,
 *    "username": ..., "password": ..., "table": "cache_locks", "cache_prefix": "laravel_cache",
 *    "name": "invoice-42", "seconds": 30, "create": true}
 *       Illuminate\Cache\DatabaseLock; with "create", the table is made by Laravel's own schema
 *       builder as its cache migration does (key string primary, owner string, expiration integer)
 *   {"kind": "symfony-redis", "host": ..., "port": ..., "resource": "report:daily", "ttl": 30,
 *    "read": false}
 *       Symfony\Component\Lock\Store\RedisStore (a sorted set of tokens scored by expiry)
 *   {"kind": "symfony-pdo", "dsn": "pgsql:host=...;port=...;dbname=...", "username": ...,
 *    "password": ..., "resource": "report:daily", "ttl": 30}
 *       Symfony\Component\Lock\Store\PdoStore (table lock_keys, created on first use)
 *
 * Prints `READY {}` once connected, then answers one command per line on stdin, one line each:
 *
 *   try        one non-blocking attempt: ACQUIRED {"owner": ...} or BUSY
 *   refresh    extends the hold by the lock's ttl: REFRESHED, or LOST {"message"} when the
 *              library finds the lock is no longer its own (it was force-released)
 *   release    RELEASED, or LOST {"message"} when the library refuses
 *   exit (EOF) BYE, without releasing (a crash is SIGKILL from the controlling side)
 *
 * Failures print `ERROR {"op": ..., "message": ...}` and the client keeps going.
 */

require_once 'Illuminate/Cache/autoload.php';
require_once 'Illuminate/Redis/autoload.php';
require_once 'Illuminate/Database/autoload.php';
require_once 'Symfony/Component/Lock/autoload.php';

use Illuminate\Cache\DatabaseStore;
use Illuminate\Cache\RedisStore as LaravelRedisStore;
use Illuminate\Database\Capsule\Manager as Capsule;
use Illuminate\Database\Schema\Blueprint;
use Illuminate\Redis\RedisManager;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\LockFactory;
use Symfony\Component\Lock\Store\PdoStore;
use Symfony\Component\Lock\Store\RedisStore as SymfonyRedisStore;

function say(string $word, ?array $detail = null): void
{
    echo $detail === null ? $word : $word . ' ' . json_encode($detail), "\n";
    fflush(STDOUT);
}

$config = json_decode($argv[1] ?? '{}', true);
$kind = $config['kind'] ?? '';

// Each kind: a lock object, how to try, refresh, release it, and its owner token.
switch ($kind) {
    case 'laravel-redis':
        $redis = new RedisManager(null, 'phpredis', [
            'options' => ['prefix' => $config['prefix'] ?? ''],
            'default' => ['host' => $config['host'], 'port' => $config['port'], 'database' => 0],
        ]);
        $store = new LaravelRedisStore($redis, $config['cache_prefix'] ?? 'laravel_cache', 'default');
        $store->setLockConnection('default');
        $lock = $store->lock($config['name'], $config['seconds'] ?? 0);
        $try = fn () => $lock->get();
        // Laravel's locks have no refresh: "refresh" asks the library whether the lock is still
        // its own (its protected isOwnedByCurrentProcess, which reads the owner back).
        $refresh = fn () => (fn () => $this->isOwnedByCurrentProcess())->call($lock);
        $release = fn () => $lock->release();
        $owner = fn () => $lock->owner();
        break;
    case 'laravel-db':
        $capsule = new Capsule();
        $driver = $config['driver'];
        $connection = [
            'driver' => $driver, 'host' => $config['host'], 'port' => $config['port'],
            'database' => $config['database'], 'username' => $config['username'],
            'password' => $config['password'] ?? '', 'prefix' => '',
            'charset' => $driver === 'pgsql' ? 'utf8' : 'utf8mb4',
        ];
        if ($driver === 'pgsql') {
            $connection['schema'] = 'public';
        } else {
            $connection['collation'] = 'utf8mb4_unicode_ci';
        }
        $capsule->addConnection($connection);
        $conn = $capsule->getConnection();
        $table = $config['table'] ?? 'cache_locks';
        if (!empty($config['create']) && !$conn->getSchemaBuilder()->hasTable($table)) {
            // Laravel 8's cache migration (Console/stubs/cache.stub), lock table part.
            $conn->getSchemaBuilder()->create($table, function (Blueprint $t) {
                $t->string('key')->primary();
                $t->string('owner');
                $t->integer('expiration');
            });
        }
        $store = new DatabaseStore($conn, 'cache', $config['cache_prefix'] ?? 'laravel_cache', $table);
        $lock = $store->lock($config['name'], $config['seconds'] ?? 0);
        $try = fn () => $lock->get();
        $refresh = fn () => (fn () => $this->isOwnedByCurrentProcess())->call($lock);
        $release = fn () => $lock->release();
        $owner = fn () => $lock->owner();
        break;
    case 'symfony-redis':
        $redis = new \Redis();
        $redis->connect($config['host'], $config['port']);
        $factory = new LockFactory(new SymfonyRedisStore($redis));
        $lock = $factory->createLock($config['resource'], $config['ttl'] ?? 300.0, false);
        $read = !empty($config['read']);
        $try = fn () => $read ? $lock->acquireRead(false) : $lock->acquire(false);
        $refresh = function () use ($lock) {
            $lock->refresh();
            return true;
        };
        $release = function () use ($lock) {
            $lock->release();
            return true;
        };
        $owner = fn () => null;
        break;
    case 'symfony-pdo':
        $pdo = new \PDO($config['dsn'], $config['username'], $config['password'] ?? '', [
            \PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION,
        ]);
        $factory = new LockFactory(new PdoStore($pdo, ['db_table' => $config['table'] ?? 'lock_keys']));
        $lock = $factory->createLock($config['resource'], $config['ttl'] ?? 300.0, false);
        $try = fn () => $lock->acquire(false);
        $refresh = function () use ($lock) {
            $lock->refresh();
            return true;
        };
        $release = function () use ($lock) {
            $lock->release();
            return true;
        };
        $owner = fn () => null;
        break;
    default:
        say('ERROR', ['op' => 'start', 'message' => "unknown kind {$kind}"]);
        exit(2);
}

say('READY', []);
while (($line = fgets(STDIN)) !== false) {
    $op = trim($line);
    try {
        switch ($op) {
            case 'try':
                if ($try()) {
                    say('ACQUIRED', ['owner' => $owner()]);
                } else {
                    say('BUSY');
                }
                break;
            case 'refresh':
                if ($refresh()) {
                    say('REFRESHED');
                } else {
                    say('LOST', ['message' => 'the lock is no longer this owner\'s']);
                }
                break;
            case 'release':
                if ($release()) {
                    say('RELEASED');
                } else {
                    say('LOST', ['message' => 'the library released nothing: not its lock any more']);
                }
                break;
            case 'exit':
                say('BYE');
                exit(0);
            case '':
                break;
            default:
                say('ERROR', ['op' => $op, 'message' => 'unknown command']);
        }
    } catch (LockConflictedException $e) {
        say('LOST', ['message' => get_class($e) . ': ' . $e->getMessage()]);
    } catch (\Throwable $e) {
        say('ERROR', ['op' => $op, 'message' => get_class($e) . ': ' . $e->getMessage()]);
    }
}
say('BYE');
