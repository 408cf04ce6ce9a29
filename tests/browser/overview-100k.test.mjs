// The overview over 100,000 locks: the first page, a filter, a sort and the next page all come
// from the server (the browser holds one page), the URL keeps them, and a change arrives live.
// Run by tests/tests/browser.rs. Usage: node overview-100k.test.mjs <base-url> <artifacts-dir> <count> <read-token>
// Prints the figures it measures (`figure:` lines); asserts behaviour only.
import { join } from 'node:path';
import { check, run } from './harness.mjs';

const [base, artifacts, countArg, readToken] = process.argv.slice(2);
const count = Number(countArg);
const pad = (i) => String(i).padStart(6, '0');
const range = (page) => page.locator('.pager .range').textContent();
// The page shown is the one asked for: the URL says `part` and the view's snapshot arrived.
const settled = (page, part) => page.waitForFunction((p) => location.search.includes(p)
  && document.querySelector('table.locks:not(.loading)'), part, { timeout: 30000 });

await run(async (browser, need) => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  // This server requires a read token: the page asks for it once per browser session.
  await page.goto(`${base}/`);
  await page.waitForSelector('.token-gate', { timeout: 15000 });
  check(true, 'the dashboard asks for the read token the server requires');
  await page.fill('.token-gate input', readToken);
  await page.click('.token-gate button');
  await page.waitForSelector('tr[data-lock]', { timeout: 60000 });
  check(await page.locator('.token-gate').count() === 0, 'with the token the dashboard loads');

  let t = Date.now();
  await page.goto(`${base}/`);
  await page.waitForFunction((n) => {
    const r = document.querySelector('.pager .range');
    return r && r.textContent === `1–50 of ${n}`;
  }, count, { timeout: 60000 });
  console.log(`figure: first page of ${count} locks rendered ${Date.now() - t} ms after navigation`);
  check((await page.locator('tr[data-lock]').count()) === 50, 'the first page shows 50 rows and counts all locks');
  check(Number(await page.locator('button.total.locks .value').textContent()) === count, 'the locks card counts every lock');
  const heap = await page.evaluate(() => performance.memory?.usedJSHeapSize ?? 0);
  console.log(`figure: JS heap with the first page of ${count} locks: ${(heap / 1048576).toFixed(1)} MiB`);
  await page.screenshot({ path: join(artifacts, 'overview-100k.png') });

  t = Date.now();
  await page.fill('input[name=q]', `bulk:${pad(77777)}`);
  await page.waitForFunction(() => document.querySelectorAll('tr[data-lock]').length === 1, null, { timeout: 30000 });
  console.log(`figure: text filter over ${count} locks applied in ${Date.now() - t} ms`);
  check((await range(page)) === '1–1 of 1', `the filter is counted by the server (${await range(page)})`);
  check(page.url().includes('q=bulk%3A077777'), `the filter is in the URL (${page.url()})`);
  await page.fill('input[name=q]', '');
  await page.waitForFunction(() => document.querySelectorAll('tr[data-lock]').length === 50, null, { timeout: 30000 });

  t = Date.now();
  await page.click('th button.sort:has-text("Lock")');
  await settled(page, 'sort=path');
  await page.waitForFunction((p) => document.querySelector('tr[data-lock] td.path a')?.title === p, `lock:bulk:${pad(0)}`, { timeout: 30000 });
  console.log(`figure: sort by path applied in ${Date.now() - t} ms`);
  check(page.url().includes('sort=path'), 'the sort is in the URL');

  t = Date.now();
  await page.click('.pager button:has-text("next")');
  await settled(page, 'from=50');
  await page.waitForFunction((p) => document.querySelector('tr[data-lock] td.path a')?.title === p, `lock:bulk:${pad(50)}`, { timeout: 30000 });
  console.log(`figure: next page shown in ${Date.now() - t} ms`);
  check((await range(page)).startsWith('51–100'), 'the pager moves to rows 51–100');
  await page.click('.pager button:has-text("next")');
  await settled(page, 'from=100');
  await page.waitForFunction((p) => document.querySelector('tr[data-lock] td.path a')?.title === p, `lock:bulk:${pad(100)}`, { timeout: 30000 });
  check((await range(page)).startsWith('101–150'), 'and on to rows 101–150');

  // A deep link keeps the filter, the sort and the page.
  const link = page.url();
  check(link.includes('cursor='), 'the page is in the URL');
  await page.goto(link);
  await page.waitForFunction((p) => document.querySelector('tr[data-lock] td.path a')?.title === p, `lock:bulk:${pad(100)}`, { timeout: 30000 });
  check((await range(page)).startsWith('101–150'), 'the deep link opens the same page');
  await page.click('.pager button:has-text("previous")');
  await page.waitForFunction(() => document.querySelector('tr[data-lock] td.path a')?.title === 'lock:bulk:000000', null, { timeout: 30000 });
  check(true, 'previous from a deep link goes back to the first page');

  // A bad link: the server's refusal is shown with the parameter, not an empty page.
  await page.goto(`${base}/?sort=path&cursor=not-a-cursor&from=50`);
  await page.waitForSelector('.banner.refused', { timeout: 30000 });
  check((await page.locator('.banner.refused').textContent()).includes('cursor'), 'a bad cursor is explained');
  await page.click('.banner.refused button');
  await page.waitForFunction(() => document.querySelector('tr[data-lock] td.path a')?.title === 'lock:bulk:000000', null, { timeout: 30000 });

  // A change among 100,000 locks arrives live.
  await page.fill('input[name=q]', 'bulk:late');
  await page.waitForFunction(() => document.querySelector('.pager') === null && document.querySelector('p.empty'), null, { timeout: 30000 });
  await need('add');
  t = Date.now();
  await page.waitForFunction(() => document.querySelectorAll('tr[data-lock]').length === 1, null, { timeout: 10000 });
  console.log(`figure: a new lock among ${count} shown ${Date.now() - t} ms after it was taken`);
  // This lockscope runs without admin: force release is explained, not offered.
  await page.click('tr[data-lock] td.path a');
  await page.waitForSelector('.holder-row button.danger');
  check(await page.locator('.holder-row button.danger').isDisabled(), 'force release is disabled while admin is off');
  check((await page.locator('.release p').textContent()).includes('force release is off'), 'the disabled button says why');
  check(errors.length === 0, `no page errors (${errors.join('; ')})`);
});
