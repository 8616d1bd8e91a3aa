/**
 * The inspector's script: plain DOM JavaScript, no framework, run by the
 * browser as it is (no build step). Everything the agent wrote is put in the
 * page as text (`textContent`), never as HTML.
 *
 * It lists the sessions (polling `GET /sessions`), starts one, and shows one
 * as a timeline that follows its SSE stream (read with `fetch`, so that it can
 * send `Last-Event-ID` itself and reconnect after a dropped connection or a
 * server restart, resuming after the last event it has). It approves, denies,
 * steers, follows up and cancels through `POST /sessions/:id/control`, and
 * shows a trajectory file dropped on it (or chosen) without a server.
 *
 * The server's token comes in the page's URL, in its fragment (`/#token=…`,
 * never sent to a server, and `&session=ID` to open one): the page keeps it
 * for its tab (`sessionStorage`), takes it out of the address bar, and sends
 * it with every request as `Authorization: Bearer`.
 *
 * The approval bar shows the arguments of each waiting call as they are:
 * compact JSON, whitespace other than single spaces and every character
 * that draws nothing, draws blank or changes the text's direction (by its
 * Unicode properties, and U+2800) shown as marks (`⟨4000 spaces⟩`,
 * `⟨U+202E⟩`), so that nothing is hidden above the Approve button; past
 * 2,000 characters it cuts them, and says so, pointing to the call's card.
 *
 * A view is one run's place in the page: the session's run, or a sub-agent's
 * run (its `Nested` events), shown in a collapsible box inside the card of
 * the tool call that runs it, by the same handlers. A supervised run's worker
 * turns are stages, each with its checks and, in the plan phase, its plan.
 *
 * @internal
 */
export const script = String.raw`
"use strict";
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var el = function (tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  };
  var json = function (value) {
    try { return JSON.stringify(value, null, 2); } catch (e) { return String(value); }
  };
  var partsText = function (content, type) {
    var of = (content || []).filter(function (p) { return p.type === type; });
    return of.map(function (p) { return p.text; }).join("");
  };
  var textOf = function (message) {
    if (!message) return "";
    if (typeof message.content === "string") return message.content;
    if (!Array.isArray(message.content)) return "";
    return partsText(message.content, "text");
  };
  /** A map keyed by what the agent chose (call ids, check names): no prototype to collide with. */
  var dict = function () { return Object.create(null); };
  var money = function (usd) { return usd === undefined || usd === null ? "" : "$" + Number(usd).toFixed(4); };
  var seconds = function (ms) { return (ms / 1000).toFixed(1) + " s"; };
  /** A count with its noun: "1 turn", "3 turns". */
  var counted = function (n, noun) { return n + " " + noun + (Number(n) === 1 ? "" : "s"); };

  // The server's token: from the fragment of the URL the server printed, kept for this tab.
  var tokenKey = "effect-agent-token";
  var storedToken = function () {
    try { return sessionStorage.getItem(tokenKey); } catch (e) { return null; }
  };
  /** The session to open, from the fragment (#ID, or #token=…&session=ID); a token in it is kept, and removed. */
  var fromFragment = function () {
    var fragment = location.hash.slice(1);
    if (fragment.indexOf("token=") === -1) return decodeURIComponent(fragment);
    var params = new URLSearchParams(fragment);
    var token = params.get("token");
    if (token) {
      state.token = token;
      try { sessionStorage.setItem(tokenKey, token); } catch (e) { /* kept for this page only */ }
    }
    var session = params.get("session") || "";
    history.replaceState(null, "", location.pathname + location.search + (session ? "#" + encodeURIComponent(session) : ""));
    return session;
  };
  var authorize = function (headers) {
    if (state.token) headers.authorization = "Bearer " + state.token;
    return headers;
  };

  var state = {
    token: storedToken(),
    sessions: [],
    selected: null,   // session id followed live
    view: null,       // the timeline being shown
    follow: null,     // the fetch of the SSE stream
    offline: false
  };

  // ---------------------------------------------------------------------------
  // Requests
  // ---------------------------------------------------------------------------

  var toast = function (text, bad) {
    var box = $("toast");
    box.textContent = text;
    box.className = bad ? "toast bad" : "toast";
    clearTimeout(toast.timer);
    toast.timer = setTimeout(function () { box.className = "toast hidden"; }, 4000);
  };

  // A read that takes longer is given up, and its connection with it: the next poll asks again on a fresh one.
  // (After a server restart, a poll sent on a connection the stopped server had left open waited forever, and
  // every later poll queued behind it: the page froze.)
  var readTimeoutMs = 5000;
  // A write (start, control) is given up later: the server may have applied it, which the events then show.
  var writeTimeoutMs = 10000;

  var api = function (method, path, body) {
    var init = { method: method, headers: authorize({}) };
    var timeoutMs = method === "GET" ? readTimeoutMs : writeTimeoutMs;
    if (typeof AbortSignal.timeout === "function") init.signal = AbortSignal.timeout(timeoutMs);
    if (body !== undefined) {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(path, init).catch(function (error) {
      if (error && (error.name === "TimeoutError" || error.name === "AbortError")) {
        throw new Error("no answer in " + timeoutMs / 1000 + " s" + (method === "GET" ? "" : "; it may still have been applied"));
      }
      throw error;
    }).then(function (response) {
      return response.text().then(function (text) {
        var data = text === "" ? undefined : JSON.parse(text);
        if (!response.ok) {
          var detail = data && (data.detail || data.title) || response.statusText;
          var first = data && data.errors && data.errors[0];
          if (first) detail += " (" + first.path.join(".") + ": " + first.message + ")";
          throw new Error(response.status + " " + detail);
        }
        return data;
      });
    });
  };

  var control = function (command) {
    if (!state.selected) return Promise.resolve();
    return api("POST", "/sessions/" + encodeURIComponent(state.selected) + "/control", command).then(function (result) {
      toast(command.type + ": " + result.status);
      if (result.status === "restarted") follow(state.selected, state.view ? state.view.lastId : -1, false);
      return result;
    }, function (error) { toast(command.type + ": " + error.message, true); });
  };

  // ---------------------------------------------------------------------------
  // The list of sessions
  // ---------------------------------------------------------------------------

  var renderList = function () {
    var list = $("sessions");
    list.textContent = "";
    if (state.sessions.length === 0) list.appendChild(el("li", "empty", "No sessions yet."));
    state.sessions.forEach(function (s) {
      var item = el("li", "session" + (s.id === state.selected ? " selected" : ""));
      item.dataset.testid = "session-item";
      item.dataset.id = s.id;
      item.dataset.status = s.status;
      item.appendChild(el("span", "badge " + s.status, s.status));
      item.appendChild(el("span", "title", s.title || s.id));
      var figures = (s.agent ? s.agent + " · " : "") + counted(s.turns, "turn") +
        (s.usage && s.usage.cost !== undefined ? " · " + money(s.usage.cost) : "");
      item.appendChild(el("span", "figures", figures));
      item.addEventListener("click", function () { select(s.id); });
      list.appendChild(item);
    });
  };

  var refreshing = null;   // the poll in flight: one at a time

  var refresh = function () {
    if (state.offline) return Promise.resolve();
    if (refreshing) return refreshing;
    refreshing = api("GET", "/sessions").then(function (sessions) {
      state.sessions = sessions;
      renderList();
      var current = sessions.find(function (s) { return s.id === state.selected; });
      if (current && state.view) {
        var view = state.view;
        view.info = current;
        renderHeader(view);
        // Not following, and the session changed since (a run started by another client, a run resumed by a
        // restarted server, even one that has ended since): follow it, from the last event shown.
        var live = current.status === "running" || current.status === "waiting";
        if (!state.follow && (live || current.updatedAt !== view.seen)) {
          view.seen = current.updatedAt;
          follow(current.id, view.lastId, false);
        }
      }
    }, function (error) { if (!state.follow) setConnection("unreachable: " + error.message); }).then(function () {
      refreshing = null;
    });
    return refreshing;
  };

  // ---------------------------------------------------------------------------
  // A session's timeline
  // ---------------------------------------------------------------------------

  var newView = function (title, offline) {
    var timeline = $("timeline");
    timeline.textContent = "";
    $("pending").textContent = "";
    var view = {
      title: title, offline: offline, lastId: -1, info: null,
      figures: null, outcome: null, running: false, root: timeline, path: [], depth: 0,
      turn: null, assistant: null, stage: null, calls: dict(), lastCall: dict(), approvals: dict(),
      delivered: dict(), plans: dict(), planIteration: 1, checkpoints: null
    };
    view.top = view;
    return view;
  };

  /** Where a view's next item goes: its turn, else its stage (a supervised worker turn), else its own box. */
  var place = function (view) { return view.turn ? view.turn.body : view.stage ? view.stage.body : view.root; };

  var renderHeader = function (view) {
    $("session-title").textContent = view.title;
    var info = view.info;
    $("session-agent").textContent = info && info.agent ? info.agent : "";
    var status = view.offline ? "offline" : info ? info.status : view.running ? "running" : "";
    var badge = $("session-status");
    badge.textContent = status;
    badge.className = "badge " + status;
    $("controls").className = view.offline ? "controls hidden" : "controls";
    // Cancel is for a run in flight: by the events shown once there are some (the list's status lags them).
    var live = view.lastId >= 0 ? view.running : info !== null && (info.status === "running" || info.status === "waiting");
    $("cancel-button").disabled = view.offline || !live;
    var f = view.figures;
    var figures = $("figures");
    figures.textContent = "";
    if (f) {
      var add = function (name, value) {
        var item = el("span", "figure");
        item.appendChild(el("b", null, name));
        item.appendChild(document.createTextNode(" " + value));
        figures.appendChild(item);
      };
      add("turns", f.turns + (f.limits.turns !== null ? " / " + f.limits.turns : ""));
      add("tokens", (f.usage.input + f.usage.output) + (f.limits.tokens !== null ? " / " + f.limits.tokens : ""));
      add("in / out", f.usage.input + " / " + f.usage.output);
      if (f.usage.cost !== undefined) {
        add("cost", money(f.usage.cost) + (f.limits.costUsd !== null ? " / " + money(f.limits.costUsd) : ""));
      }
      add("time", seconds(f.elapsedMs));
    }
    // The checkpoints saved (one after each turn, and before the first): counted here, not a row each.
    var saved = view.checkpoints;
    if (saved) {
      var item = el("span", "figure");
      item.dataset.testid = "checkpoints";
      item.dataset.count = String(saved.count);
      item.title = "the last one: " + saved.bytes + " bytes";
      item.appendChild(el("b", null, "checkpoints"));
      item.appendChild(document.createTextNode(" " + saved.count));
      figures.appendChild(item);
    }
  };

  var row = function (view, cls, label, text) {
    var node = el("div", "row " + cls);
    if (label) node.appendChild(el("span", "label", label));
    if (text !== undefined) node.appendChild(el("span", "text", text));
    place(view).appendChild(node);
    return node;
  };

  var bubble = function (view, who, text, label) {
    var node = el("div", "bubble " + who);
    node.dataset.testid = who + "-message";
    node.appendChild(el("span", "label", label || who));
    node.appendChild(el("div", "text", text));
    place(view).appendChild(node);
    return node;
  };

  var details = function (summary, body, open) {
    var node = el("details", "json");
    if (open) node.open = true;
    node.appendChild(el("summary", null, summary));
    node.appendChild(el("pre", null, body));
    return node;
  };

  var callCard = function (view, id, name) {
    var call = view.calls[id];
    if (call) return call;
    var card = el("div", "call running");
    card.dataset.testid = "tool-call";
    card.dataset.call = id;
    var head = el("div", "call-head");
    var title = el("span", "call-name", name);
    var status = el("span", "call-status", "preparing");
    var duration = el("span", "call-duration", "");
    var wait = el("span", "call-wait", "");
    head.appendChild(title);
    head.appendChild(status);
    head.appendChild(duration);
    head.appendChild(wait);
    card.appendChild(head);
    var args = el("pre", "call-args", "");
    card.appendChild(args);
    var approval = el("div", "call-approval hidden");
    card.appendChild(approval);
    var progress = el("pre", "call-progress hidden", "");
    card.appendChild(progress);
    var result = el("pre", "call-result hidden", "");
    card.appendChild(result);
    place(view).appendChild(card);
    call = {
      card: card, status: status, duration: duration, wait: wait, args: args, approval: approval, progress: progress,
      result: result, raw: "", child: null, startedAt: undefined, requestedAt: undefined, waitedMs: undefined
    };
    view.calls[id] = call;
    view.lastCall[name] = call;
    return call;
  };

  var setStatus = function (call, status, cls) {
    call.status.textContent = status;
    call.card.className = "call " + cls;
  };

  var approvalButtons = function (view, event) {
    if (view.top.offline) return null;
    var box = el("span", "decide");
    var approve = el("button", "approve", "Approve");
    approve.dataset.testid = "approve";
    approve.dataset.call = event.toolCallId;
    // The approval id tells a sub-agent's call from its parent's with the same call id.
    var id = event.approvalId || event.toolCallId;
    approve.addEventListener("click", function () { control({ type: "approve", id: id }); });
    var deny = el("button", "deny", "Deny");
    deny.dataset.testid = "deny";
    deny.dataset.call = event.toolCallId;
    deny.addEventListener("click", function () {
      var reason = $("steer-text").value.trim();
      var command = { type: "deny", id: id };
      if (reason) command.reason = reason;
      control(command).then(function (result) { if (result && reason) $("steer-text").value = ""; });
    });
    box.appendChild(approve);
    box.appendChild(deny);
    return box;
  };

  /** The most of a waiting call's arguments the bar shows; past it, the cut is marked. */
  var barLimit = 2000;
  // Every character that draws nothing, draws blank or changes the text's direction, by its Unicode properties:
  // White_Space, Default_Ignorable_Code_Point (zero widths, variation selectors, tags, the Hangul fillers U+115F,
  // U+1160, U+3164, U+FFA0), control, format (direction marks and overrides), surrogate, private use and
  // unassigned code points; and the one blank glyph that is none of these, U+2800 (the Braille blank).
  var blank = "\\p{White_Space}\\p{Default_Ignorable_Code_Point}\\p{Cc}\\p{Cf}\\p{Cs}\\p{Co}\\p{Cn}\\u2800";
  // In the bar: all of them (a single space included, which stays a space).
  var hiding = new RegExp("[" + blank + "]+", "gu");
  var codePoint = function (c) { return "U+" + c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0"); };
  /** A mark for a run of such characters: how many of each, in order (⟨4000 spaces⟩, ⟨U+202E⟩). */
  var markOf = function (run) {
    var parts = [];
    var chars = Array.from(run);
    for (var i = 0; i < chars.length;) {
      var j = i;
      while (j < chars.length && chars[j] === chars[i]) j++;
      var name = chars[i] === " " ? "space" : codePoint(chars[i]);
      parts.push(name === "space" ? (j - i) + (j - i === 1 ? " space" : " spaces") : (j - i > 1 ? (j - i) + " × " : "") + name);
      i = j;
    }
    return "⟨" + parts.join(", ") + "⟩";
  };
  // In a call's card, where the arguments keep their layout: the same, but for spaces and newlines.
  var invisible = new RegExp("(?:(?![ \\n])[" + blank + "])+", "gu");
  /** Puts a call's arguments in its card as text, each run of invisible characters as a mark. */
  var showArgs = function (node, text) {
    node.textContent = "";
    var last = 0;
    var match;
    invisible.lastIndex = 0;
    while ((match = invisible.exec(text)) !== null) {
      if (match.index > last) node.appendChild(document.createTextNode(text.slice(last, match.index)));
      node.appendChild(el("span", "mark", markOf(match[0])));
      last = match.index + match[0].length;
    }
    if (last < text.length) node.appendChild(document.createTextNode(text.slice(last)));
  };
  /**
   * A call's arguments as the bar shows them: compact JSON (so every whitespace in it is the arguments' own),
   * each run of hiding characters as a mark, and, past the limit, a plain mark of the cut.
   */
  var shownArguments = function (params) {
    var text;
    try { text = JSON.stringify(params); } catch (e) { text = String(params); }
    if (text === undefined) text = String(params);
    var box = el("code", "arguments");
    box.dataset.testid = "pending-arguments";
    var room = barLimit;
    var cut = false;
    /** Adds text up to the room left; false once it is cut. */
    var add = function (piece) {
      var part = piece.slice(0, room);
      if (part) box.appendChild(document.createTextNode(part));
      room -= part.length;
      return part.length === piece.length;
    };
    var last = 0;
    var match;
    hiding.lastIndex = 0;
    while ((match = hiding.exec(text)) !== null) {
      if (!add(text.slice(last, match.index))) { cut = true; break; }
      last = match.index + match[0].length;
      if (match[0] === " ") { if (!add(" ")) { cut = true; break; } continue; }
      if (room <= 0) { cut = true; break; }
      box.appendChild(el("span", "mark", markOf(match[0])));
      room -= 1;
    }
    if (!cut && !add(text.slice(last))) cut = true;
    if (cut) {
      var mark = el("span", "cut", " ✂ cut: the arguments are " + text.length +
        " characters; read them whole in the call's card below before you approve");
      mark.dataset.testid = "pending-cut";
      box.appendChild(mark);
    }
    return box;
  };

  /** The calls waiting for approval, the sub-agents' too (named by their path), in the bar above the timeline. */
  var renderPending = function (view) {
    var top = view.top;
    var bar = $("pending");
    bar.textContent = "";
    Object.keys(top.approvals).forEach(function (id) {
      var waiting = top.approvals[id];
      var event = waiting.event;
      var item = el("div", "pending-item");
      item.appendChild(el("span", "label", "waiting for approval"));
      item.appendChild(el("span", "call-name", waiting.view.path.concat([event.toolName]).join(" › ")));
      item.appendChild(shownArguments(event.params));
      var buttons = approvalButtons(top, event);
      if (buttons) item.appendChild(buttons);
      bar.appendChild(item);
    });
  };

  var endTurn = function (view) {
    if (view.turn && !view.turn.ended) {
      view.turn.ended = true;
      view.turn.card.classList.remove("live");
    }
  };

  var handlers = {
    AgentStart: function (view, e) {
      view.running = true;
      view.turn = null;
      if (view.top === view) {
        var node = row(view, "run-start", "run", e.messages.length > 0 ? "started" : "continued");
        node.dataset.testid = "run-start";
        renderHeader(view);
      } else setChildStatus(view, "running", "running");
      e.messages.forEach(function (m) {
        if (m.role === "user") bubble(view, "user", textOf(m));
        else if (m.role === "system") row(view, "system", "system", textOf(m));
      });
    },
    SessionResumed: function (view, e) {
      if (view.turn && !view.turn.ended) {
        view.turn.card.classList.add("interrupted");
        view.turn.body.appendChild(el("div", "row notice", "interrupted: this turn is redone below"));
      }
      endTurn(view);
      view.turn = null;
      // Calls of the turn being redone get new cards below (a redone call keeps its id).
      view.calls = dict();
      view.lastCall = dict();
      if (view.top === view) view.approvals = dict();
      renderPending(view);
      var at = "at turn " + e.resumedAtTurn + " from its checkpoint (" + e.restored.messages + " messages)";
      var node = row(view, "resumed", "resumed", at);
      node.dataset.testid = "resumed";
    },
    TurnStart: function (view, e) {
      endTurn(view);
      var card = el("section", "turn live");
      card.dataset.testid = "turn";
      card.dataset.turn = e.turn;
      card.appendChild(el("h3", null, "Turn " + e.turn));
      var body = el("div", "turn-body");
      card.appendChild(body);
      (view.stage ? view.stage.body : view.root).appendChild(card);
      if (view.stage) view.stage.worked = true;
      view.turn = { card: card, body: body, ended: false };
      view.assistant = null;
      // A call's card is its turn's: providers that number calls per response use call_0 again in the next turn.
      view.calls = dict();
      view.lastCall = dict();
    },
    MessageStart: function (view, e) {
      if (e.role !== "assistant") return;
      var block = el("div", "assistant");
      var reasoning = el("details", "reasoning hidden");
      reasoning.open = true;
      reasoning.appendChild(el("summary", null, "reasoning"));
      var thought = el("div", "reasoning-text", "");
      reasoning.appendChild(thought);
      var text = el("div", "assistant-text", "");
      text.dataset.testid = "assistant-text";
      block.appendChild(reasoning);
      block.appendChild(text);
      place(view).appendChild(block);
      view.assistant = { block: block, reasoning: reasoning, thought: thought, text: text };
    },
    MessageUpdate: function (view, e) {
      var d = e.delta;
      if (d.type === "toolCall") {
        var call = callCard(view, d.id, d.name);
        call.raw += d.delta;
        showArgs(call.args, call.raw);
        return;
      }
      if (!view.assistant) handlers.MessageStart(view, { role: "assistant" });
      if (d.type === "text") view.assistant.text.textContent += d.delta;
      else if (d.type === "reasoning") {
        view.assistant.reasoning.classList.remove("hidden");
        view.assistant.thought.textContent += d.delta;
      }
    },
    MessageEnd: function (view, e) {
      var m = e.message;
      if (m.role === "assistant") {
        if (!view.assistant) handlers.MessageStart(view, { role: "assistant" });
        var a = view.assistant;
        a.text.textContent = textOf(m);
        var thinking = Array.isArray(m.content) ? partsText(m.content, "reasoning") : "";
        if (thinking) { a.reasoning.classList.remove("hidden"); a.thought.textContent = thinking; }
        (m.content || []).forEach(function (p) {
          if (p.type === "tool-call") {
            var call = callCard(view, p.id, p.name);
            showArgs(call.args, json(p.params));
          }
        });
        if (m.errorMessage) row(view, "error", "error", m.errorMessage);
        view.assistant = null;
      } else if (m.role === "user") {
        var key = JSON.stringify(m);
        if (view.delivered[key]) delete view.delivered[key];
        else bubble(view, "user", textOf(m));
      } else row(view, m.role, m.role, textOf(m) || json(m));
    },
    ToolExecutionStart: function (view, e) {
      var call = callCard(view, e.toolCallId, e.toolName);
      showArgs(call.args, json(e.params));
      setStatus(call, "running", "running");
      call.startedAt = e.timestamp;
    },
    ToolExecutionUpdate: function (view, e) {
      var call = callCard(view, e.toolCallId, e.toolName);
      call.progress.classList.remove("hidden");
      call.progress.textContent = typeof e.partial === "string" ? e.partial : json(e.partial);
    },
    ToolExecutionEnd: function (view, e) {
      var call = callCard(view, e.toolCallId, e.toolName);
      var error = e.result.isError;
      // a denied call ends with its denial as an error result: it stays "denied"
      setStatus(call, call.denied ? "denied" : error ? "error" : "done", error ? "failed" : "done");
      // The call's own time, from its start (its end's durationMs counts from before a wait for approval); the
      // wait for a human's decision apart.
      var waited = call.waitedMs;
      var ran = call.startedAt !== undefined ? e.timestamp - call.startedAt : Math.max(0, e.durationMs - (waited || 0));
      call.duration.textContent = ran + " ms";
      if (waited !== undefined) call.wait.textContent = "waited " + seconds(waited) + " for approval";
      call.result.classList.remove("hidden");
      call.result.textContent = textOf(e.result);
      call.approval.querySelectorAll("button").forEach(function (b) { b.remove(); });
    },
    ApprovalRequested: function (view, e) {
      var call = callCard(view, e.toolCallId, e.toolName);
      showArgs(call.args, json(e.params));
      setStatus(call, "waiting for approval", "waiting");
      call.requestedAt = e.timestamp;
      call.approval.classList.remove("hidden");
      call.approval.textContent = "";
      call.approval.appendChild(el("span", "label", e.reason ? "needs approval: " + e.reason : "needs approval"));
      var buttons = approvalButtons(view, e);
      if (buttons) call.approval.appendChild(buttons);
      view.top.approvals[e.approvalId || e.toolCallId] = { event: e, view: view };
      renderPending(view);
    },
    ApprovalResolved: function (view, e) {
      var call = callCard(view, e.toolCallId, e.toolName);
      if (call.requestedAt !== undefined) call.waitedMs = e.timestamp - call.requestedAt;
      call.approval.textContent = "";
      var said = e.approved ? "approved" : "denied" + (e.reason ? ": " + e.reason : "");
      var verdict = el("span", e.approved ? "label ok" : "label bad", said);
      verdict.dataset.testid = "verdict";
      call.approval.appendChild(verdict);
      if (!e.approved) { call.denied = true; setStatus(call, "denied", "failed"); }
      delete view.top.approvals[e.approvalId || e.toolCallId];
      renderPending(view);
    },
    SteeringDelivered: function (view, e) {
      e.messages.forEach(function (m) { view.delivered[JSON.stringify(m)] = true; bubble(view, "steer", textOf(m)); });
    },
    FollowUpDelivered: function (view, e) {
      e.messages.forEach(function (m) {
        view.delivered[JSON.stringify(m)] = true;
        bubble(view, "follow-up", textOf(m));
      });
    },
    WrapUpRequested: function (view, e) { row(view, "notice", "wrap-up (" + e.source + ")", e.message); },
    GuardTripped: function (view, e) {
      row(view, e.action === "stop" ? "error" : "notice", e.guard + " " + e.action, e.detail);
    },
    ContextTransformed: function (view, e) {
      row(view, "quiet", "context", e.plugin + ": " + e.messagesBefore + " → " + e.messagesAfter + " messages");
    },
    BudgetSnapshot: function (view, e) {
      // A supervised run's own figures (SupervisedBudget: its totals and limits) win over its worker's runs'.
      var own = e._tag === "SupervisedBudget";
      if (own) view.ownFigures = true;
      else if (view.ownFigures) return;
      view.figures = own ? e : e.figures;
      if (view.top === view) return renderHeader(view);
      var f = view.figures;
      var figures = counted(f.turns, "turn") + " · " + counted(f.usage.input + f.usage.output, "token");
      view.figuresText.textContent = figures + (f.usage.cost !== undefined ? " · " + money(f.usage.cost) : "");
    },
    TurnEnd: function (view) { endTurn(view); },
    CheckpointSaved: function (view, e) {
      var saved = view.top.checkpoints || { count: 0, bytes: 0 };
      view.top.checkpoints = { count: saved.count + 1, bytes: e.bytes };
      renderHeader(view.top);
    },
    AgentEnd: function (view, e) {
      endTurn(view);
      view.turn = null;
      view.stage = null;
      view.running = false;
      var top = view.top;
      // The run's calls wait no more: the whole session's, or this sub-agent's.
      Object.keys(top.approvals).forEach(function (id) {
        if (top === view || top.approvals[id].view === view) delete top.approvals[id];
      });
      renderPending(view);
      var outcome = e.outcome && unwrap(e.outcome);
      var why = outcome && (outcome.reason || outcome.budget || outcome.notes);
      var text = outcome ? outcome._tag + (why ? ": " + why : "")
        : e.error ? "failed: " + (e.error.message || e.error._tag) : "died: " + e.defect;
      var ok = outcome && succeeded[outcome._tag] === true;
      var node = row(view, ok ? "outcome ok" : "outcome bad", "outcome", text);
      node.dataset.testid = "outcome";
      node.dataset.outcome = outcome ? outcome._tag : e.error ? "Failed" : "Died";
      if (top !== view) setChildStatus(view, node.dataset.outcome, ok ? "done" : "failed");
      else renderHeader(view);
    }
  };

  /** The endings that went as asked (the rest are shown as bad). */
  var succeeded = { Completed: true, Terminated: true, WrappedUp: true, HandedOff: true, Converged: true, Tolerated: true };

  /** How deep sub-agents are shown inside each other; deeper events are shown with their fields. */
  var maxDepth = 12;

  var setChildStatus = function (view, text, cls) {
    view.statusText.textContent = text;
    view.box.className = "sub-agent " + cls;
  };

  /**
   * The view of the sub-agent run by a call of "view" (by the call's id; by
   * its name, the latest such call, for events that do not name their
   * calls): a collapsible box in the call's card, made on its first event.
   */
  var childOf = function (view, name, id) {
    var call = id !== undefined ? callCard(view, id, name) : view.lastCall[name] || callCard(view, name, name);
    if (call.child) return call.child;
    var box = el("details", "sub-agent running");
    box.open = true;
    box.dataset.testid = "sub-agent";
    box.dataset.agent = name;
    var summary = el("summary");
    summary.appendChild(el("span", "label", "sub-agent"));
    summary.appendChild(el("span", "call-name", name));
    var status = el("span", "call-status", "running");
    var figures = el("span", "call-duration", "");
    summary.appendChild(status);
    summary.appendChild(figures);
    box.appendChild(summary);
    var body = el("div", "sub-body");
    box.appendChild(body);
    call.card.insertBefore(box, call.progress);
    var child = {
      top: view.top, root: body, path: view.path.concat([name]), depth: view.depth + 1,
      box: box, statusText: status, figuresText: figures, running: true, figures: null,
      turn: null, assistant: null, stage: null, calls: dict(), lastCall: dict(), delivered: dict(), plans: dict(),
      planIteration: 1
    };
    call.child = child;
    return child;
  };

  /** A supervised run's stage (the baseline, a plan or an act turn of the worker): a section of its own. */
  var newStage = function (view, kind, title) {
    endTurn(view);
    view.turn = null;
    var card = el("section", "stage " + kind);
    card.dataset.testid = "stage";
    card.dataset.kind = kind;
    var head = el("h3");
    head.appendChild(el("span", null, title));
    var badge = el("span", "badge", "");
    head.appendChild(badge);
    card.appendChild(head);
    var body = el("div", "stage-body");
    card.appendChild(body);
    view.root.appendChild(card);
    view.stage = { kind: kind, card: card, body: body, badge: badge, checks: null, worked: false };
    return view.stage;
  };

  /** The checks panel of the current stage: one row per check, updated as each runs and ends. */
  var checksPanel = function (view, baseline) {
    if (baseline && (!view.stage || view.stage.kind !== "baseline")) newStage(view, "baseline", "Baseline checks");
    if (!view.stage) newStage(view, "act", "Checks");
    var stage = view.stage;
    if (stage.checks) return stage.checks;
    var panel = el("div", "checks");
    panel.dataset.testid = "checks";
    panel.appendChild(el("div", "label", baseline ? "checks before the task" : "checks after the turn"));
    endTurn(view);
    view.turn = null;
    stage.body.appendChild(panel);
    stage.checks = { panel: panel, rows: dict(), passed: 0, failed: 0 };
    return stage.checks;
  };

  var checkRow = function (view, e) {
    var checks = checksPanel(view, e.baseline === true);
    var name = String(e.check);
    var found = checks.rows[name];
    if (found) return found;
    var node = el("div", "check running");
    node.dataset.testid = "check";
    node.dataset.check = name;
    node.dataset.status = "running";
    var head = el("div", "check-head");
    var status = el("span", "check-status", "running");
    head.appendChild(status);
    head.appendChild(el("span", "call-name", name));
    head.appendChild(el("span", "check-role", e.role));
    var duration = el("span", "call-duration", "");
    head.appendChild(duration);
    var summary = el("span", "check-summary", "");
    head.appendChild(summary);
    node.appendChild(head);
    checks.panel.appendChild(node);
    found = { node: node, status: status, duration: duration, summary: summary, details: null, counted: false };
    checks.rows[name] = found;
    return found;
  };

  /** A plan the worker proposed, with what became of it. */
  var setDecision = function (plan, decision, notes) {
    plan.node.dataset.decision = decision;
    plan.decision.textContent = decision;
    plan.decision.className = "badge " + decision;
    if (notes !== undefined) {
      var said = el("div", "plan-notes");
      said.dataset.testid = "plan-notes";
      said.appendChild(el("span", "label", decision === "rejected" ? "rejected:" : "revise:"));
      said.appendChild(el("span", "text", notes));
      plan.node.appendChild(said);
    }
  };

  handlers.Nested = function (view, e) {
    var path = Array.isArray(e.path) ? e.path : [];
    if (path.length === 0 || view.depth + path.length > maxDepth) return generic(view, e);
    var calls = Array.isArray(e.calls) && e.calls.length === path.length ? e.calls : null;
    var child = childOf(view, String(path[0]), calls ? String(calls[0]) : undefined);
    if (path.length === 1) return dispatch(child, e.event);
    dispatch(child, { _tag: "Nested", path: path.slice(1), calls: calls ? calls.slice(1) : undefined, event: e.event });
  };

  handlers.WorkerTurnStart = function (view, e) {
    var plan = e.phase === "plan";
    newStage(view, e.phase, plan ? "Plan · iteration " + view.planIteration : "Act · turn " + e.turn);
    bubble(view, "worker", e.message, "to " + e.worker);
  };

  handlers.SupervisedBudget = handlers.BudgetSnapshot;

  handlers.WorkerTurnEnd = function (view, e) {
    if (!view.stage) newStage(view, e.phase, e.phase);
    endTurn(view);
    view.turn = null;
    // An external worker's turn has no events of its own: its reply is shown here.
    if (!view.stage.worked) bubble(view, "reply", e.text, e.worker);
    var usage = e.usage || {};
    row(view, "quiet", "worker", "turn ended · " + usage.inputTokens + " in / " + usage.outputTokens + " out tokens");
  };

  handlers.CheckStarted = function (view, e) { checkRow(view, e); };

  handlers.CheckResult = function (view, e) {
    var found = checkRow(view, e);
    var checks = view.stage.checks;
    found.node.dataset.status = e.status;
    found.node.className = "check " + e.status;
    found.status.textContent = e.status;
    found.duration.textContent = seconds(Number(e.durationMs) || 0);
    found.summary.textContent = e.summary;
    if (e.details && !found.details) {
      found.details = details("details", e.details, false);
      found.node.appendChild(found.details);
    }
    if (!found.counted) {
      found.counted = true;
      if (e.status === "pass") checks.passed++;
      else checks.failed++;
    }
    view.stage.badge.textContent = checks.passed + " passed · " + checks.failed + " failing";
    view.stage.badge.className = "badge " + (checks.failed > 0 ? "failed" : "finished");
  };

  handlers.PlanProposed = function (view, e) {
    if (!view.stage) newStage(view, "plan", "Plan · iteration " + e.iteration);
    endTurn(view);
    view.turn = null;
    var node = el("div", "plan");
    node.dataset.testid = "plan";
    node.dataset.iteration = String(e.iteration);
    var head = el("div", "plan-head");
    head.appendChild(el("span", "label", "plan · iteration " + e.iteration));
    var decision = el("span", "badge", "");
    head.appendChild(decision);
    node.appendChild(head);
    node.appendChild(el("div", "plan-text", e.plan));
    view.stage.body.appendChild(node);
    var plan = { node: node, decision: decision };
    view.plans[String(e.iteration)] = plan;
    setDecision(plan, "proposed");
  };

  handlers.PlanRevised = function (view, e) {
    var plan = view.plans[String(e.iteration - 1)];
    view.planIteration = e.iteration;
    if (plan) setDecision(plan, "revised", e.notes);
    else row(view, "notice", "plan revised", e.notes);
  };

  handlers.PlanApproved = function (view, e) {
    var plan = view.plans[String(e.iteration)];
    if (plan) setDecision(plan, "approved");
    else row(view, "notice", "plan approved", e.plan);
  };

  handlers.PlanRejected = function (view, e) {
    var plan = view.plans[String(e.iteration)];
    if (plan) setDecision(plan, "rejected", e.notes);
    else row(view, "error", "plan rejected", e.notes);
  };

  handlers.TurnApprovalRequested = function (view, e) {
    var node = row(view, "notice", "feedback waits for the operator");
    node.appendChild(details("feedback", e.feedback, true));
  };

  handlers.FeedbackSent = function (view, e) {
    endTurn(view);
    view.turn = null;
    var failing = Array.isArray(e.failing) ? e.failing.join(", ") : "";
    var node = row(view, "feedback", "feedback to the worker", failing ? "failing: " + failing : "");
    node.dataset.testid = "feedback";
    node.appendChild(details("the message", e.feedback, false));
  };

  /** Any event kind the page does not know yet: its tag and its fields. */
  var generic = function (view, e) {
    var node = row(view, "generic", e !== null && typeof e === "object" ? e._tag : typeof e);
    node.appendChild(details("fields", json(e), false));
  };

  /** The kind of the Custom events and outcomes a supervised run's own are carried as. */
  var supervisedKind = "effect-agent/supervisor";

  /** A supervised run's own event or ending (a Custom one of its kind): itself, as its handler reads it. */
  var unwrap = function (e) {
    if (e === null || typeof e !== "object" || e._tag !== "Custom" || e.kind !== supervisedKind) return e;
    var p = e.payload;
    if (p === null || typeof p !== "object" || typeof p._tag !== "string") return e;
    var own = {};
    Object.keys(p).forEach(function (key) { if (key !== "__proto__") own[key] = p[key]; });
    if (e.runId !== undefined) { own.runId = e.runId; own.turn = e.turn; own.timestamp = e.timestamp; }
    return own;
  };

  /** Shows an event in a view with its handler; one it does not know, or cannot show, with its fields. */
  var dispatch = function (view, given) {
    var e = unwrap(given);
    var tag = e !== null && typeof e === "object" ? e._tag : undefined;
    var known = typeof tag === "string" && Object.prototype.hasOwnProperty.call(handlers, tag);
    var handle = known ? handlers[tag] : generic;
    try { handle(view, e); } catch (error) { generic(view, e); }
  };

  var apply = function (view, id, e) {
    if (id <= view.lastId) return;
    view.lastId = id;
    view.applied = (view.applied || 0) + 1;
    var timeline = $("timeline");
    timeline.dataset.lastId = String(id);
    timeline.dataset.applied = String(view.applied);
    dispatch(view, e);
    if ($("autoscroll").checked) timeline.scrollTop = timeline.scrollHeight;
  };

  // ---------------------------------------------------------------------------
  // Following a session's events (SSE over fetch, reconnecting)
  // ---------------------------------------------------------------------------

  var setConnection = function (text) { $("connection").textContent = text; };

  var follow = function (id, after, fresh) {
    if (state.follow) state.follow.abort();
    var controller = new AbortController();
    state.follow = controller;
    var view = state.view;
    var attempt = 0;
    var connect = function () {
      if (controller.signal.aborted) return;
      var headers = authorize({});
      if (view.lastId >= 0) headers["last-event-id"] = String(view.lastId);
      setConnection(attempt === 0 ? "connecting" : "reconnecting (" + attempt + ")");
      var path = "/sessions/" + encodeURIComponent(id) + "/events";
      fetch(path, { headers: headers, signal: controller.signal }).then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        setConnection("live");
        attempt = 0;
        return read(response.body.getReader(), view);
      }).then(function () {
        // The stream ended: the run ended, or this client was dropped (it fell behind, the server is stopping).
        if (controller.signal.aborted) return;
        var status = view.info ? view.info.status : "running";
        if (view.running && (status === "running" || status === "waiting")) {
          attempt++;
          setTimeout(connect, Math.min(250 * attempt, 2000));
          return;
        }
        // Not running: the list's polling follows it again when it changes.
        setConnection("ended");
        if (view.info) view.seen = view.info.updatedAt;
        if (state.follow === controller) state.follow = null;
        refresh();
      }, function (error) {
        if (controller.signal.aborted) return;
        attempt++;
        setConnection("disconnected: " + error.message + "; retrying");
        setTimeout(connect, Math.min(250 * attempt, 2000));
      });
    };
    connect();
  };

  var read = function (reader, view) {
    var decoder = new TextDecoder();
    var buffer = "";
    var id = null;
    var data = [];
    var pump = function () {
      return reader.read().then(function (chunk) {
        if (chunk.done) return;
        buffer += decoder.decode(chunk.value, { stream: true });
        var newline;
        while ((newline = buffer.indexOf("\n")) >= 0) {
          var line = buffer.slice(0, newline);
          buffer = buffer.slice(newline + 1);
          if (line === "") {
            if (data.length > 0 && id !== null) apply(view, Number(id), JSON.parse(data.join("\n")));
            id = null;
            data = [];
          } else if (line.indexOf("id: ") === 0) id = line.slice(4);
          else if (line.indexOf("data: ") === 0) data.push(line.slice(6));
        }
        return pump();
      });
    };
    return pump();
  };

  var select = function (id) {
    state.offline = false;
    state.selected = id;
    state.view = newView(id, false);
    var info = state.sessions.find(function (s) { return s.id === id; });
    if (info) { state.view.info = info; state.view.title = info.title || id; }
    renderHeader(state.view);
    renderList();
    history.replaceState(null, "", "#" + encodeURIComponent(id));
    follow(id, -1, true);
  };

  // ---------------------------------------------------------------------------
  // Offline: a trajectory file
  // ---------------------------------------------------------------------------

  var openFile = function (file) {
    file.text().then(function (text) {
      if (state.follow) { state.follow.abort(); state.follow = null; }
      state.offline = true;
      state.selected = null;
      state.view = newView(file.name, true);
      renderList();
      var lines = text.split("\n");
      var skipped = 0;
      lines.forEach(function (line, i) {
        if (line.trim() === "") return;
        try { apply(state.view, i, JSON.parse(line)); } catch (e) { skipped++; }
      });
      renderHeader(state.view);
      setConnection("offline: " + file.name + (skipped > 0 ? " (" + skipped + " lines skipped)" : ""));
    });
  };

  // ---------------------------------------------------------------------------
  // Wiring
  // ---------------------------------------------------------------------------

  $("start").addEventListener("submit", function (event) {
    event.preventDefault();
    var task = $("task").value.trim();
    if (!task) return;
    api("POST", "/sessions", { task: task }).then(function (session) {
      $("task").value = "";
      return refresh().then(function () { select(session.id); });
    }, function (error) { toast("start: " + error.message, true); });
  });
  $("steer-button").addEventListener("click", function () {
    var text = $("steer-text").value.trim();
    if (!text) return;
    var finished = state.view && state.view.info && state.view.info.status === "finished" && !state.view.running;
    control({ type: finished ? "follow_up" : "steer", text: text }).then(function () { $("steer-text").value = ""; });
  });
  $("follow-up-button").addEventListener("click", function () {
    var text = $("steer-text").value.trim();
    if (!text) return;
    control({ type: "follow_up", text: text }).then(function () { $("steer-text").value = ""; });
  });
  $("cancel-button").addEventListener("click", function () {
    control({ type: "cancel", reason: "cancelled in the inspector" });
  });
  $("file").addEventListener("change", function (event) {
    if (event.target.files[0]) openFile(event.target.files[0]);
  });
  document.addEventListener("dragover", function (event) {
    event.preventDefault();
    document.body.classList.add("dropping");
  });
  document.addEventListener("dragleave", function () { document.body.classList.remove("dropping"); });
  document.addEventListener("drop", function (event) {
    event.preventDefault();
    document.body.classList.remove("dropping");
    var file = event.dataTransfer && event.dataTransfer.files[0];
    if (file) openFile(file);
  });

  var wanted = fromFragment();
  refresh().then(function () {
    if (wanted && state.sessions.some(function (s) { return s.id === wanted; })) select(wanted);
  });
  setInterval(refresh, 1500);
})();
`
