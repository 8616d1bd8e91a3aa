/**
 * The inspector: one page, served by the agent server at `/`, to watch and
 * steer its sessions in a browser. Nothing to build or install: the page, its
 * script and its styles are this module's strings.
 *
 * - The sessions, newest first, with their status, agent, turns and cost; a
 *   box to start one.
 * - One session as a timeline of turns, live: the model's text and reasoning
 *   as they stream, each tool call with its arguments, status, duration and
 *   result, approvals (with Approve and Deny buttons), steering and
 *   follow-ups as they are delivered, guards, a resume after a restart, the
 *   outcome; the budget figures (turns, tokens, cost, time) and the
 *   checkpoints saved (counted, not a row each) as they change. A call's
 *   duration is its own run time; a wait for a human's approval is shown
 *   apart. A sub-agent's run (its `Nested` events) in a collapsible
 *   box inside the card of the call that runs it, shown the same way (its
 *   own calls, approvals and sub-agents too). A supervised run's stages:
 *   the baseline checks, each plan iteration (the plan, the notes of a
 *   revision, the decision) and each act turn with its checks (name, role,
 *   status, duration, summary, details) and the feedback sent. An event kind
 *   it does not know is shown with its fields.
 * - The calls waiting for approval in a bar above the timeline, with Approve
 *   and Deny after each call's arguments: the arguments as they are, every
 *   character that draws nothing or blank (whitespace other than a single
 *   space, `White_Space`, `Default_Ignorable_Code_Point`, control, format,
 *   private use, unassigned, U+2800) shown as a mark (`⟨4000 spaces⟩`,
 *   `⟨1900 × U+2800⟩`); past 2,000 characters, cut with a plain mark saying
 *   so. The buttons come below all the bar shows of the call (the bar
 *   scrolls past half the window), never beside a part of it out of sight.
 * - A box to steer the run, follow up a finished one, or cancel it (Cancel
 *   is disabled once the run has ended).
 * - It follows the session's SSE stream and, when the connection drops (or
 *   the server restarts), reconnects with `Last-Event-ID`: nothing shown
 *   twice, nothing missed.
 * - A trajectory file (`trajectory.ndjson`, `--emit-jsonl` output) dropped
 *   on the page, or chosen, is shown the same way, without a server.
 *
 * The agent's text is put in the page as text, never as HTML, and the page
 * runs only its own script (a Content-Security-Policy with the script's hash).
 *
 * The page itself holds no data and is served without the token; it reads
 * the token from its URL's fragment (`/#token=…`, the URL `effect-agent
 * serve` prints, or `AgentServer.inspectorUrl`), keeps it for its tab and
 * sends it as `Authorization: Bearer` with every request.
 *
 * @since 0.1.0
 */
import * as NodeCrypto from "node:crypto"
import { script } from "./internal/inspectorScript.ts"

const styles = `
:root { color-scheme: light dark; --bg: #f7f7f8; --panel: #fff; --line: #e2e2e6; --muted: #6b6b76; --text: #1d1d22;
  --accent: #3b5bdb; --ok: #2b8a3e; --bad: #c92a2a; --warn: #e67700; --code: #f1f1f4; }
@media (prefers-color-scheme: dark) { :root { --bg: #151518; --panel: #1d1d22; --line: #2e2e35; --muted: #9a9aa6;
  --text: #e8e8ee; --accent: #7c95ff; --ok: #69db7c; --bad: #ff8787; --warn: #ffc078; --code: #26262d; } }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; background: var(--bg);
  color: var(--text);
  display: grid; grid-template-columns: 300px 1fr; grid-template-rows: auto 1fr; height: 100vh; }
body.dropping { outline: 3px dashed var(--accent); outline-offset: -6px; }
header { grid-column: 1 / 3; display: flex; gap: 12px; align-items: center; padding: 8px 14px;
  border-bottom: 1px solid var(--line);
  background: var(--panel); }
header h1 { font-size: 15px; margin: 0; }
header .spacer { flex: 1; }
#connection { color: var(--muted); font-size: 12px; }
aside { border-right: 1px solid var(--line); overflow: auto; background: var(--panel); }
aside form { padding: 10px; border-bottom: 1px solid var(--line); display: grid; gap: 6px; }
textarea, input[type=text] { width: 100%; font: inherit; padding: 6px; border: 1px solid var(--line);
  border-radius: 6px;
  background: var(--bg); color: var(--text); }
button { font: inherit; white-space: nowrap; padding: 4px 10px; border-radius: 6px;
  border: 1px solid var(--line); background: var(--bg);
  color: var(--text); cursor: pointer; }
button:hover { border-color: var(--accent); }
button:disabled { opacity: 0.45; cursor: default; border-color: var(--line); }
button.approve { border-color: var(--ok); color: var(--ok); }
button.deny, #cancel-button { border-color: var(--bad); color: var(--bad); }
#cancel-button:disabled { border-color: var(--line); color: var(--muted); }
ul#sessions { list-style: none; margin: 0; padding: 0; }
li.session { padding: 8px 10px; border-bottom: 1px solid var(--line); cursor: pointer; display: grid; gap: 2px;
  grid-template-columns: auto 1fr; }
li.session.selected { background: var(--code); }
li.session .title { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
li.session .figures { grid-column: 1 / 3; color: var(--muted); font-size: 12px; }
li.empty { padding: 10px; color: var(--muted); }
.badge { font-size: 11px; padding: 1px 6px; border-radius: 9px; margin-right: 6px; background: var(--code);
  color: var(--muted); }
.badge.running { color: var(--accent); } .badge.waiting { color: var(--warn); } .badge.finished { color: var(--ok); }
.badge.failed { color: var(--bad); }
main { display: grid; grid-template-rows: auto auto 1fr auto; overflow: hidden; }
#head { padding: 10px 16px; border-bottom: 1px solid var(--line); display: flex; gap: 12px;
  align-items: baseline; flex-wrap: wrap; }
#session-title { font-size: 16px; margin: 0; }
#session-agent { font-family: ui-monospace, monospace; color: var(--muted); } #session-agent:empty { display: none; }
#figures { display: flex; gap: 14px; color: var(--muted); font-size: 12px; }
#figures b { color: var(--text); font-weight: 600; }
#pending:not(:empty) { padding: 8px 16px; background: color-mix(in srgb, var(--warn) 15%, var(--panel));
  border-bottom: 1px solid var(--line); max-height: 50vh; overflow: auto; }
.pending-item { display: flex; flex-wrap: wrap; gap: 4px 10px; align-items: baseline; margin: 4px 0 10px; }
.pending-item code.arguments { flex: 1 1 100%; min-width: 0; white-space: pre-wrap; overflow-wrap: anywhere;
  font: 12px/1.4 ui-monospace, monospace; }
.mark { padding: 0 3px; border-radius: 3px; font-size: 11px;
  background: color-mix(in srgb, var(--warn) 35%, var(--panel)); }
.pending-item .cut { color: var(--bad); font-weight: 600; }
#timeline { overflow: auto; padding: 12px 16px 40px; }
section.turn { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; margin: 10px 0;
  padding: 8px 12px; }
section.turn.live { border-color: var(--accent); }
section.turn.interrupted { opacity: 0.6; border-style: dashed; }
section.turn h3 { margin: 0 0 6px; font-size: 12px; color: var(--muted); font-weight: 600; text-transform: uppercase; }
.assistant-text { white-space: pre-wrap; }
.reasoning { color: var(--muted); font-style: italic; margin-bottom: 4px; }
.reasoning-text { white-space: pre-wrap; }
.bubble { margin: 8px 0; padding: 6px 10px; border-radius: 8px; background: var(--code); }
.bubble .label, .row .label { font-size: 11px; color: var(--muted); margin-right: 8px; text-transform: uppercase; }
.bubble .text { white-space: pre-wrap; }
.bubble.steer, .bubble.follow-up { border-left: 3px solid var(--accent); }
.row { margin: 6px 0; }
.row.quiet { color: var(--muted); font-size: 12px; }
.row.notice { color: var(--warn); } .row.error { color: var(--bad); }
.row.resumed, .row.run-start { border-top: 1px dashed var(--line); padding-top: 6px; color: var(--muted); }
.row.outcome { font-weight: 600; padding: 8px 10px; border-radius: 8px; background: var(--code); }
.row.outcome.ok { color: var(--ok); } .row.outcome.bad { color: var(--bad); }
.call { border: 1px solid var(--line); border-radius: 6px; margin: 8px 0; padding: 6px 8px; }
.call.running { border-left: 3px solid var(--accent); } .call.waiting { border-left: 3px solid var(--warn); }
.call.done { border-left: 3px solid var(--ok); } .call.failed { border-left: 3px solid var(--bad); }
.call-head { display: flex; gap: 10px; align-items: baseline; }
.call-name { font-family: ui-monospace, monospace; font-weight: 600; }
.call-status, .call-duration, .call-wait { font-size: 12px; color: var(--muted); }
.call-wait { color: var(--warn); } .call-wait:empty { display: none; }
pre { margin: 4px 0 0; padding: 6px; background: var(--code); border-radius: 4px; overflow: auto; max-height: 240px;
  font: 12px/1.4 ui-monospace, monospace; white-space: pre-wrap; word-break: break-word; }
.call-approval { margin-top: 6px; display: flex; gap: 8px; align-items: center; }
.label.ok { color: var(--ok); } .label.bad { color: var(--bad); }
.decide { display: inline-flex; gap: 6px; }
.hidden { display: none !important; }
#controls { border-top: 1px solid var(--line); padding: 8px 16px; display: flex; gap: 8px; background: var(--panel); }
#controls textarea { height: 38px; resize: vertical; }
.toast { position: fixed; right: 16px; bottom: 70px; background: var(--panel); border: 1px solid var(--line);
  padding: 8px 12px;
  border-radius: 8px; box-shadow: 0 2px 10px rgba(0,0,0,.15); }
.toast.bad { border-color: var(--bad); color: var(--bad); }
details.json summary { cursor: pointer; color: var(--muted); font-size: 12px; }
details.sub-agent { border: 1px dashed var(--line); border-left: 3px solid var(--accent); border-radius: 6px;
  margin: 6px 0; padding: 4px 8px; background: var(--bg); }
details.sub-agent.done { border-left-color: var(--ok); } details.sub-agent.failed { border-left-color: var(--bad); }
details.sub-agent > summary { cursor: pointer; }
details.sub-agent > summary > span { margin-right: 8px; }
.sub-body section.turn { margin: 6px 0; padding: 6px 8px; }
section.stage { background: var(--panel); border: 1px solid var(--line); border-left: 3px solid var(--accent);
  border-radius: 8px; margin: 12px 0; padding: 8px 12px; }
section.stage.plan { border-left-color: var(--warn); } section.stage.baseline { border-left-color: var(--muted); }
section.stage > h3 { margin: 0 0 6px; font-size: 12px; color: var(--muted); font-weight: 600; text-transform: uppercase;
  display: flex; gap: 10px; align-items: baseline; }
.checks { margin: 8px 0; padding: 6px 8px; border-radius: 6px; background: var(--code); }
.check { margin: 4px 0; }
.check-head { display: flex; gap: 10px; align-items: baseline; }
.check-status { font-size: 11px; padding: 1px 6px; border-radius: 9px; min-width: 52px; text-align: center;
  background: var(--panel); }
.check.pass .check-status { color: var(--ok); } .check.fail .check-status { color: var(--bad); }
.check.known .check-status { color: var(--warn); } .check.running .check-status { color: var(--accent); }
.check-role { font-size: 11px; color: var(--muted); } .check-summary { color: var(--muted); }
.plan { border: 1px solid var(--line); border-radius: 6px; padding: 6px 8px; margin: 8px 0; }
.plan-head { display: flex; gap: 8px; align-items: baseline; }
.plan-text, .plan-notes .text { white-space: pre-wrap; }
.plan-notes { margin-top: 6px; padding-top: 4px; border-top: 1px dashed var(--line); }
.badge.approved { color: var(--ok); } .badge.revised { color: var(--warn); } .badge.rejected { color: var(--bad); }
.badge.proposed { color: var(--accent); }
.bubble.worker, .bubble.reply { border-left: 3px solid var(--muted); }
.row.feedback { padding: 4px 8px; border-left: 3px solid var(--warn); }
label.file { color: var(--accent); cursor: pointer; font-size: 13px; }
label.file input { display: none; }
`

const body = `
<header>
  <h1>effect-agent inspector</h1>
  <span id="connection"></span>
  <span class="spacer"></span>
  <label class="file" title="Or drop a trajectory file on the page">Open a trajectory file…
    <input id="file" type="file" accept=".ndjson,.jsonl,.json,application/x-ndjson"></label>
  <label><input id="autoscroll" type="checkbox" checked> follow</label>
</header>
<aside>
  <form id="start">
    <textarea id="task" rows="3" placeholder="A task for a new session"></textarea>
    <button type="submit" id="start-button">Start a session</button>
  </form>
  <ul id="sessions"></ul>
</aside>
<main>
  <div id="head"><h2 id="session-title">Choose a session, start one, or drop a trajectory file here</h2>
    <span id="session-agent" title="agent"></span><span id="session-status" class="badge"></span>
    <div id="figures"></div></div>
  <div id="pending"></div>
  <div id="timeline"></div>
  <div id="controls" class="controls hidden">
    <textarea id="steer-text"
      placeholder="Steer the run (delivered before its next model call), or a follow-up"></textarea>
    <button id="steer-button">Steer</button>
    <button id="follow-up-button">Follow up</button>
    <button id="cancel-button">Cancel</button>
  </div>
</main>
<div id="toast" class="toast hidden"></div>
`

/**
 * The page: HTML with its script and styles inline.
 *
 * @category assets
 * @since 0.1.0
 */
export const html: string = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>effect-agent inspector</title>
<link rel="icon" href="data:,">
<style>${styles}</style>
</head>
<body>${body}<script>${script}</script>
</body>
</html>
`

const hash = (text: string) => `'sha256-${NodeCrypto.createHash("sha256").update(text).digest("base64")}'`

/**
 * The headers the page is served with: a Content-Security-Policy that lets
 * it run its own script and styles and talk to its own origin, nothing else;
 * no framing; no caching of a page that may hold a session's data.
 *
 * @category assets
 * @since 0.1.0
 */
export const headers: Readonly<Record<string, string>> = {
  "content-security-policy": [
    "default-src 'none'",
    `script-src ${hash(script)}`,
    `style-src ${hash(styles)}`,
    "connect-src 'self'",
    "img-src 'self' data:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'"
  ].join("; "),
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-store"
}
