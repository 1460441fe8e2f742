import net from "node:net";
import { createInspector, createWebSocketInspector, createWebSocketReceiver, type StatelyInspectionEvent } from "@statelyai/inspect";
import { afterEach, describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import { assign, createActor, setup } from "xstate";
import { startInspector, type Inspector } from "../../src/inspect/server.js";
import { connectViewer, type Msg } from "./helpers.js";
import { startMiniSystem, waitFor } from "./mini-system.js";

const open: Array<{ stop(): void }> = [];
const inspectors: Inspector[] = [];
afterEach(async () => {
  open.splice(0).forEach((a) => a.stop());
  await Promise.all(inspectors.splice(0).map((i) => i.close()));
});

async function start(opts?: Parameters<typeof startInspector>[0]): Promise<Inspector> {
  const inspector = await startInspector(opts);
  inspectors.push(inspector);
  return inspector;
}

describe("inspector server", () => {
  it("listens on 127.0.0.1 and serves the page, the Stately bridge and stats", async () => {
    const inspector = await start({ title: "mini <pipeline>" });
    expect(inspector.url).toBe(`http://127.0.0.1:${inspector.port}/`);
    expect(inspector.wsUrl).toBe(`ws://127.0.0.1:${inspector.port}/ws`);
    const page = await fetch(inspector.url);
    expect(page.headers.get("content-type")).toContain("text/html");
    const html = await page.text();
    expect(html).toContain("mini &#60;pipeline&#62;");
    expect(html).not.toMatch(/<(script|link|img)[^>]+(src|href)=/); // self-contained
    expect(await (await fetch(inspector.url + "stately")).text()).toContain("stately.ai/inspect");
    expect(await (await fetch(inspector.url + "stats.json")).json()).toMatchObject({ published: 0, clients: 0 });
    expect((await fetch(inspector.url + "nope")).status).toBe(404);
  });

  it("(a) streams @xstate.actor, @xstate.event and @xstate.snapshot JSON to a raw ws client", async () => {
    const inspector = await start();
    const viewer = await connectViewer(inspector.wsUrl);
    open.push(startMiniSystem(inspector.inspect));
    await waitFor(
      () => viewer.msgs.some((m) => m.type === "@xstate.snapshot" && m.snapshot?.status === "done" && viewer.actor("token")?.sessionId === m.sessionId),
      "a finished token machine",
    );
    const root = viewer.actor("pipeline")!;
    const io = viewer.actor("io-loader")!;
    const compute = viewer.actor("compute:big")!;
    const token = viewer.actor("token")!;
    for (const a of [root, io, compute, token]) {
      expect(a).toMatchObject({ type: "@xstate.actor", _version: "0.7.2", id: null, rootId: root.sessionId });
      expect(a.createdAt).toMatch(/^\d+$/);
      expect(typeof JSON.parse(a.definition!)).toBe("object");
    }
    expect(root).toMatchObject({ name: "pipeline" });
    expect(root.parentId).toBeUndefined();
    expect(io).toMatchObject({ name: "ioLoader", systemId: "io-loader", parentId: root.sessionId });
    expect(compute).toMatchObject({ name: "compute", systemId: "compute:big", parentId: root.sessionId });
    expect(token).toMatchObject({ name: "token", actorId: "token", parentId: root.sessionId });
    expect(JSON.parse(token.definition!)).toMatchObject({ id: "token", initial: "front" });

    const tokenSnaps = viewer.msgs.filter((m) => m.type === "@xstate.snapshot" && m.sessionId === token.sessionId);
    expect(tokenSnaps.map((m) => m.snapshot!.value)).toEqual(["front", "reads", "back", "reads", "back", "logits", "done"]);
    expect(tokenSnaps.map((m) => m.snapshot!.context!.layer)).toEqual([0, 0, 0, 1, 1, 1, 1]);
    expect(tokenSnaps[0]).toMatchObject({ _version: "0.7.2", id: null, rootId: root.sessionId, event: { type: "xstate.init" } });
    // io-loader receives READ from the token machine: source and target are both named.
    const read = viewer.msgs.find((m) => m.type === "@xstate.event" && m.event?.type === "READ");
    expect(read).toMatchObject({ sessionId: io.sessionId, sourceId: token.sessionId, _version: "0.7.2", id: null });
  });

  it("(a) sends the same messages as @statelyai/inspect's own createInspector", async () => {
    const inspector = await start();
    const viewer = await connectViewer(inspector.wsUrl);
    const theirs: StatelyInspectionEvent[] = [];
    const reference = createInspector({ send: (e) => theirs.push(JSON.parse(JSON.stringify(e)) as StatelyInspectionEvent) });
    const counter = setup({ types: { context: {} as { n: number; label: string } } }).createMachine({
      id: "counter",
      initial: "low",
      context: { n: 0, label: "x" },
      states: {
        low: { on: { INC: { target: "high", actions: assign({ n: ({ context }) => context.n + 1 }) } } },
        high: { on: { INC: { target: "low", actions: assign({ n: ({ context }) => context.n + 1 }) } } },
      },
    });
    const actor = createActor(counter, { inspect: (e) => (reference.inspect.next?.(e), inspector.inspect(e)) }).start();
    for (let i = 0; i < 3; i++) actor.send({ type: "INC", by: i });
    await waitFor(() => viewer.msgs.length >= theirs.length && theirs.length >= 8, "both inspectors");

    expect(viewer.msgs.map((m) => m.type)).toEqual(theirs.map((m) => m.type));
    viewer.msgs.forEach((ours, i) => {
      const { createdAt: _a, actorId, systemId, definition, ...rest } = ours;
      const { createdAt: _b, definition: theirDefinition, ...expected } = theirs[i] as StatelyInspectionEvent & { definition?: string };
      expect(rest).toEqual(expected);
      if (ours.type === "@xstate.actor") {
        expect(JSON.parse(definition!)).toEqual(JSON.parse(theirDefinition!)); // same object, key order aside
        expect(actorId).toBe(actor.id);
        expect(systemId).toBeUndefined();
      }
    });
  });

  it("(b) createWebSocketReceiver from @statelyai/inspect receives the events", async () => {
    const inspector = await start();
    // The system runs first: the receiver is brought up to date by the replay, then follows live.
    open.push(startMiniSystem(inspector.observer));
    const received: StatelyInspectionEvent[] = [];
    createWebSocketReceiver({ server: inspector.wsUrl }).subscribe((e) => received.push(e as StatelyInspectionEvent));
    const types = () => new Set(received.map((e) => e.type));
    await waitFor(() => types().has("@xstate.actor") && types().has("@xstate.snapshot") && types().has("@xstate.event"), "receiver events");
    const names = received.filter((e) => e.type === "@xstate.actor").map((e) => (e as { name: string }).name);
    expect(names).toEqual(expect.arrayContaining(["pipeline", "ioLoader", "compute"]));
    const snap = received.find((e) => e.type === "@xstate.snapshot")!;
    expect(snap).toMatchObject({ _version: "0.7.2", snapshot: { status: "active" } });
  });

  it("(c) a client connecting late gets every live actor and its current snapshot", async () => {
    const inspector = await start({ maxBufferedEvents: 20 }); // the start of the run falls out of the ring
    const early = await connectViewer(inspector.wsUrl);
    open.push(startMiniSystem(inspector.inspect));
    await waitFor(() => early.msgs.filter((m) => m.type === "@xstate.actor" && m.name === "token").length >= 4, "four tokens");
    // the fourth token actor can appear before the pipeline's snapshot counts it: wait for that too
    // (under load the late client once connected in between and saw token 3)
    await waitFor(() => {
      const root = early.actor("pipeline");
      return !!root && early.msgs.some((m) => m.type === "@xstate.snapshot" && m.sessionId === root.sessionId && Number(m.snapshot?.context?.token) >= 4);
    }, "token 4 in the pipeline's snapshot");
    const late = await connectViewer(inspector.wsUrl);
    await waitFor(() => ["pipeline", "io-loader", "compute:big"].every((n) => late.actor(n)), "replayed actors");
    for (const name of ["pipeline", "io-loader", "compute:big"]) {
      const actor = late.actor(name)!;
      const at = late.msgs.indexOf(actor);
      // Its snapshot follows its actor message, and is the one the early client saw last (the run goes on: compare with a prefix).
      const snaps = late.msgs.filter((m) => m.type === "@xstate.snapshot" && m.sessionId === actor.sessionId);
      expect(snaps.length).toBeGreaterThan(0);
      expect(late.msgs.indexOf(snaps[0]!)).toBeGreaterThan(at);
    }
    // The replay arrives in one burst: a later message for an early actor is its real current state.
    const rootId = late.actor("pipeline")!.sessionId;
    const firstRootSnap = late.msgs.find((m) => m.type === "@xstate.snapshot" && m.sessionId === rootId)!;
    expect(firstRootSnap.snapshot!.value).toBe("decoding");
    expect(Number(firstRootSnap.snapshot!.context!.token)).toBeGreaterThanOrEqual(4);
    // Ended token actors are kept for late joiners only up to a bound.
    const tokenActors = late.msgs.filter((m) => m.type === "@xstate.actor" && m.name === "token");
    expect(tokenActors.length).toBeLessThanOrEqual(25);
  });

  it("(d) unserialisable snapshots do not throw into XState and still reach the client", async () => {
    const inspector = await start();
    const viewer = await connectViewer(inspector.wsUrl);
    const self: Record<string, unknown> = { token: 7 };
    self.self = self;
    const hostile = new Proxy({}, { ownKeys: () => { throw new Error("no keys for you"); } });
    const ugly = setup({}).createMachine({
      id: "ugly",
      context: () => ({ token: 7, circular: self, logits: new Float32Array(1_000_000), fn: function sampler() {}, big: 2n ** 70n, hostile, list: Array.from({ length: 500 }, (_, i) => i), prompt: "p".repeat(1_000_000) }),
    });
    open.push(createActor(ugly, { inspect: inspector.observer }).start());

    // Direct calls with broken events: the observer swallows everything.
    const brokenRef = { get sessionId(): string { throw new Error("boom"); }, send() {}, getSnapshot() { return {}; } };
    expect(() => inspector.inspect({ type: "@xstate.snapshot", actorRef: brokenRef, rootId: "r", event: { type: "x" }, snapshot: { status: "active" } as never })).not.toThrow();
    const trap = new Proxy({}, { get() { throw new Error("trap"); }, ownKeys() { throw new Error("trap"); } });
    const ref = { sessionId: "fake:1", send() {}, getSnapshot: () => trap };
    expect(() => inspector.inspect({ type: "@xstate.snapshot", actorRef: ref, rootId: "r", event: { type: "TICK" }, snapshot: trap as never })).not.toThrow();
    expect(() => inspector.observer.next!({ type: "@xstate.actor", actorRef: ref, rootId: "r" })).not.toThrow();
    expect(() => inspector.inspect(null as never)).not.toThrow();

    await waitFor(() => viewer.msgs.some((m) => m.sessionId === "fake:1" && m.type === "@xstate.snapshot") && !!viewer.actor("ugly"), "messages");
    const ctx = viewer.actor("ugly")!.snapshot!.context!;
    expect(ctx).toMatchObject({
      token: 7,
      circular: { token: 7, self: "[Circular]" },
      logits: { $array: "Float32Array", length: 1_000_000 },
      fn: { type: "sampler" },
      big: "1180591620717411303424",
      hostile: {},
      list: { $array: "Array", length: 500 },
    });
    expect(String(ctx.prompt)).toMatch(/^p{2000}…\(\+998000 chars\)$/);
    const fake = viewer.msgs.find((m) => m.sessionId === "fake:1" && m.type === "@xstate.snapshot")!;
    expect(fake).toMatchObject({ event: { type: "TICK" }, snapshot: { status: "active" } });
    expect(String(fake.snapshot!.error)).toContain("unserializable");
    expect(viewer.msgs.find((m) => m.sessionId === "fake:1" && m.type === "@xstate.actor")).toMatchObject({ name: "fake:1" });
    expect(Math.max(...viewer.msgs.map((m) => JSON.stringify(m).length))).toBeLessThan(64_000);
  });

  it("survives a flood: the observer stays cheap, memory is bounded, the final state arrives", async () => {
    const inspector = await start();
    const viewer = await connectViewer(inspector.wsUrl);
    const counter = setup({ types: { context: {} as { n: number } } }).createMachine({
      id: "flood",
      context: { n: 0 },
      on: { TICK: { actions: assign({ n: ({ context }) => context.n + 1 }) } },
    });
    const actor = createActor(counter, { inspect: inspector.inspect }).start();
    open.push(actor);
    const N = 50_000;
    const t0 = performance.now();
    for (let i = 0; i < N; i++) actor.send({ type: "TICK" });
    const ms = performance.now() - t0;
    expect(ms).toBeLessThan(10_000);
    await waitFor(() => viewer.msgs.some((m) => m.type === "@xstate.snapshot" && m.snapshot?.context?.n === N), "the final snapshot");
    const stats = (await (await fetch(inspector.url + "stats.json")).json()) as Record<string, number>;
    expect(stats.dropped + stats.coalesced).toBeGreaterThan(0);
    expect(stats.published).toBeLessThan(10_000); // bounded per batch, not 2 × N
    expect(stats.buffered).toBeLessThanOrEqual(2000);
    console.log(`flood: ${N} events sent in ${ms.toFixed(0)} ms with the inspector attached; stats ${JSON.stringify(stats)}`);
  });

  it("relays messages from another process's createWebSocketInspector (their source client)", async () => {
    const inspector = await start();
    const viewer = await connectViewer(inspector.wsUrl);
    const source = createWebSocketInspector({ url: inspector.wsUrl });
    open.push(source);
    const remote = setup({}).createMachine({ id: "remote", initial: "a", states: { a: { on: { GO: "b" } }, b: {} } });
    const actor = createActor(remote, { inspect: source.inspect }).start();
    open.push(actor);
    actor.send({ type: "GO" });
    await waitFor(() => viewer.msgs.some((m) => m.type === "@xstate.snapshot" && m.snapshot?.value === "b"), "relayed snapshot");
    expect(viewer.actor("remote")).toMatchObject({ type: "@xstate.actor", _version: "0.7.2" });
    // ... and a viewer connecting afterwards gets them replayed.
    const late = await connectViewer(inspector.wsUrl);
    await waitFor(() => !!late.actor("remote"), "replayed remote actor");
  });

  it("refuses WebSocket connections from other origins", async () => {
    const inspector = await start();
    const ws = new WebSocket(inspector.wsUrl, { headers: { origin: "http://evil.example" } });
    const status = await new Promise<number>((resolve) => {
      ws.on("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
      ws.on("error", () => resolve(-1));
    });
    expect(status).toBe(403);
    const same = await connectViewer(inspector.wsUrl, { origin: inspector.url.slice(0, -1) });
    same.ws.close();
    // The bare host:port is accepted too: Stately's bridge page connects there.
    const bare = await connectViewer(`ws://localhost:${inspector.port}/`);
    bare.ws.close();
  });

  it("reports a busy port clearly", async () => {
    const first = await start();
    await expect(startInspector({ port: first.port })).rejects.toThrow(`inspector: port ${first.port} on 127.0.0.1 is already in use`);
  });

  it("(e) close() closes every socket and frees the port; twice is fine", async () => {
    const inspector = await startInspector();
    const viewer = await connectViewer(inspector.wsUrl);
    const actor = startMiniSystem(inspector.inspect);
    open.push(actor);
    await waitFor(() => viewer.msgs.length > 10, "traffic");
    await Promise.all([inspector.close(), inspector.close()]);
    await inspector.close();
    await viewer.closed;
    expect(() => inspector.inspect({ type: "@xstate.event", actorRef: actor, rootId: actor.sessionId, sourceRef: undefined, event: { type: "late" } })).not.toThrow();
    await expect(fetch(inspector.url)).rejects.toThrow();
    const probe = net.createServer();
    await new Promise<void>((resolve, reject) => {
      probe.once("error", reject);
      probe.listen(inspector.port, "127.0.0.1", () => resolve());
    });
    await new Promise<void>((resolve) => probe.close(() => resolve()));
  });
});
