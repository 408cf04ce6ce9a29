// The dashboard's first rows in Chromium (issue 20): how long from navigation until the
// overview shows a lock row and its pager, cold (a fresh browser context: empty cache, no
// compiled wasm) and warm (the same context navigating again), and what the page holds then.
// Run by tests/src/bench/viewers.rs (`lockscope-bench --only viewers`).
//
// Usage: node bench-first-rows.mjs <base-url> [runs=5] [read-token]
//
// Prints one line per run, for the bench to read:
//   first_rows run=<i> cold_ms=<ms> warm_ms=<ms> js_heap_used_bytes=<n> wasm_memory_bytes=<n> range=<pager text>
//   failed run=<i> <why>
// Times are the page's own clock (`performance.now()`, from the navigation's start) at the
// first animation frame that shows the row. Memory is read once the cold load shows its rows,
// after a garbage collection: Chromium's JS heap in use (CDP `Performance.getMetrics`,
// `JSHeapUsedSize`) and the size of the UI's WebAssembly memory, where the Leptos store lives
// (a wasm memory never shrinks, so this is the most the page ever held). Exits 1 only if every
// run failed.
import { launch } from './harness.mjs';

const [base, runsArg = '5', readToken = ''] = process.argv.slice(2);
const runs = Number(runsArg);
if (!base || !(runs > 0)) {
  console.error('usage: node bench-first-rows.mjs <base-url> [runs=5] [read-token]');
  process.exit(2);
}
/// Per navigation: a load that takes longer is a failed run, not a stuck bench.
const NAVIGATION_TIMEOUT_MS = 60_000;

/// Before any page script: keep the UI's wasm memory where the bench can read it. wasm-bindgen's
/// glue instantiates through one of these two calls and keeps the instance to itself.
function keepWasmMemory() {
  const keep = (result) => {
    const instance = result instanceof WebAssembly.Instance ? result : result.instance;
    if (instance && instance.exports.memory instanceof WebAssembly.Memory) {
      window.__benchWasmMemory = instance.exports.memory;
    }
    return result;
  };
  const streaming = WebAssembly.instantiateStreaming;
  const plain = WebAssembly.instantiate;
  if (streaming) WebAssembly.instantiateStreaming = (...a) => streaming.apply(WebAssembly, a).then(keep);
  WebAssembly.instantiate = (...a) => plain.apply(WebAssembly, a).then(keep);
}

/// Navigates to the overview; ms from the navigation's start to the first frame that shows a
/// lock row and the pager's range, and that range's text. Only one row is waited for: with
/// server-side pages the total need not be every lock.
async function firstRows(page) {
  await page.goto(`${base}/`, { waitUntil: 'commit', timeout: NAVIGATION_TIMEOUT_MS });
  const shown = await page.waitForFunction(() => {
    const row = document.querySelector('table.locks tbody tr[data-lock]');
    const range = document.querySelector('.pager .range');
    if (!row || !range || !range.textContent || !row.checkVisibility()) return false;
    return { ms: performance.now(), range: range.textContent };
  }, null, { polling: 'raf', timeout: NAVIGATION_TIMEOUT_MS });
  return shown.jsonValue();
}

async function memory(page, cdp) {
  await cdp.send('HeapProfiler.collectGarbage');
  const { metrics } = await cdp.send('Performance.getMetrics');
  const js = metrics.find((m) => m.name === 'JSHeapUsedSize')?.value ?? NaN;
  const wasm = await page.evaluate(() => window.__benchWasmMemory?.buffer.byteLength ?? NaN);
  return { js, wasm };
}

const browser = await launch();
let failures = 0;
try {
  for (let run = 1; run <= runs; run++) {
    const context = await browser.newContext({ viewport: { width: 1280, height: 720 } });
    try {
      if (readToken) {
        // Where the dashboard keeps the token it asks for (frontend/src/api.rs, READ_TOKEN_KEY),
        // so the timed load does not wait on the token form.
        await context.addInitScript((t) => sessionStorage.setItem('lockscope-read-token', t), readToken);
      }
      await context.addInitScript(keepWasmMemory);
      const page = await context.newPage();
      const errors = [];
      page.on('pageerror', (e) => errors.push(e.message));
      const cdp = await context.newCDPSession(page);
      await cdp.send('Performance.enable');
      const cold = await firstRows(page);
      const held = await memory(page, cdp);
      const warm = await firstRows(page);
      if (errors.length) throw new Error(`page errors: ${errors.join('; ')}`);
      console.log(`first_rows run=${run} cold_ms=${cold.ms.toFixed(0)} warm_ms=${warm.ms.toFixed(0)} `
        + `js_heap_used_bytes=${held.js} wasm_memory_bytes=${held.wasm} range=${cold.range}`);
    } catch (e) {
      failures++;
      console.log(`failed run=${run} ${String(e.message || e).split('\n')[0]}`);
    } finally {
      await context.close();
    }
  }
} finally {
  await browser.close();
}
process.exit(failures === runs ? 1 : 0);
