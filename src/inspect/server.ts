// Live inspector: one HTTP server on 127.0.0.1 that serves a page showing an XState actor
// system live and streams the standard XState inspection events over a WebSocket, in the
// protocol of @statelyai/inspect (so their receivers and bridge page work against it).
//
// Endpoints (one port, PORT):
//   GET  http://127.0.0.1:PORT/            neuronpipe's own page (page.ts); no external resources
//   WS   ws://127.0.0.1:PORT/ws            inspection stream (`wsUrl`); `ws://127.0.0.1:PORT/` is
//                                          accepted too, because Stately's bridge page connects
//                                          to the bare host:port
//   GET  http://127.0.0.1:PORT/stately     Stately's bridge page (their inspector UI in an iframe,
//                                          fed from /ws; needs the internet in that browser)
//   GET  http://127.0.0.1:PORT/stats.json  counters: received, published, dropped, clients, ...
//
// The WebSocket speaks the protocol of @statelyai/inspect/server: every text frame is one JSON
// inspection message (@xstate.actor, @xstate.event, @xstate.snapshot; see wire.ts), and, as in
// their relay, any message a client sends is relayed to every other client. So:
//   - a viewer: `createWebSocketReceiver({ server: inspector.wsUrl })` from @statelyai/inspect,
//     the page above, or Stately's UI via /stately;
//   - another process as a source: `createWebSocketInspector({ url: inspector.wsUrl })`, passed
//     as `inspect` to its own createActor.
// A client joining mid-run first gets, for every tracked actor, its @xstate.actor and latest
// @xstate.snapshot, then the last `maxBufferedEvents` messages, so it sees the current state at once.
//
// Their own `@statelyai/inspect/server` bridge cannot be pointed at this port (its page connects
// to its own port), hence /stately. Alternatively a user can run their createInspectorServer()
// and add `actor.system.inspect(createWebSocketInspector({ url: "ws://localhost:8080" }).inspect)`.
//
// Why not run their `createWebSocketInspector` in-process and relay it: it converts each event in
// its own setTimeout (one timer per event in a decode loop), serialises every snapshot twice,
// bounds depth but not size (a typed array in a context becomes megabytes of JSON per snapshot),
// and retries a failed socket forever every 5 s. wire.ts builds the same messages directly and
// the tests compare them with their `createInspector` output.
//
// Usage (CLI): `const inspector = await startInspector({ port: 4000 }); console.log(inspector.url);
// createActor(machine, { inspect: inspector.inspect }).start(); ... await inspector.close();`
// The listening server keeps the process alive until close().
import http from "node:http";
import type { Duplex } from "node:stream";
import { WebSocket, WebSocketServer } from "ws";
import type { InspectionEvent, Observer } from "xstate";
import { renderInspectorPage, renderStatelyBridgePage } from "./page.js";
import { toWire } from "./wire.js";

export interface InspectorOptions {
  /** Default 0: any free port. */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /** Shown in the page's header. */
  title?: string;
  /** Messages kept for clients that join late (default 2000). */
  maxBufferedEvents?: number;
}

export interface Inspector {
  /** http://127.0.0.1:PORT/ (the page) */
  readonly url: string;
  /** ws://127.0.0.1:PORT/ws where inspection events are streamed */
  readonly wsUrl: string;
  readonly port: number;
  /** The XState inspection observer: pass to createActor(logic, { inspect }) or actorRef.system.inspect(inspector.observer). Never throws. */
  readonly observer: Observer<InspectionEvent>;
  /** Also usable as a plain function (what XState docs pass as `inspect`). */
  readonly inspect: (ev: InspectionEvent) => void;
  /** Resolves once a viewer (a page, a receiver) is connected, or after `timeoutMs` (false). */
  waitForViewer(timeoutMs?: number): Promise<boolean>;
  close(): Promise<void>;
}

const WS_PATH = "/ws";
const SERIALIZATION_DEPTH = 10; // their default serializationDepthLimit
const FLUSH_MS = 16; // events are converted and sent in batches, at most this often
const MAX_PENDING = 1000; // per batch (≤ ~60k messages/s); past it snapshots are coalesced per actor, events dropped
const MAX_BUFFER_BYTES = 8 << 20; // the late-joiner ring is also bounded in bytes
const MAX_ENDED_ACTORS = 20; // ended actors remembered for late joiners (one actor per token!)
const MAX_TRACKED_ACTORS = 5000;
const MAX_CLIENT_BACKLOG = 32 << 20; // a client this far behind is dropped (it reconnects and gets the replay); above the replay size
const MAX_INCOMING = 4 << 20;
const KNOWN_TYPES = new Set(["@xstate.actor", "@xstate.event", "@xstate.snapshot"]);

interface Entry {
  seq: number;
  json: string;
}
interface Tracked {
  actor?: Entry;
  snapshot?: Entry;
  ended: boolean;
}
/** What the server reads from a message, whether built here or received from a client. */
interface MessageHead {
  type: string;
  sessionId: string;
  snapshot?: unknown;
}
interface Pending {
  ev: InspectionEvent;
  at: number;
}

/** Last N messages, bounded in count and bytes. */
class Ring {
  private items: Entry[] = [];
  private head = 0;
  private bytes = 0;
  constructor(private readonly capacity: number, private readonly maxBytes: number) {}
  push(e: Entry): void {
    this.items.push(e);
    this.bytes += e.json.length;
    while (this.items.length - this.head > this.capacity || (this.bytes > this.maxBytes && this.items.length - this.head > 1)) {
      this.bytes -= this.items[this.head]!.json.length;
      this.head++;
    }
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head); // compact now and then instead of shift() per push
      this.head = 0;
    }
  }
  /** Sequence number of the oldest message kept (Infinity when empty). */
  get firstSeq(): number {
    return this.items[this.head]?.seq ?? Infinity;
  }
  get size(): number {
    return this.items.length - this.head;
  }
  *[Symbol.iterator](): IterableIterator<Entry> {
    for (let i = this.head; i < this.items.length; i++) yield this.items[i]!;
  }
}

export async function startInspector(opts: InspectorOptions = {}): Promise<Inspector> {
  const host = opts.host ?? "127.0.0.1";
  const title = opts.title ?? "neuronpipe inspector";
  const ring = new Ring(Math.max(1, opts.maxBufferedEvents ?? 2000), MAX_BUFFER_BYTES);
  const tracked = new Map<string, Tracked>(); // insertion order = creation order
  const endedOrder: string[] = [];
  const clients = new Set<WebSocket>();
  const stats = { received: 0, published: 0, dropped: 0, coalesced: 0, relayed: 0, clients: 0, actors: 0, buffered: 0 };
  let seq = 0;
  let closed = false;

  // ---- observer side: cheap, never throws; conversion happens in flush() ----
  let pending: Pending[] = [];
  const coalesced = new Map<string, Pending>(); // latest snapshot per actor while over budget
  let timer: NodeJS.Timeout | undefined;

  const inspect = (ev: InspectionEvent): void => {
    try {
      if (closed) return;
      const type = ev.type;
      if (type !== "@xstate.actor" && type !== "@xstate.event" && type !== "@xstate.snapshot") return;
      stats.received++;
      const item = { ev, at: Date.now() };
      if (pending.length < MAX_PENDING) {
        // A queued snapshot is newer than a coalesced one of the same actor.
        if (type === "@xstate.snapshot" && coalesced.size > 0) coalesced.delete(ev.actorRef.sessionId);
        pending.push(item);
      } else if (type === "@xstate.snapshot") {
        coalesced.set(ev.actorRef.sessionId, item); // keep the state right, lose the steps in between
        stats.coalesced++;
      } else if (type === "@xstate.actor" && pending.length < MAX_PENDING * 4) {
        pending.push(item); // an actor message is needed to show the actor at all
      } else {
        stats.dropped++;
      }
      timer ??= setTimeout(flush, FLUSH_MS).unref();
    } catch {
      // inspection must never break the inspected system
    }
  };
  const observer: Observer<InspectionEvent> = { next: inspect, error: () => {}, complete: () => {} };

  function flush(): void {
    timer = undefined;
    const batch = pending;
    pending = [];
    const late = [...coalesced.values()]; // after the batch: they are newer than anything queued for their actor
    coalesced.clear();
    for (const { ev, at } of [...batch, ...late]) {
      if (closed) return;
      try {
        const msg = toWire(ev, at, SERIALIZATION_DEPTH);
        if (msg) publish(msg, JSON.stringify(msg));
      } catch {
        stats.dropped++; // a timer callback must not throw: it would take the process down
      }
    }
  }

  // ---- relay side ----
  function publish(head: MessageHead, json: string, from?: WebSocket): void {
    const entry = { seq: ++seq, json };
    ring.push(entry);
    track(head, entry);
    stats.published++;
    for (const c of clients) if (c !== from) send(c, json);
  }

  function track(head: MessageHead, entry: Entry): void {
    if (head.type === "@xstate.event") return;
    let t = tracked.get(head.sessionId);
    if (!t) {
      if (tracked.size >= MAX_TRACKED_ACTORS) tracked.delete(tracked.keys().next().value!);
      t = { ended: false };
      tracked.set(head.sessionId, t);
    }
    if (head.type === "@xstate.actor") t.actor = entry;
    else t.snapshot = entry;
    const status = (head.snapshot as { status?: unknown } | undefined)?.status;
    const ended = typeof status === "string" && status !== "active";
    if (ended && !t.ended) {
      t.ended = true;
      endedOrder.push(head.sessionId);
      while (endedOrder.length > MAX_ENDED_ACTORS) {
        const old = endedOrder.shift()!;
        if (tracked.get(old)?.ended) tracked.delete(old);
      }
    } else if (!ended && t.ended && head.type === "@xstate.snapshot") {
      t.ended = false; // restarted; its stale endedOrder entry is skipped by the check above
    }
  }

  function send(c: WebSocket, json: string): void {
    if (c.readyState !== WebSocket.OPEN) return;
    if (c.bufferedAmount > MAX_CLIENT_BACKLOG) {
      c.terminate(); // bounded memory: a stalled viewer reconnects and is brought up to date by the replay
      return;
    }
    c.send(json);
  }

  /** Late joiner: actors whose messages fell out of the ring first, then the ring in order. */
  function replay(c: WebSocket): void {
    const first = ring.firstSeq;
    for (const t of tracked.values()) {
      if (t.actor && t.actor.seq < first) send(c, t.actor.json);
      if (t.snapshot && t.snapshot.seq < first) send(c, t.snapshot.json);
    }
    for (const e of ring) send(c, e.json);
  }

  /** A client acting as a source (their createWebSocketInspector): relay its messages like their server does. */
  function receive(text: string, from: WebSocket): void {
    let head: unknown;
    try {
      head = JSON.parse(text);
    } catch {
      return;
    }
    const h = head as Partial<MessageHead> | null;
    if (!h || typeof h.type !== "string" || !KNOWN_TYPES.has(h.type) || typeof h.sessionId !== "string") return;
    stats.relayed++;
    publish(h as MessageHead, text, from);
  }

  // ---- HTTP + WebSocket on one port ----
  const allowedHosts = new Set(["127.0.0.1", "localhost", "[::1]", host.includes(":") ? `[${host}]` : host]);
  const anyHost = host === "0.0.0.0" || host === "::";
  // Blocks DNS rebinding and cross-site pages reading the stream (contexts may hold prompt text).
  const hostOk = (value: string | undefined): boolean => {
    if (anyHost) return true;
    if (!value) return false;
    try {
      return allowedHosts.has(new URL(`http://${value}`).hostname);
    } catch {
      return false;
    }
  };
  const originOk = (origin: string | undefined): boolean => {
    if (origin === undefined) return true; // not a browser
    try {
      return hostOk(new URL(origin).host);
    } catch {
      return false;
    }
  };

  const server = http.createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    if (!hostOk(req.headers.host)) return reply(res, 403, "text/plain", "forbidden host\n");
    if (req.method !== "GET" && req.method !== "HEAD") return reply(res, 405, "text/plain", "method not allowed\n");
    if (path === "/" || path === "/index.html") {
      const csp = `default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self' ws://${req.headers.host}`;
      return reply(res, 200, "text/html; charset=utf-8", renderInspectorPage({ title, wsPath: WS_PATH }), { "content-security-policy": csp });
    }
    if (path === "/stately") return reply(res, 200, "text/html; charset=utf-8", renderStatelyBridgePage({ wsPath: WS_PATH }));
    if (path === "/stats.json") {
      Object.assign(stats, { clients: clients.size, actors: tracked.size, buffered: ring.size });
      return reply(res, 200, "application/json", JSON.stringify(stats));
    }
    reply(res, 404, "text/plain", "not found\n");
  });

  const viewerWaiters: ((connected: boolean) => void)[] = [];
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_INCOMING, perMessageDeflate: false });
  server.on("upgrade", (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    const path = (req.url ?? "/").split("?")[0];
    if (closed || (path !== WS_PATH && path !== "/") || !hostOk(req.headers.host) || !originOk(req.headers.origin)) {
      socket.end("HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\n");
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      clients.add(ws);
      for (const w of viewerWaiters.splice(0)) w(true);
      ws.on("close", () => clients.delete(ws));
      ws.on("error", () => clients.delete(ws));
      ws.on("message", (data, isBinary) => {
        if (!isBinary) receive(data.toString(), ws);
      });
      replay(ws);
    });
  });

  await new Promise<void>((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException) => {
      reject(err.code === "EADDRINUSE" ? new Error(`inspector: port ${opts.port} on ${host} is already in use`) : err);
    };
    server.once("error", onError);
    server.listen(opts.port ?? 0, host, () => {
      server.off("error", onError);
      resolve();
    });
  });
  server.on("error", () => {}); // after listen: nothing useful to do with a late server error
  const port = (server.address() as { port: number }).port;
  const urlHost = host.includes(":") ? `[${host}]` : host;

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      closed = true;
      for (const w of viewerWaiters.splice(0)) w(false);
      if (timer) clearTimeout(timer);
      pending = [];
      coalesced.clear();
      for (const c of clients) c.terminate();
      clients.clear();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    })());

  return {
    url: `http://${urlHost}:${port}/`,
    wsUrl: `ws://${urlHost}:${port}${WS_PATH}`,
    port,
    observer,
    inspect,
    waitForViewer: (timeoutMs = Infinity) =>
      clients.size > 0
        ? Promise.resolve(true)
        : new Promise<boolean>((resolve) => {
            const t = Number.isFinite(timeoutMs) ? setTimeout(() => resolve(false), timeoutMs) : undefined;
            viewerWaiters.push((ok) => {
              if (t) clearTimeout(t);
              resolve(ok);
            });
          }),
    close,
  };
}

function reply(res: http.ServerResponse, status: number, type: string, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "content-type": type, "cache-control": "no-store", ...headers });
  res.end(body);
}
