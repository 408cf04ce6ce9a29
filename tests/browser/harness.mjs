// Shared by the browser test scripts: Debian's Chromium with the flags this closed network
// needs, the line protocol with tests/tests/browser.rs (`NEED <action>` → `GO`), and checks.
import { chromium } from 'playwright-core';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';

/// Headless Chromium; playwright gives each launch a fresh, temporary profile.
export function launch() {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/// `need(action)` asks the Rust side to change the world and resolves on its `GO`.
export function protocol() {
  const input = createInterface({ input: process.stdin });
  const lines = [];
  let waiting = null;
  input.on('line', (line) => {
    if (waiting) { const w = waiting; waiting = null; w(line); } else { lines.push(line); }
  });
  const need = (action) => {
    console.log(`NEED ${action}`);
    return lines.length ? Promise.resolve(lines.shift()) : new Promise((r) => { waiting = r; });
  };
  return { need, close: () => input.close() };
}

export function check(condition, message) {
  if (!condition) throw new Error(`assertion failed: ${message}`);
  console.log(`ok - ${message}`);
}

/// Runs `body(browser)`, prints `FAIL …` on an error, closes everything, exits 0 or 1.
export async function run(body) {
  const browser = await launch();
  const { need, close } = protocol();
  let failed = false;
  try {
    await body(browser, need);
  } catch (e) {
    failed = true;
    console.log(`FAIL ${e.stack || e}`);
  } finally {
    await browser.close();
    close();
  }
  process.exit(failed ? 1 : 0);
}

// axe-core (npm, pinned in package.json): WCAG 2.1 A/AA checks run inside the page.
// Evaluated through the DevTools protocol, not added as an inline <script>: the page's
// Content-Security-Policy (rightly) refuses inline scripts it does not know by hash.
// Read on first use: scripts that check no accessibility do not load it.
let axeSource = null;

/** axe-core finds no serious or critical WCAG 2.1 A/AA violation on `page` (`label` names it). */
export async function accessible(page, label) {
  axeSource ??= readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
  await page.evaluate(axeSource);
  const result = await page.evaluate(() => window.axe.run(document, {
    runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] },
  }));
  const serious = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  const said = serious.map((v) => `${v.id} (${v.nodes.length}): ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`);
  check(serious.length === 0, `axe-core finds no serious WCAG 2.1 AA violation on ${label}${said.length ? ': ' + said.join('; ') : ''}`);
}
