// lockscope's dashboard in Debian's Chromium. Run by tests/tests/browser.rs, which starts the
// servers and the lock clients and answers this script's `NEED <action>` lines with `GO`.
// Usage: node ui.test.mjs <base-url> <artifacts-dir> <zk-root> <admin-token>
import { join } from 'node:path';
import { check, run } from './harness.mjs';

const [base, artifacts, root, adminToken] = process.argv.slice(2);

await run(async (browser, need) => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 720 }, colorScheme: 'light' });
  const page = await context.newPage();
  const errors = [];
  let outage = false;
  page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error' && !outage) errors.push(`console: ${m.text()}`); });
  page.on('requestfailed', (r) => {
    // Leaving a page (or a view: another filter, sort or page) aborts its open event stream;
    // that is not a failure.
    const aborted = r.failure()?.errorText === 'net::ERR_ABORTED' && new URL(r.url()).pathname === '/api/v1/events';
    if (!outage && !aborted) errors.push(`request failed: ${r.url()} (${r.failure()?.errorText})`);
  });

  const row = (path) => page.locator('tr[data-lock]', { has: page.locator(`a[title="${path}"]`) });
  const waitersIn = (path, n) => page.waitForFunction(([p, n]) => {
    const a = document.querySelector(`tr[data-lock] a[title="${p}"]`);
    const tr = a && a.closest('tr');
    return tr && tr.children[5].textContent.trim() === String(n);
  }, [path, n], { timeout: 10000, polling: 'raf' });

  // Overview: every lock the clients hold, live.
  await page.goto(`${base}/`);
  const paths = ['orders', 'herd', 'ledger', 'inventory'].map((n) => `${root}/${n}`);
  for (const p of [...paths, 'orders:checkout', 'lock:payments']) {
    await row(p).waitFor({ timeout: 15000 });
  }
  check(true, 'overview lists the ZooKeeper and Redis locks the clients hold');
  await waitersIn(`${root}/orders`, 2);
  check(await page.locator('.source.up:not(.history)').count() === 2, 'both sources are shown up');
  // The history store's card: this lockscope writes the history into its SQLite store.
  const history = page.locator('[data-source="history-store"]');
  await history.locator('.writer').waitFor({ timeout: 10000 });
  check((await history.textContent()).includes('history writer: replica') &&
    (await history.textContent()).includes('(this one)') &&
    (await history.getAttribute('class')).includes('up'),
    'the history card names the writer, this replica');
  check((await row(`${root}/herd`).locator('.badge.herd').count()) === 1, 'the children-watch lock is flagged herd in the list');
  check(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1),
    'no horizontal scrolling at 1280x720');
  await page.screenshot({ path: join(artifacts, 'overview-light.png') });

  // No polling: with nothing changing, the page makes no requests.
  const requests = [];
  const onRequest = (r) => requests.push(r.url());
  page.on('request', onRequest);
  await page.waitForTimeout(2500);
  page.off('request', onRequest);
  check(requests.length === 0, `no requests while idle (saw ${requests.length})`);

  // A new waiter appears without a reload.
  await need('waiter');
  const t0 = Date.now();
  await waitersIn(`${root}/orders`, 3);
  const elapsed = Date.now() - t0;
  console.log(`new waiter shown ${elapsed} ms after it was created`);
  check(elapsed < 1000, 'a new waiter appears within a second without reload');

  // Filtering and sorting.
  await page.fill('input[name=q]', 'herd');
  await page.waitForFunction(() => document.querySelectorAll('tr[data-lock]').length === 1);
  check((await row(`${root}/herd`).count()) === 1, 'text filter keeps only the matching lock');
  await page.fill('input[name=q]', '');
  await page.selectOption('select[name=backend]', 'redis');
  await page.waitForFunction(() => document.querySelectorAll('tr[data-lock]').length === 2);
  check((await row('lock:payments').count()) === 1 && (await row('orders:checkout').count()) === 1,
    'backend filter keeps only Redis locks');
  await page.selectOption('select[name=backend]', '');
  await page.click('button.total.herds');
  await page.waitForFunction(() => document.querySelectorAll('tr[data-lock]').length === 1);
  check((await row(`${root}/herd`).count()) === 1, 'the herds total filters to herd locks');
  await page.selectOption('select[name=only]', 'all');
  await page.waitForFunction(() => document.querySelectorAll('tr[data-lock]').length === 6);
  await page.click('th button.sort:has-text("Waiters")');
  await page.waitForFunction(() => location.search.includes('sort=waiters')
    && document.querySelector('table.locks:not(.loading)'), null, { timeout: 10000 });
  const firstRow = await page.locator('tr[data-lock] td.path a').first().getAttribute('title');
  check(firstRow === `${root}/orders` || firstRow === `${root}/herd`, `sorting by waiters puts a 3-waiter queue first (${firstRow})`);

  // Lock page of the herd: holder then waiters in order, child-watch arrows, herd flag.
  await row(`${root}/herd`).locator('a').click();
  await page.waitForSelector('svg.queue g[data-role="waiter"]');
  const roles = await page.$$eval('svg.queue g[data-role]', (gs) => gs.map((g) => g.dataset.role));
  check(JSON.stringify(roles) === JSON.stringify(['lock', 'holder', 'waiter', 'waiter', 'waiter']),
    `herd queue drawn as lock, holder, 3 waiters (${roles})`);
  const nodes = await page.$$eval('svg.queue g[data-role="waiter"]', (gs) => gs.map((g) => g.dataset.node));
  const seqs = nodes.map((n) => Number(n.slice(-10)));
  check(seqs.every((s, i) => i === 0 || s > seqs[i - 1]), `waiters in sequence order (${seqs})`);
  check(await page.locator('g.qnode.holder.herd').count() === 1, 'the holder is drawn as a herd');
  check((await page.locator('g.qnode.holder .badge-text').textContent()).includes('HERD'), 'the holder shows its fan-out as a herd');
  await page.waitForFunction(() => document.querySelectorAll('svg.queue path.watch.on-lock').length === 3, null, { timeout: 10000 });
  check(true, 'each herd waiter has a child-watch arrow to the lock');
  await page.screenshot({ path: join(artifacts, 'lock-herd.png'), fullPage: true });

  // Lock page of the fair queue: each waiter watches its predecessor.
  await page.goto(`${base}/`);
  await row(`${root}/orders`).locator('a').click();
  await page.waitForFunction(() => document.querySelectorAll('svg.queue g[data-role="waiter"]').length === 3);
  await page.waitForFunction(() => document.querySelectorAll('svg.queue path.watch:not(.on-lock)').length === 3, null, { timeout: 10000 });
  check(await page.locator('g.qnode.holder.herd').count() === 0, 'a predecessor-watch queue is not a herd');
  await page.waitForSelector('ol.timeline li');
  check(await page.locator('ol.timeline li.ev.queued').count() >= 1, 'the timeline lists the queued waiters');
  // Who holds and who waits, in the lock's own words (each node's data names its client).
  await page.waitForFunction(() => [...document.querySelectorAll('svg.queue text')]
    .some((t) => t.textContent.includes('orders-worker-2')), null, { timeout: 10000 });
  check((await page.locator('.holder-row span.identity').first().textContent()) === 'orders-worker-0',
    'the holder list names the holder by its identity');
  const queueText = await page.locator('svg.queue').textContent();
  check(['orders-worker-0', 'orders-worker-1', 'orders-worker-2'].every((w) => queueText.includes(w)),
    'the queue graph names the holder and each waiter by identity');
  await page.screenshot({ path: join(artifacts, 'lock-orders.png'), fullPage: true });

  // Force release of the holder, end to end: the dialog names exactly that holder, needs a
  // reason and the token, and the next waiter takes the lock.
  const holderNode = await page.$eval('svg.queue g[data-role="holder"]', (g) => g.dataset.node);
  const nextNode = await page.$eval('svg.queue g[data-role="waiter"]', (g) => g.dataset.node);
  await page.click('.holder-row button.danger');
  await page.waitForSelector('.modal');
  check((await page.locator('.modal .target-node').textContent()) === holderNode, 'the dialog names the holder shown');
  check((await page.locator('.modal').textContent()).includes('not told'), 'the dialog says the old holder is not told');
  await page.fill('.modal input[name=token]', adminToken);
  check(await page.locator('.modal button.confirm').isDisabled(), 'release needs a reason');
  await page.fill('.modal textarea[name=reason]', 'stuck in the browser test');
  // The lock changes while the dialog is open (one more waiter): the dialog and the reason stay.
  await need('waiter');
  await page.waitForFunction(() => document.querySelectorAll('svg.queue g[data-role="waiter"]').length === 4, null, { timeout: 10000 });
  check(await page.inputValue('.modal textarea[name=reason]') === 'stuck in the browser test',
    'the dialog and the typed reason survive a change of the lock');
  await page.screenshot({ path: join(artifacts, 'force-release-dialog.png') });
  await page.click('.modal button.confirm');
  await page.waitForSelector('.modal .result.ok', { timeout: 10000 });
  check(true, 'the release succeeded and the dialog says so');
  await page.click('.modal button:has-text("Close")');
  await page.waitForFunction((n) => {
    const g = document.querySelector('svg.queue g[data-role="holder"]');
    return g && g.dataset.node === n;
  }, nextNode, { timeout: 10000 });
  check(true, 'the next waiter holds the lock after the release, without a reload');
  await page.screenshot({ path: join(artifacts, 'force-release-done.png'), fullPage: true });

  // Sessions: the two sessions waiting on each other are a highlighted cycle.
  await page.click('header nav a:has-text("Sessions")');
  await page.waitForSelector('svg.waitfor');
  await page.waitForFunction(() => document.querySelectorAll('svg.waitfor g.wnode.cycle').length === 2, null, { timeout: 10000 });
  check(await page.locator('.banner.deadlock').count() === 1, 'the wait-for cycle is reported as a possible deadlock');
  check(await page.locator('svg.waitfor g.wedge.cycle').count() === 2, 'both edges of the cycle are highlighted');
  await page.screenshot({ path: join(artifacts, 'sessions.png'), fullPage: true });

  // Dark theme, and a laptop screen.
  await page.click('header nav a:has-text("Overview")');
  await row(`${root}/orders`).waitFor();
  await page.click('button.theme');
  check(await page.evaluate(() => document.documentElement.dataset.theme) === 'dark', 'the theme switches to dark');
  await page.screenshot({ path: join(artifacts, 'overview-dark.png') });
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.screenshot({ path: join(artifacts, 'overview-laptop-dark.png') });
  await row(`${root}/herd`).locator('a').click();
  await page.waitForSelector('svg.queue g[data-role="waiter"]');
  await page.screenshot({ path: join(artifacts, 'lock-herd-dark.png'), fullPage: true });
  await page.goto(`${base}/`);
  await row(`${root}/orders`).waitFor();
  check(await page.evaluate(() => document.documentElement.dataset.theme) === 'dark', 'the theme choice survives a reload');

  // A lock that is gone (its holder released it and its key went) still opens from a link:
  // nothing holds it, and its history says what happened.
  const paymentsHref = await row('lock:payments').locator('a').getAttribute('href');
  await need('vanish');
  await row('lock:payments').waitFor({ state: 'detached', timeout: 10000 });
  await page.goto(`${base}${paymentsHref}`);
  await page.waitForSelector('.banner.gone', { timeout: 10000 });
  await page.waitForSelector('ol.timeline li.ev.released', { timeout: 10000 });
  check(true, 'a gone lock opens from a link with its release in the timeline');
  check(await page.locator('.holder-row').count() === 0 && await page.locator('svg.queue g[data-role="holder"]').count() === 0,
    'a gone lock shows no holder and offers no release');
  await page.screenshot({ path: join(artifacts, 'lock-gone.png'), fullPage: true });
  await page.goto(`${base}/`);
  // The app is up and streaming before lockscope goes away (a page whose wasm is still being
  // fetched when the server stops never starts, and so never shows the banner).
  await page.waitForSelector('.link.live', { timeout: 30000 });

  // Lost connection: shown, retried, and recovered without a reload.
  outage = true;
  await need('stop');
  await page.waitForSelector('.banner.lost', { timeout: 15000 });
  check(true, 'a lost connection is shown');
  await page.screenshot({ path: join(artifacts, 'connection-lost.png') });
  await need('start');
  await page.waitForSelector('.link.live', { timeout: 30000 });
  await page.waitForSelector('.banner.lost', { state: 'detached', timeout: 5000 });
  await row(`${root}/orders`).waitFor({ timeout: 15000 });
  check(true, 'the dashboard reconnects by itself and shows the locks again');
  outage = false;

  check(errors.length === 0, `no page errors (${errors.join('; ')})`);
});
