// lockscope's dashboard in Debian's Chromium. Run by tests/tests/browser.rs, which starts the
// servers and the lock clients and answers this script's `NEED <action>` lines with `GO`.
// Usage: node ui.test.mjs <base-url> <artifacts-dir> <zk-root> <admin-token>
import { join } from 'node:path';
import { accessible, check, run } from './harness.mjs';

const [base, artifacts, root, adminToken] = process.argv.slice(2);
/** The page fits the viewport's width: nothing scrolls sideways but inside its own box. */
async function fitsWidth(page) {
  return page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1);
}

await run(async (browser, need) => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 720 }, colorScheme: 'light' });
  const page = await context.newPage();
  const errors = [];
  let outage = false;
  // The unknown lock's page asks for a lock lockscope does not have: its 404 is the answer.
  let expectMissing = false;
  page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    const missing = expectMissing && m.text().includes('404');
    if (m.type() === 'error' && !outage && !missing) errors.push(`console: ${m.text()}`);
  });
  page.on('requestfailed', (r) => {
    // Leaving a page (or a view: another filter, sort or page) aborts its open event stream,
    // a navigation while the icon loads aborts the icon, and one right after a source's view
    // changed (it went down) aborts the store card's and the root blockers card's reads that
    // the change asked for; none is a failure.
    const aborted = r.failure()?.errorText === 'net::ERR_ABORTED' &&
      ['/api/v1/events', '/assets/favicon.svg', '/api/v1/store', '/api/v1/blockers'].includes(new URL(r.url()).pathname);
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
  check(await page.locator('.source.up .live-watch').count() === 2, 'watched sources say they are live (watching)');
  // The history store's card: this lockscope writes the history into its SQLite store.
  const history = page.locator('[data-source="history-store"]');
  await history.locator('.writer').waitFor({ timeout: 10000 });
  check((await history.textContent()).includes('history writer: replica') &&
    (await history.textContent()).includes('(this one)') &&
    (await history.getAttribute('class')).includes('up'),
    'the history card names the writer, this replica');
  check((await row(`${root}/herd`).locator('.badge.herd').count()) === 1, 'the children-watch lock is flagged herd in the list');

  // The path to Redis goes silent: its locks stay listed, marked as last seen, never as live.
  await need('silence');
  const seenBadge = row('lock:payments').locator('.badge.source-down');
  await seenBadge.waitFor({ timeout: 15000 });
  check(/^source down · last seen at \d\d:\d\d:\d\d$/.test((await seenBadge.textContent()).trim()),
    `a silent source's lock says when it was last seen: ${(await seenBadge.textContent()).trim()}`);
  check((await row(`${root}/orders`).locator('.badge.source-down').count()) === 0,
    'the other source\'s locks are still live');
  check(/locks as last seen at \d\d:\d\d:\d\d/.test(await page.locator('[data-source="cache"]').textContent()),
    'the silent source\'s card says its locks are as last seen');
  await row('lock:payments').locator('a.locklink').click();
  const downBanner = page.locator('.banner.source-down');
  await downBanner.waitFor({ timeout: 15000 });
  // As last seen: its holder, not a gone lock.
  await page.waitForFunction(() => /holders\s*1/.test(document.querySelector('dl.facts')?.textContent ?? ''),
    null, { timeout: 15000 });
  check(await page.locator('.banner.gone').count() === 0, 'a silent source\'s lock is not shown as gone');
  check((await downBanner.textContent()).includes('Source down — last seen at'), 'the lock page says the source is down and when it was last seen');
  await page.screenshot({ path: join(artifacts, 'lock-source-down.png') });
  await page.goBack();
  await row('lock:payments').waitFor({ timeout: 15000 });
  await need('heal');
  await page.waitForFunction(() => document.querySelectorAll('tr.source-down').length === 0, null, { timeout: 15000 });
  check(await page.locator('.source.up:not(.history)').count() === 2, 'after the heal both sources are up and no row is marked');
  check(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1),
    'no horizontal scrolling at 1280x720');
  await page.screenshot({ path: join(artifacts, 'overview-light.png') });
  await accessible(page, 'the overview (light)');

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
  // That change is the ZooKeeper source's last event: its card says how long ago it was.
  await page.waitForFunction(() => [...document.querySelectorAll('.source.up .last-change')]
    .some((e) => /^last change \d.* ago$/.test(e.textContent.trim())), null, { timeout: 10000 });
  check(true, 'a watched source card gives the age of its last lock change');

  // Keyboard shortcuts: `?` lists them, Esc closes the list, `/` goes to the filter.
  await page.mouse.move(5, 5);
  await page.keyboard.press('?');
  await page.waitForSelector('.modal.shortcuts');
  check((await page.locator('.modal.shortcuts').textContent()).includes('Go to the filter'), '? lists the shortcuts');
  await page.keyboard.press('Escape');
  await page.waitForSelector('.modal.shortcuts', { state: 'detached' });
  await page.keyboard.press('/');
  check(await page.evaluate(() => document.activeElement?.getAttribute('name') === 'q'), '/ puts the focus in the filter');
  await page.evaluate(() => document.activeElement.blur());

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
  // Stuck: this lockscope marks waits past 1 s (warning; critical only past an hour). The four
  // ZooKeeper locks with waiters are stuck, the Redis ones (no waiters, short holds) are not.
  await page.waitForFunction(() => document.querySelector('button.total.stuck .value')?.textContent === '4',
    null, { timeout: 10000 });
  await page.click('button.total.stuck');
  await page.waitForFunction(() => location.search.includes('state=stuck')
    && document.querySelectorAll('tr[data-lock]').length === 4, null, { timeout: 10000 });
  const marks = await page.$$eval('tr[data-lock]', (trs) => trs.map((tr) => [tr.dataset.stuck,
    tr.querySelector('.badge.stuck')?.textContent ?? '']));
  check(marks.every(([level, text]) => level === 'warning' && text.startsWith('⚠ waiting') && text.includes('(limit 1 s)')),
    `the stuck filter lists the waited-on locks, each marked with an icon and words (${JSON.stringify(marks)})`);
  check((await row('lock:payments').count()) === 0, 'a lock nobody waits for is not stuck');
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
  // Absolute times: each event's time of day, the timeline as text, UTC or local time.
  check(/^\d\d:\d\d:\d\d$/.test(await page.locator('ol.timeline li .abs').first().textContent()),
    'each timeline event shows its time of day');
  const bars = await page.$$eval('svg.chart rect.bar title', (ts) => ts.map((t) => t.textContent));
  check(bars.length >= 1 && bars.every((t) => /^(waited|held) .* — ended \d{4}-/.test(t))
    && /^\d\d:\d\d:\d\d$/.test(await page.locator('svg.chart text.axis-end').textContent()),
    `the waits/holds chart has a time axis and each bar's value on hover (${bars[0]})`);
  await page.click('details.as-text summary');
  const asText = await page.locator('pre.timeline-text').textContent();
  check(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC  queued/m.test(asText) && asText.includes('acquired'),
    `the timeline reads as text with UTC instants (${asText.split('\n')[0]})`);
  await page.click('button.time-zone');
  await page.waitForFunction(() => document.querySelector('pre.timeline-text').textContent.includes(' UTC+')
    || document.querySelector('pre.timeline-text').textContent.includes(' UTC-'));
  check(true, 'switched to local time, instants carry their offset');
  await page.click('button.time-zone');
  await page.click('details.as-text summary');
  const banner = await page.locator('.banner.stuck').textContent();
  check(banner.includes('Stuck (warning)') && banner.includes('A waiter has waited') && banner.includes('UTC'),
    `the lock page says what is stuck, since when (${banner})`);
  // Who holds and who waits, in the lock's own words (each node's data names its client).
  await page.waitForFunction(() => [...document.querySelectorAll('svg.queue text')]
    .some((t) => t.textContent.includes('orders-worker-2')), null, { timeout: 10000 });
  check((await page.locator('.holder-row span.identity').first().textContent()) === 'orders-worker-0',
    'the holder list names the holder by its identity');
  const queueText = await page.locator('svg.queue').textContent();
  check(['orders-worker-0', 'orders-worker-1', 'orders-worker-2'].every((w) => queueText.includes(w)),
    'the queue graph names the holder and each waiter by identity');
  await page.screenshot({ path: join(artifacts, 'lock-orders.png'), fullPage: true });
  await accessible(page, 'a lock page (light)');

  // Force release of the holder, end to end: the dialog names exactly that holder, needs a
  // reason and the token, and the next waiter takes the lock.
  const holderNode = await page.$eval('svg.queue g[data-role="holder"]', (g) => g.dataset.node);
  const nextNode = await page.$eval('svg.queue g[data-role="waiter"]', (g) => g.dataset.node);
  // Keyboard: focus goes into the dialog, Esc closes it, focus comes back to its button.
  await page.focus('.holder-row button.danger');
  await page.keyboard.press('Enter');
  await page.waitForSelector('.modal');
  await page.waitForFunction(() => document.activeElement?.getAttribute('name') === 'reason');
  check(true, 'opening the dialog puts the focus in its reason field');
  check((await page.locator('.modal .target-identity').textContent()) === 'orders-worker-0',
    'the dialog names who holds, in the lock\'s own words');
  for (let i = 0; i < 8; i++) await page.keyboard.press('Tab');
  check(await page.evaluate(() => document.querySelector('.modal').contains(document.activeElement)),
    'Tab stays inside the dialog');
  await page.keyboard.press('Escape');
  await page.waitForSelector('.modal', { state: 'detached' });
  check(await page.evaluate(() => document.activeElement?.matches('.holder-row button.danger')),
    'Esc closes the dialog and the focus returns to its button');
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
  const blocking = await page.$$eval('table.blocking tbody tr', (trs) => trs.map((tr) => tr.textContent));
  check(blocking.length >= 2 && blocking.some((t) => t.includes(`${root}/ledger`)) && blocking.some((t) => t.includes(`${root}/inventory`)),
    `the blocked → blocking table names each wait with its whole lock path (${blocking.length} rows)`);
  check(await page.locator('table.blocking tr.cycle').count() === 2, 'the blocking table marks the deadlocked pair');
  // Every box and label is drawn (an HTML element inside an SVG is in the DOM but not drawn).
  const drawn = await page.evaluate(() => [...document.querySelectorAll('svg.waitfor g.wnode, svg.waitfor g.wedge text')]
    .map((e) => e.parentElement.namespaceURI === 'http://www.w3.org/2000/svg' && e.getBBox().width > 0));
  check(drawn.length > 0 && drawn.every(Boolean), `every session box and arrow label of the wait-for graph is drawn (${drawn.filter(Boolean).length}/${drawn.length})`);
  const edgeCount = await page.locator('svg.waitfor g.wedge').count();
  check(await page.locator('svg.waitfor g.wedge a[href*="/locks/"]').count() === edgeCount,
    'every arrow of the wait-for graph links to its lock');
  // No two arrows cross (arrows leaving or entering the same box meet there): each path is
  // sampled as drawn and every pair of pieces is tested.
  const crossing = await page.evaluate(() => {
    const lines = [...document.querySelectorAll('svg.waitfor g.wedge path')].map((p) => {
      const n = 48, len = p.getTotalLength();
      return Array.from({ length: n + 1 }, (_, k) => p.getPointAtLength((len * k) / n));
    });
    const same = (a, b) => Math.abs(a.x - b.x) < 1 && Math.abs(a.y - b.y) < 1;
    const side = (p, q, r) => (q.x - p.x) * (r.y - p.y) - (q.y - p.y) * (r.x - p.x);
    const cross = (a, b, c, d) => side(c, d, a) * side(c, d, b) < 0 && side(a, b, c) * side(a, b, d) < 0;
    let count = 0;
    for (let i = 0; i < lines.length; i++) {
      for (let j = i + 1; j < lines.length; j++) {
        const [a, b] = [lines[i], lines[j]];
        if (same(a[0], b[0]) || same(a[a.length - 1], b[b.length - 1])) continue;
        let hit = false;
        for (let s = 0; s + 1 < a.length && !hit; s++) {
          for (let t = 0; t + 1 < b.length && !hit; t++) hit = cross(a[s], a[s + 1], b[t], b[t + 1]);
        }
        if (hit) count++;
      }
    }
    return count;
  });
  check(crossing === 0, `the wait-for graph's ${edgeCount} arrows do not cross (${crossing} crossing pairs)`);
  await page.screenshot({ path: join(artifacts, 'sessions.png'), fullPage: true });
  await accessible(page, 'the sessions page (light)');

  // Dark theme, and a laptop screen.
  await page.click('header nav a:has-text("Overview")');
  await row(`${root}/orders`).waitFor();
  check((await row(`${root}/orders`).locator('td.holder').textContent()).includes('orders-worker-'),
    'the overview names a holder by its identity');
  await page.click('button.theme');
  check(await page.evaluate(() => document.documentElement.dataset.theme) === 'dark', 'the theme switches to dark');
  await page.screenshot({ path: join(artifacts, 'overview-dark.png') });
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.screenshot({ path: join(artifacts, 'overview-laptop-dark.png') });
  await accessible(page, 'the overview (dark, 1440 px)');
  await row(`${root}/herd`).locator('a').click();
  await page.waitForSelector('svg.queue g[data-role="waiter"]');
  await page.screenshot({ path: join(artifacts, 'lock-herd-dark.png'), fullPage: true });
  await accessible(page, 'a lock page (dark)');
  // A phone: 390 × 844. Nothing scrolls sideways: the cards stack, the table is a list, the
  // queue graph scrolls inside its card.
  await page.setViewportSize({ width: 390, height: 844 });
  check(await fitsWidth(page), 'a lock page fits a 390 px screen');
  await page.screenshot({ path: join(artifacts, 'lock-phone-dark.png'), fullPage: true });
  await page.goto(`${base}/`);
  await row(`${root}/orders`).waitFor();
  check(await fitsWidth(page), 'the overview fits a 390 px screen');
  check(await page.evaluate(() => getComputedStyle(document.querySelector('table.locks thead')).display === 'none'),
    'at 390 px the locks table is a list');
  await page.screenshot({ path: join(artifacts, 'overview-phone-dark.png'), fullPage: true });
  await accessible(page, 'the overview (dark, 390 px)');
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.goto(`${base}/`);
  await row(`${root}/orders`).waitFor();
  check(await page.evaluate(() => document.documentElement.dataset.theme) === 'dark', 'the theme choice survives a reload');
  await page.click('header nav a:has-text("Sessions")');
  await page.waitForFunction(() => document.querySelectorAll('svg.waitfor g.wnode.cycle').length === 2, null, { timeout: 10000 });
  await accessible(page, 'the sessions page (dark)');
  await page.click('header nav a:has-text("Overview")');
  await row(`${root}/orders`).waitFor();

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
  // A lock lockscope never knew: what the link names, and the search for it.
  expectMissing = true;
  await page.goto(`${base}/locks/zk~no~such~lock`);
  await page.waitForSelector('.unknown-lock');
  check((await page.locator('.unknown-lock').textContent()).includes('/no/such/lock'),
    'an unknown lock\'s page says which lock the link names');
  await page.click('.unknown-lock button[type=submit]');
  await page.waitForFunction(() => location.pathname.endsWith('/') && location.search.includes('q=no'));
  check(true, 'the unknown lock\'s page searches the locks for it');
  expectMissing = false;
  await page.goto(`${base}/`);
  // The app is up and streaming before lockscope goes away (a page whose wasm is still being
  // fetched when the server stops never starts, and so never shows the banner).
  await page.waitForSelector('.link.live', { timeout: 30000 });

  // Lost connection: shown, retried, and recovered without a reload.
  outage = true;
  await need('stop');
  await page.waitForSelector('.banner.lost', { timeout: 15000 });
  check(true, 'a lost connection is shown');
  await page.waitForFunction(() => document.querySelector('button.total.locks .value')?.textContent === '—');
  check((await page.locator('button.total.stale').textContent()).includes('not reachable'),
    'while lockscope is unreachable the cards show no number, and say why');
  await page.screenshot({ path: join(artifacts, 'connection-lost.png') });
  await need('start');
  await page.waitForSelector('.link.live', { timeout: 30000 });
  await page.waitForSelector('.banner.lost', { state: 'detached', timeout: 5000 });
  await row(`${root}/orders`).waitFor({ timeout: 15000 });
  check(true, 'the dashboard reconnects by itself and shows the locks again');
  outage = false;

  // Pause (key p): the table holds still while a lock comes, the change is counted, and
  // resuming shows it.
  await page.mouse.move(5, 5);
  await page.keyboard.press('p');
  await page.waitForSelector('button.pause[aria-pressed="true"]');
  await need('extra');
  await page.waitForFunction(() => Number(document.querySelector('.paused-note')?.dataset.changes) >= 1,
    null, { timeout: 10000 });
  check((await row('lock:extra').count()) === 0, 'a paused table does not show the new lock');
  check((await page.locator('.paused-note').textContent()).includes('change'), 'the pause counts the changes it holds back');
  await page.click('.paused-note button:has-text("resume")');
  await row('lock:extra').waitFor({ timeout: 10000 });
  check(await page.locator('.paused-note').count() === 0, 'resuming shows the held-back change');

  // The API's page runs under its Content-Security-Policy too, and both pages carry one:
  // a violation is a console error (counted above) and a `securitypolicyviolation` event.
  const violations = () => page.evaluate(() => window.__violations || []);
  await page.addInitScript(() => {
    window.__violations = [];
    document.addEventListener('securitypolicyviolation', (e) =>
      window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  const docs = await page.goto(`${base}/api-docs`);
  const docsPolicy = docs.headers()['content-security-policy'] || '';
  check(docsPolicy.includes("frame-ancestors 'none'") && docs.headers()['x-content-type-options'] === 'nosniff',
    `the API page carries the security headers (${docsPolicy})`);
  await page.goto(`${base}/`);
  await row(paths[0]).waitFor({ timeout: 15000 });
  const home = await page.evaluate(async () => (await fetch('./')).headers.get('content-security-policy'));
  check((home || '').includes("'sha256-") && !(home || '').includes("'unsafe-eval'"),
    `the dashboard's policy allows its inline scripts by hash only (${home})`);
  check((await violations()).length === 0, `no Content-Security-Policy violation (${await violations()})`);

  check(errors.length === 0, `no page errors (${errors.join('; ')})`);
});
