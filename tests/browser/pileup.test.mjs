// The root of a pile-up in Debian's Chromium (issue 37): two service processes deadlocked across
// ZooKeeper and PostgreSQL are one cycle on the sessions page, each box named by its process and
// joined across both sources, the banner naming each hop's source; a migration queued behind an
// idle transaction puts that transaction first in the overview's Root blockers card.
// Run by tests/tests/browser.rs. Usage: node pileup.test.mjs <base-url> <artifacts-dir>
import { join } from 'node:path';
import { accessible, check, run } from './harness.mjs';

const [base, artifacts] = process.argv.slice(2);
await run(async (browser) => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));

  await page.goto(`${base}/sessions`);
  const across = page.locator('p.banner.deadlock.across');
  await across.first().waitFor({ timeout: 60000 });
  const banner = await across.first().innerText();
  check((await across.first().getAttribute('data-sources')) === 'pg,zk', `the cycle spans both backends: ${banner}`);
  check(banner.includes('svc-a') && banner.includes('svc-b'), 'the banner names both processes');
  check(banner.includes('(pg)') && banner.includes('(zk)'), 'each hop names its source');
  check(!banner.includes('Not counted'), 'joined by exact names: counted');
  // One box per process, each joining its two sessions, both in the cycle.
  await page.waitForFunction(() => document.querySelectorAll('svg.waitfor g.wnode.cycle.joined').length === 2, null, { timeout: 15000 });
  const boxes = await page.locator('svg.waitfor g.wnode.cycle.joined').evaluateAll((gs) => gs.map((g) => ({
    name: g.querySelector('text.t1').textContent,
    sources: g.getAttribute('data-sources'),
    title: g.querySelector('title').textContent,
  })));
  check(JSON.stringify(boxes.map((b) => b.name).sort()) === JSON.stringify(['svc-a', 'svc-b']), `boxes named by process: ${JSON.stringify(boxes)}`);
  check(boxes.every((b) => b.sources.split(',').sort().join(',') === 'pg,zk'), `each box joins a PostgreSQL and a ZooKeeper session (in either order): ${JSON.stringify(boxes)}`);
  check(boxes.every((b) => /0x[0-9a-f]+/.test(b.title)), 'the ZooKeeper session id is on hover, in hex');
  check(await page.locator('svg.waitfor g.wedge.cycle').count() === 2, 'both waits of the cycle are drawn in red');
  // Labels of arrows never overlap.
  const overlaps = await page.evaluate(() => {
    const boxes = [...document.querySelectorAll('svg.waitfor g.wedge text')].map((t) => t.getBBox());
    let n = 0;
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i], b = boxes[j];
      if (a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height) n++;
    }
    return n;
  });
  check(overlaps === 0, `no two arrow labels overlap (${overlaps})`);
  await page.screenshot({ path: join(artifacts, 'sessions-across.png'), fullPage: true });
  await accessible(page, 'the sessions page with a cycle across backends');

  // The table's queue on its lock page: the idle holder, then the ALTER, then the SELECT, each
  // with its statement's kind, and who the waiters are blocked by.
  await page.locator('ol.roots a.locklink').first().click();
  await page.waitForURL((u) => u.pathname.startsWith('/locks/'), { timeout: 15000 });
  await page.waitForSelector('.stmt-kind', { timeout: 30000 });
  const kinds = await page.locator('span.badge.stmt-kind').evaluateAll((bs) => bs.map((b) => b.getAttribute('data-kind')));
  check(JSON.stringify(kinds) === JSON.stringify(['idle', 'ddl', 'read']), `holder idle, then DDL, then read: ${JSON.stringify(kinds)}`);
  const note = await page.locator('p.rootnote').first().innerText();
  check(note.includes('report-job') && note.includes('holding up 2'), `the waiters' root is named: ${note}`);
  await page.screenshot({ path: join(artifacts, 'lock-table-queue.png'), fullPage: true });
  await accessible(page, 'a table lock queue');

  await page.goto(`${base}/`);
  await page.waitForSelector('tr[data-lock]', { timeout: 30000 });
  const root = page.locator('li.root[data-root="report-job"]');
  await root.waitFor({ timeout: 60000 });
  const said = await root.innerText();
  check(said.includes('holding up 2'), `the idle transaction is the root blocker, holding up 2: ${said}`);
  check(await page.locator('ol.roots li.root').first().getAttribute('data-root') === 'report-job', 'the biggest impact first');
  await page.screenshot({ path: join(artifacts, 'overview-root-blockers.png'), fullPage: true });
  await accessible(page, 'the overview with root blockers');
  check(errors.length === 0, `no page errors: ${errors.join('; ')}`);
});
