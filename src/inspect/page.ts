// The inspector's web page: self-contained HTML (no external resources), plain DOM script.
// It connects to the server's WebSocket, rebuilds the actor system from the @statelyai/inspect
// messages (@xstate.actor / .snapshot / .event) and renders, ten times a second at most:
//   - one row per actor (`tr[data-actor][data-state][data-status][data-session]`): name, parent,
//     state value (nested as a.b), status, the scalar fields of its context, last event;
//   - the last 50 events; a header with connection status and rates.
// Ended actors stay greyed for a while (at most 20; a decode spawns one actor per token).

export interface PageOptions {
  title: string;
  /** Path of the WebSocket endpoint on the page's own host. */
  wsPath: string;
}

export function renderInspectorPage({ title, wsPath }: PageOptions): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style>
  body { margin: 0; font: 13px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; background: #f4f5f8; color: #1d2330; }
  header { display: flex; flex-wrap: wrap; gap: 18px; align-items: center; padding: 10px 16px; background: #1d2330; color: #fff; }
  header h1 { margin: 0; font-size: 16px; font-weight: 600; }
  header b { font-variant-numeric: tabular-nums; }
  .pill { padding: 1px 9px; border-radius: 10px; font-weight: 600; }
  .pill.connecting { background: #f9a825; color: #000; }
  .pill.open { background: #2e7d32; }
  .pill.closed { background: #c62828; }
  main { padding: 12px 16px; display: grid; gap: 18px; }
  h2 { margin: 0 0 6px; font-size: 12px; text-transform: uppercase; letter-spacing: .06em; color: #5b6475; }
  table { width: 100%; border-collapse: collapse; background: #fff; box-shadow: 0 1px 2px rgba(0,0,0,.08); }
  th, td { padding: 4px 8px; border-bottom: 1px solid #eceef2; text-align: left; vertical-align: top; }
  th { background: #e9ecf2; font-weight: 600; }
  td.name { font-weight: 600; }
  td.state, td.mono, #events td { font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; }
  td.state { color: #1a56db; font-weight: 600; }
  .active { color: #2e7d32; } .done { color: #546e7a; } .error { color: #c62828; } .stopped { color: #757575; }
  tr.ended { opacity: .45; }
  .ctx span { display: inline-block; margin: 0 6px 2px 0; padding: 0 6px; border-radius: 4px; background: #eef3ff; font-family: ui-monospace, monospace; }
  .muted { color: #8a93a6; }
  #events td { font-size: 12px; }
</style>
</head>
<body>
<header>
  <h1 id="title">${escapeHtml(title)}</h1>
  <span id="conn" class="pill connecting" data-conn="connecting">connecting</span>
  <span><b id="eps">0</b> events/s</span>
  <span><b id="mps">0</b> messages/s</span>
  <span id="counts"></span>
  <span id="dropped" class="muted"></span>
</header>
<main>
  <section>
    <h2>Actors</h2>
    <table id="actors">
      <thead><tr><th>actor</th><th>parent</th><th>state</th><th>status</th><th>context</th><th>last event</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
  <section>
    <h2>Recent events</h2>
    <table id="events">
      <thead><tr><th>time</th><th>source → target</th><th>event</th><th>payload</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
</main>
<script>
"use strict";
const WS_PATH = ${JSON.stringify(wsPath)};
const MAX_EVENTS = 50, MAX_ENDED = 20, ENDED_TTL_MS = 60000, RENDER_MS = 100;

const actors = new Map(); // sessionId -> { sessionId, name, actorId, systemId, parentId, status, value, context, lastEvent, endedAt }
const events = []; // newest last
let dirty = true, messages = 0, eventCount = 0, retryMs = 500;

function connect() {
  setConn("connecting");
  const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + WS_PATH);
  ws.onopen = () => {
    retryMs = 500;
    actors.clear(); // the server replays the current actors on every connection
    events.length = 0;
    setConn("open");
  };
  ws.onmessage = (m) => {
    if (typeof m.data !== "string") return;
    try { handle(JSON.parse(m.data)); } catch (err) { console.warn("inspector: bad message", err); }
  };
  ws.onclose = () => {
    setConn("closed");
    setTimeout(connect, retryMs);
    retryMs = Math.min(retryMs * 2, 5000);
  };
}

function setConn(state) {
  const el = document.getElementById("conn");
  el.className = "pill " + state;
  el.textContent = state;
  el.dataset.conn = state;
}

function actorFor(sessionId) {
  let a = actors.get(sessionId);
  if (!a) {
    a = { sessionId, name: sessionId, status: "active" };
    actors.set(sessionId, a);
  }
  return a;
}

function handle(msg) {
  messages++;
  dirty = true;
  if (!msg || typeof msg.sessionId !== "string") return;
  if (msg.type === "@xstate.actor") {
    const a = actorFor(msg.sessionId);
    Object.assign(a, { name: msg.name || a.name, actorId: msg.actorId, systemId: msg.systemId, parentId: msg.parentId });
    if (msg.snapshot) applySnapshot(a, msg.snapshot);
  } else if (msg.type === "@xstate.snapshot") {
    const a = actorFor(msg.sessionId);
    applySnapshot(a, msg.snapshot || {});
    if (msg.event && msg.event.type) a.lastEvent = msg.event.type;
  } else if (msg.type === "@xstate.event") {
    eventCount++;
    events.push(msg);
    if (events.length > MAX_EVENTS) events.shift();
    const target = actors.get(msg.sessionId);
    if (target && msg.event) target.lastEvent = msg.event.type;
  }
}

function applySnapshot(a, snap) {
  a.status = typeof snap.status === "string" ? snap.status : "active";
  a.value = snap.value;
  a.context = snap.context;
  a.error = snap.error;
  if (a.status === "active") a.endedAt = undefined;
  else if (!a.endedAt) a.endedAt = Date.now();
}

/** The name a person knows an actor by: its system id, its own id, else the machine id. */
function displayName(a) {
  if (!a) return "";
  if (a.systemId) return a.systemId;
  if (a.actorId && a.actorId !== a.sessionId) return a.actorId;
  return a.name || a.sessionId;
}

/** State value as text: "a", {a: "b"} -> "a.b", parallel regions joined by ", ". */
function stateText(v) {
  if (typeof v === "string") return v;
  if (!v || typeof v !== "object") return "";
  return Object.keys(v).map((k) => {
    const sub = stateText(v[k]);
    if (!sub) return k;
    return sub.includes(", ") ? k + ".{" + sub + "}" : k + "." + sub;
  }).join(", ");
}

function shortJson(value, max) {
  let s;
  try { s = JSON.stringify(value); } catch { s = String(value); }
  if (s === undefined) return "";
  return s.length > max ? s.slice(0, max - 1) + "…" : s;
}

/** Ends children of ended parents, drops old ended actors. */
function prune() {
  const now = Date.now();
  for (const a of actors.values()) { // parents come before their children (creation order)
    const parent = a.parentId && actors.get(a.parentId);
    if (!a.endedAt && parent && parent.endedAt) {
      a.status = "stopped";
      a.endedAt = now;
    }
  }
  const ended = [...actors.values()].filter((a) => a.endedAt).sort((x, y) => y.endedAt - x.endedAt);
  ended.forEach((a, i) => {
    if (i >= MAX_ENDED || now - a.endedAt > ENDED_TTL_MS) actors.delete(a.sessionId);
  });
}

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function actorRow(a) {
  const tr = document.createElement("tr");
  const name = displayName(a);
  const state = stateText(a.value);
  tr.dataset.actor = name;
  tr.dataset.state = state;
  tr.dataset.status = a.status;
  tr.dataset.session = a.sessionId;
  if (a.endedAt) tr.className = "ended";
  const nameCell = cell(name, "name");
  nameCell.title = "session " + a.sessionId + (a.name && a.name !== name ? " · machine " + a.name : "");
  const parent = a.parentId ? displayName(actors.get(a.parentId)) || a.parentId : "—";
  const ctx = document.createElement("td");
  ctx.className = "ctx";
  if (a.context && typeof a.context === "object") {
    for (const [k, v] of Object.entries(a.context)) {
      if (typeof v !== "number" && typeof v !== "string" && typeof v !== "boolean") continue;
      const chip = document.createElement("span");
      chip.dataset.key = k;
      chip.textContent = k + "=" + (typeof v === "string" ? shortJson(v, 40) : String(v));
      ctx.append(chip);
    }
  }
  const status = a.error ? a.status + " (" + shortJson(a.error, 60) + ")" : a.status;
  tr.append(nameCell, cell(parent), cell(state || "—", "state"), cell(status, a.status), ctx, cell(a.lastEvent || "", "mono"));
  return tr;
}

function eventRow(e) {
  const tr = document.createElement("tr");
  const time = new Date(Number(e.createdAt) || Date.now());
  const source = e.sourceId ? displayName(actors.get(e.sourceId)) || e.sourceId : "—";
  const target = displayName(actors.get(e.sessionId)) || e.sessionId;
  const { type, ...payload } = e.event || {};
  tr.append(
    cell(time.toLocaleTimeString([], { hour12: false }) + "." + String(time.getMilliseconds()).padStart(3, "0")),
    cell(source + " → " + target),
    cell(String(type ?? "")),
    cell(Object.keys(payload).length ? shortJson(payload, 100) : ""),
  );
  return tr;
}

function render() {
  dirty = false;
  prune();
  const all = [...actors.values()];
  const live = all.filter((a) => !a.endedAt);
  const ended = all.filter((a) => a.endedAt).sort((x, y) => y.endedAt - x.endedAt);
  document.querySelector("#actors tbody").replaceChildren(...live.concat(ended).map(actorRow));
  document.querySelector("#events tbody").replaceChildren(...events.slice().reverse().map(eventRow));
  document.getElementById("counts").textContent = live.length + " live · " + ended.length + " ended";
}

setInterval(() => { if (dirty || actors.size) render(); }, RENDER_MS);
setInterval(() => {
  document.getElementById("eps").textContent = String(eventCount);
  document.getElementById("mps").textContent = String(messages);
  eventCount = 0;
  messages = 0;
}, 1000);
setInterval(async () => { // server-side counters: what a flood made it drop
  try {
    const s = await (await fetch("/stats.json", { cache: "no-store" })).json();
    document.getElementById("dropped").textContent = s.dropped || s.coalesced ? "dropped " + s.dropped + " · coalesced " + s.coalesced : "";
  } catch { /* server gone; the socket shows it */ }
}, 2000);
connect();
</script>
</body>
</html>
`;
}

/**
 * Stately's bridge page, as served by `@statelyai/inspect/server`: their inspector UI in an
 * iframe, fed with the messages of our WebSocket (the iframe needs the internet).
 */
export function renderStatelyBridgePage({ wsPath, inspectorUrl = "https://stately.ai/inspect" }: { wsPath: string; inspectorUrl?: string }): string {
  return `<!doctype html>
<html>
<head>
<meta charset="utf-8">
<title>Stately Inspector</title>
<style>* { margin: 0; padding: 0; } html, body { height: 100%; } iframe { width: 100%; height: 100%; border: none; }</style>
</head>
<body>
<iframe id="inspector" src="${escapeHtml(inspectorUrl)}"></iframe>
<script>
  const iframe = document.getElementById("inspector");
  const buffer = [];
  let connected = false;
  // Their UI announces itself with @statelyai.connected; until then, hold the messages.
  window.addEventListener("message", (e) => {
    if (e.data && e.data.type === "@statelyai.connected") {
      connected = true;
      buffer.forEach((event) => iframe.contentWindow.postMessage(event, "*"));
      buffer.length = 0;
    }
  });
  const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + ${JSON.stringify(wsPath)});
  ws.onmessage = (event) => {
    const data = JSON.parse(event.data);
    if (connected) iframe.contentWindow.postMessage(data, "*");
    else buffer.push(data);
  };
</script>
</body>
</html>
`;
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
