/**
 * Headless Chromium for the server's browser tests: Debian's `chromium` (never
 * a downloaded build) driven by playwright-core. Without a browser the tests
 * that need one are skipped, and say so.
 */
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { type Browser, type BrowserContext, chromium } from "playwright-core"

/** The names a system Chromium goes by, looked up on `PATH`. */
const names = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]

/**
 * The browser to drive: `EFFECT_AGENT_CHROMIUM` when set (a path; set to an
 * empty string or a missing path, the tests run as on a machine without a
 * browser), else the first of {@link names} on `PATH`; why none, if none.
 */
const findBrowser = (env: NodeJS.ProcessEnv): { readonly path: string } | { readonly reason: string } => {
  const chosen = env.EFFECT_AGENT_CHROMIUM
  if (chosen !== undefined) {
    return chosen !== "" && Fs.existsSync(chosen)
      ? { path: chosen }
      : { reason: `EFFECT_AGENT_CHROMIUM=${JSON.stringify(chosen)} is not a browser` }
  }
  const dirs = (env.PATH ?? "").split(Path.delimiter).filter((dir) => dir !== "")
  for (const name of names) {
    for (const dir of dirs) {
      const path = Path.join(dir, name)
      try {
        Fs.accessSync(path, Fs.constants.X_OK)
        return { path }
      } catch {
        // not here
      }
    }
  }
  return { reason: `none of ${names.join(", ")} on PATH (apt-get install -y chromium, or set EFFECT_AGENT_CHROMIUM)` }
}

const found = findBrowser(process.env)

/** The browser's path, or `undefined` when there is none (the tests that need it are skipped). */
export const executablePath = "path" in found ? found.path : undefined

/** Why there is no browser, when there is none. */
export const missing = "reason" in found ? found.reason : undefined

/**
 * The headless Chromium of this test file, launched by the first test that asks for it and closed by
 * {@link closeBrowser} (each file's `afterAll`): one launch a file, not one a test (a launch costs more CPU
 * than most of the tests).
 */
let launched: Promise<Browser> | undefined

const launch = () =>
  launched ??= chromium.launch({
    executablePath: executablePath!,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync"
    ]
  })

/** Closes the file's Chromium, if it was launched (for `afterAll`). */
export const closeBrowser = async (): Promise<void> => {
  const browser = launched
  launched = undefined
  if (browser !== undefined) await browser.then((b) => b.close(), () => undefined)
}

/**
 * A fresh context of the file's Chromium for one test: its own cookies, storage, cache and connections, as
 * a new profile would have, never touching the network beyond the loopback.
 */
export const browser = Effect.acquireRelease(
  Effect.promise(() => launch().then((b) => b.newContext({ viewport: { width: 1180, height: 820 } }))),
  (context: BrowserContext) => Effect.promise(() => context.close())
)

/** The browser's page at `url`, with the errors it logs. */
export const openPage = (context: BrowserContext, url: string) =>
  Effect.promise(async () => {
    const page = context.pages()[0] ?? (await context.newPage())
    const errors: Array<string> = []
    page.on("pageerror", (error) => errors.push(error.message))
    page.on("console", (message) => {
      if (message.type() === "error") errors.push(message.text())
    })
    await page.goto(url)
    return { page, errors }
  })
