// bench/honest_count_browser.py's Firefox ESR tab: joins as tests/firefox_join.mjs does (puppeteer-core over
// WebDriver BiDi), prints one JSON line {status, profile}, stays on the page STAY_S seconds answering roll calls,
// then prints {claims: the page's claims line} and closes.
// node firefox_stay.mjs RELAY_URL FIREFOX_PATH STAY_S; NODE_PATH points at puppeteer-core.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const puppeteer = require(require.resolve("puppeteer-core", { paths: [process.env.NODE_PATH] }));
const [url, executablePath, staySeconds] = process.argv.slice(2);

const browser = await puppeteer.launch({ browser: "firefox", executablePath, headless: true,
  extraPrefsFirefox: { "dom.webgpu.enabled": false } });
try {
  const page = await browser.newPage();
  await page.goto(url + "/?heavy_budget_s=0.5");
  await page.waitForFunction(() => /Ready/.test(document.getElementById("status").textContent), { timeout: 60_000 });
  await page.click("#join");
  await page.waitForFunction(() => /joined|stopped|refused|unreachable|busy/.test(document.getElementById("status").textContent),
    { timeout: 150_000, polling: 500 });
  const status = await page.$eval("#status", (e) => e.textContent);
  const profile = await page.evaluate(() => window.ceProfile || null);
  console.log(JSON.stringify({ status, profile }));
  await new Promise((resolve) => setTimeout(resolve, Number(staySeconds) * 1000));
  console.log(JSON.stringify({ claims: await page.$eval("#claims", (e) => e.textContent) }));
} finally {
  await browser.close();
}
