// The dashboard behind nginx at a sub-path (/lockscope/), with read access behind a basic-auth
// user: the page, its assets, its API calls and its event stream all stay under the prefix and
// authenticate with the credentials the browser was given, links and routes included.
// Run by tests/tests/browser.rs. Usage: node base-path.test.mjs <base-url> <artifacts-dir> <user> <password>
import { join } from 'node:path';
import { check, run } from './harness.mjs';

const [base, artifacts, user, password] = process.argv.slice(2);
const prefix = new URL(base).pathname.replace(/\/$/, '');

await run(async (browser, need) => {
  const context = await browser.newContext({
    viewport: { width: 1280, height: 720 },
    httpCredentials: { username: user, password },
  });
  const page = await context.newPage();
  const errors = [];
  const outside = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('request', (r) => {
    const url = new URL(r.url());
    if (url.origin === new URL(base).origin && !url.pathname.startsWith(`${prefix}/`)) outside.push(url.pathname);
  });
  const row = (path) => page.locator('tr[data-lock]', { has: page.locator(`a[title="${path}"]`) });

  await page.goto(`${base}/`);
  await row('lock:prefix').waitFor({ timeout: 60000 });
  check(true, 'the overview lists the lock under the prefix');
  await page.waitForSelector('.link.live', { timeout: 30000 });
  check(true, 'the event stream is live through the proxy');

  await need('add');
  await row('lock:late').waitFor({ timeout: 30000 });
  check(true, 'a lock taken later arrives through the event stream');

  await row('lock:prefix').locator('a').click();
  await page.waitForURL((u) => u.pathname.startsWith(`${prefix}/locks/`), { timeout: 15000 });
  await page.waitForSelector('h1[title="lock:prefix"]', { timeout: 30000 });
  check(true, `the lock page opens under the prefix (${new URL(page.url()).pathname})`);

  await page.click('header nav a:has-text("Sessions")');
  await page.waitForURL((u) => u.pathname === `${prefix}/sessions`, { timeout: 15000 });
  check(true, 'the navigation stays under the prefix');
  await page.reload();
  await page.waitForSelector('header nav', { timeout: 30000 });
  check(await page.locator('main').count() === 1, 'a deep link under the prefix loads the dashboard');
  await page.click('a.brand');
  await page.waitForURL((u) => u.pathname === `${prefix}/`, { timeout: 15000 });
  await row('lock:prefix').waitFor({ timeout: 30000 });
  check(true, 'the brand link leads back to the overview under the prefix');
  await page.screenshot({ path: join(artifacts, 'base-path.png') });

  check(outside.length === 0, `no request left the prefix (${outside.join(', ')})`);
  check(errors.length === 0, `no page errors (${errors.join('; ')})`);
  await context.close();
});
