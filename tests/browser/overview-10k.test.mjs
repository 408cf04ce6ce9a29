// The overview with 10,000 locks: it pages, filters and sorts, and takes changes live.
// Run by tests/tests/browser.rs. Usage: node overview-10k.test.mjs <base-url> <artifacts-dir> <count> <read-token>
// Prints the figures it measures (load, filter, sort, page, live change); asserts behaviour only.
import { join } from 'node:path';
import { check, run } from './harness.mjs';

const [base, artifacts, countArg, readToken] = process.argv.slice(2);
const count = Number(countArg);
const range = (page) => page.locator('.pager .range').textContent();

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
    return r && r.textContent.endsWith(`of ${n}`);
  }, count, { timeout: 60000 });
  console.log(`figure: first page of ${count} locks rendered ${Date.now() - t} ms after navigation`);
  check((await page.locator('tr[data-lock]').count()) === 50, 'one page shows 50 rows');
  await page.screenshot({ path: join(artifacts, 'overview-10k.png') });

  t = Date.now();
  await page.fill('input[name=q]', 'bulk:07777');
  await page.waitForFunction(() => document.querySelectorAll('tr[data-lock]').length === 1);
  console.log(`figure: text filter over ${count} locks applied in ${Date.now() - t} ms`);
  await page.fill('input[name=q]', '');
  await page.waitForFunction(() => document.querySelectorAll('tr[data-lock]').length === 50);

  t = Date.now();
  await page.click('th button.sort:has-text("Lock")');
  await page.waitForFunction(() => document.querySelector('tr[data-lock] td.path a').title === 'lock:bulk:00000');
  console.log(`figure: sort by path applied in ${Date.now() - t} ms`);

  t = Date.now();
  await page.click('.pager button:has-text("next")');
  await page.waitForFunction(() => document.querySelector('tr[data-lock] td.path a').title === 'lock:bulk:00050');
  console.log(`figure: next page shown in ${Date.now() - t} ms`);
  check((await range(page)).startsWith('51–100'), 'the pager moves to rows 51–100');

  // A change among 10,000 locks arrives live.
  await page.fill('input[name=q]', 'bulk:late');
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
