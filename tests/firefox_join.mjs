// The join journey in Firefox ESR, driven by puppeteer-core over WebDriver BiDi (no geckodriver, no browser
// download): node firefox_join.mjs RELAY_URL FIREFOX_PATH SCREENSHOT_PATH. Prints one JSON line:
// {status, seconds, profile}. NODE_PATH points at the cached puppeteer-core (tests/test_engines.py).
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const puppeteer = require(require.resolve("puppeteer-core", { paths: [process.env.NODE_PATH] }));
const [url, executablePath, screenshot] = process.argv.slice(2);

const browser = await puppeteer.launch({ browser: "firefox", executablePath, headless: true,
  extraPrefsFirefox: { "dom.webgpu.enabled": false } });
try {
  const page = await browser.newPage();
  const t0 = Date.now();
  await page.goto(url + "/");
  await page.waitForFunction(() => /Ready/.test(document.getElementById("status").textContent), { timeout: 60_000 });
  await page.click("#join");
  await page.waitForFunction(() => /joined|stopped|refused|unreachable|busy/.test(document.getElementById("status").textContent),
    { timeout: 150_000, polling: 500 });
  const seconds = (Date.now() - t0) / 1000;
  const status = await page.$eval("#status", (e) => e.textContent);
  const profile = await page.evaluate(() => window.ceProfile || null);
  await page.screenshot({ path: screenshot, fullPage: true }).catch(() => {});
  console.log(JSON.stringify({ status, seconds, profile }));
} finally {
  await browser.close();
}
