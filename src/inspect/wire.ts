// Conversion of XState inspection events into the JSON messages of the @statelyai/inspect
// protocol (internal to src/inspect; server.ts is the public entry point).
//
// The message shapes mirror `convertXStateEvent` in @statelyai/inspect 0.7.2
// (node_modules/@statelyai/inspect/dist/index.mjs), field for field; test/inspect checks them
// against that library's own `createInspector` output. Two deliberate differences, both
// additive: `@xstate.actor` also carries `actorId` (the actor's id relative to its parent) and
// `systemId`, which their protocol lacks and our page needs to name spawned children; and
// values are made JSON-safe with size limits (their serialiser only limits depth, so a context
// holding a 1M-element typed array would produce megabytes per snapshot).
import type { InspectionEvent } from "xstate";

/** `_version` their receivers require (`isStatelyInspectionEvent` checks for a string). */
export const PROTOCOL_VERSION = "0.7.2";

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface JsonLimits {
  depth: number; // deeper objects/arrays become "[Object]" / "[Array]" (as safe-stable-stringify does)
  maxArray: number; // longer arrays and typed arrays become { $array, length }
  maxKeys: number; // objects keep their first maxKeys keys
  maxString: number; // longer strings are cut
  maxNodes: number; // budget for the whole value: past it, values become "[Truncated]"
  maxChars: number; // budget for all strings and keys together, same effect: bounds the message size
}

/** Limits for snapshots and event payloads (sent many times a second). */
export function snapshotLimits(depth: number): JsonLimits {
  return { depth, maxArray: 64, maxKeys: 100, maxString: 2000, maxNodes: 4000, maxChars: 100_000 };
}

/** Limits for machine definitions (sent once per actor, cached per logic). */
function definitionLimits(depth: number): JsonLimits {
  return { depth, maxArray: 10_000, maxKeys: 10_000, maxString: 100_000, maxNodes: 100_000, maxChars: 2_000_000 };
}

interface WireBase {
  sessionId: string;
  rootId?: string;
  _version: string;
  createdAt: string; // ms since epoch, as a string (their format)
  id: null;
}
export interface WireActor extends WireBase {
  type: "@xstate.actor";
  name: string;
  definition?: string; // the machine config as a JSON string (their format)
  parentId?: string;
  snapshot: Json;
  actorId?: string; // addition: ActorRef.id
  systemId?: string; // addition: the actor's systemId, if any
}
export interface WireEvent extends WireBase {
  type: "@xstate.event";
  event: Json;
  sourceId?: string;
}
export interface WireSnapshot extends WireBase {
  type: "@xstate.snapshot";
  event: Json;
  snapshot: Json;
}
export type WireMessage = WireActor | WireEvent | WireSnapshot;

/** The parts of XState's Actor class the protocol needs; the public ActorRefLike type hides them. */
interface ActorInternals {
  sessionId: string;
  id?: string;
  systemId?: string;
  _parent?: { sessionId: string };
  logic?: { config?: unknown };
  getSnapshot(): unknown;
}

/** Converts one inspection event; undefined for the types the protocol does not carry. */
export function toWire(ev: InspectionEvent, at: number, depth: number): WireMessage | undefined {
  try {
    return convert(ev, at, depth);
  } catch (err) {
    return reduced(ev, at, err);
  }
}

function convert(ev: InspectionEvent, at: number, depth: number): WireMessage | undefined {
  const ref = ev.actorRef as ActorInternals;
  const base: WireBase = { sessionId: ref.sessionId, rootId: ev.rootId, _version: PROTOCOL_VERSION, createdAt: String(at), id: null };
  const limits = snapshotLimits(depth);
  switch (ev.type) {
    case "@xstate.actor": {
      const config = ref.logic?.config;
      const configId = isObject(config) && typeof config.id === "string" ? config.id : undefined;
      // Their naming rule: the actor's id, or the machine id when the id is just the session id.
      let name = ref.id ?? ref.sessionId;
      if (name === ref.sessionId && configId !== undefined) name = configId;
      return {
        type: "@xstate.actor",
        ...base,
        name,
        definition: definitionOf(config, name, depth),
        parentId: ref._parent?.sessionId,
        snapshot: snapshotJson(ref.getSnapshot(), limits),
        actorId: ref.id,
        systemId: typeof ref.systemId === "string" ? ref.systemId : undefined,
      };
    }
    case "@xstate.event":
      return { type: "@xstate.event", ...base, event: eventJson(ev.event, limits), sourceId: ev.sourceRef?.sessionId };
    case "@xstate.snapshot":
      return { type: "@xstate.snapshot", ...base, event: eventJson(ev.event, limits), snapshot: snapshotJson(ev.snapshot, limits) };
    default:
      return undefined; // @xstate.microstep / .action / .transition: their protocol drops them too
  }
}

/** Stand-in when conversion threw (a throwing getter, a hostile proxy): still tells the viewer something happened. */
function reduced(ev: InspectionEvent, at: number, err: unknown): WireMessage | undefined {
  const sessionId = attempt(() => String(ev.actorRef.sessionId)) ?? "unknown";
  const base: WireBase = { sessionId, rootId: attempt(() => String(ev.rootId)), _version: PROTOCOL_VERSION, createdAt: String(at), id: null };
  const error = `[unserializable: ${attempt(() => String((err as Error)?.message ?? err)) ?? "?"}]`.slice(0, 300);
  const eventType = attempt(() => String((ev as { event?: { type?: unknown } }).event?.type ?? "")) ?? "";
  const status = attempt(() => {
    const s = (ev as { snapshot?: { status?: unknown } }).snapshot?.status;
    return typeof s === "string" ? s : undefined;
  });
  switch (attempt(() => ev.type)) {
    case "@xstate.actor":
      return { type: "@xstate.actor", ...base, name: sessionId, definition: JSON.stringify({ id: sessionId }), snapshot: { status: "active", error } };
    case "@xstate.event":
      return { type: "@xstate.event", ...base, event: { type: eventType, error } };
    case "@xstate.snapshot":
      return { type: "@xstate.snapshot", ...base, event: { type: eventType }, snapshot: { status: status ?? "active", error } };
    default:
      return undefined;
  }
}

function snapshotJson(snapshot: unknown, limits: JsonLimits): Json {
  const json = toJson(snapshot, limits);
  // Receivers read snapshot.status/value/context: never hand them a bare string.
  return isObject(json) && !Array.isArray(json) ? json : { status: "active", error: `[unserializable snapshot: ${String(json)}]` };
}

function eventJson(event: unknown, limits: JsonLimits): Json {
  const json = toJson(event, limits);
  return isObject(json) && !Array.isArray(json) ? json : { type: String(json ?? "") };
}

// A machine's definition is the same for every actor of that machine (one per token!): stringify once.
const definitionCache = new WeakMap<object, string>();
function definitionOf(config: unknown, name: string, depth: number): string {
  if (!isObject(config)) return JSON.stringify({ id: name });
  let def = definitionCache.get(config);
  if (def === undefined) {
    def = JSON.stringify(toJson(config, definitionLimits(depth)) ?? null);
    definitionCache.set(config, def);
  }
  return def;
}

/**
 * A JSON-safe copy of `value` within `limits`. Never throws: cycles become "[Circular]",
 * functions `{ type: name }` (their safeReplacer), errors `{ name, message }`, big arrays and
 * typed arrays a summary. Returns undefined where JSON would omit the value.
 */
export function toJson(value: unknown, limits: JsonLimits): Json | undefined {
  return walk(value, 0, limits, { nodes: 0, chars: 0, ancestors: new Set<object>() }, true);
}

interface WalkState {
  nodes: number;
  chars: number;
  ancestors: Set<object>; // the objects on the current path, for cycles
}

function walk(value: unknown, depth: number, limits: JsonLimits, st: WalkState, useToJSON: boolean): Json | undefined {
  if (++st.nodes > limits.maxNodes || st.chars > limits.maxChars) return "[Truncated]";
  switch (typeof value) {
    case "string":
      st.chars += Math.min(value.length, limits.maxString);
      return value.length <= limits.maxString ? value : `${value.slice(0, limits.maxString)}…(+${value.length - limits.maxString} chars)`;
    case "number":
      return Number.isFinite(value) ? value : null;
    case "boolean":
      return value;
    case "bigint":
      return Number.isSafeInteger(Number(value)) ? Number(value) : value.toString();
    case "function":
      return { type: value.name };
    case "undefined":
    case "symbol":
      return undefined;
  }
  if (value === null) return null;
  const obj = value as object;
  if (st.ancestors.has(obj)) return "[Circular]";
  try {
    if (ArrayBuffer.isView(obj)) return typedArrayJson(obj, depth, limits, st);
    if (obj instanceof ArrayBuffer || (typeof SharedArrayBuffer !== "undefined" && obj instanceof SharedArrayBuffer)) {
      return { $array: obj.constructor.name, byteLength: obj.byteLength };
    }
    if (obj instanceof Map || obj instanceof Set) return { [`$${obj.constructor.name.toLowerCase()}`]: obj.constructor.name, size: obj.size };
    if (obj instanceof Error) return { name: obj.name, message: obj.message };
    const toJSON = useToJSON ? (obj as { toJSON?: unknown }).toJSON : undefined;
    if (typeof toJSON === "function") {
      st.ancestors.add(obj);
      try {
        return walk(toJSON.call(obj), depth, limits, st, false);
      } finally {
        st.ancestors.delete(obj);
      }
    }
    if (Array.isArray(obj)) {
      if (depth >= limits.depth) return "[Array]";
      if (obj.length > limits.maxArray) return { $array: "Array", length: obj.length };
      st.ancestors.add(obj);
      try {
        return obj.map((item: unknown) => walk(item, depth + 1, limits, st, true) ?? null);
      } finally {
        st.ancestors.delete(obj);
      }
    }
    if (depth >= limits.depth) return "[Object]";
    st.ancestors.add(obj);
    try {
      const out: { [key: string]: Json } = {};
      const keys = Object.keys(obj);
      const n = Math.min(keys.length, limits.maxKeys);
      for (let i = 0; i < n; i++) {
        const key = keys[i]!;
        st.chars += key.length;
        let item: Json | undefined;
        try {
          item = walk((obj as Record<string, unknown>)[key], depth + 1, limits, st, true);
        } catch {
          item = "[Unserializable]"; // a throwing getter
        }
        if (item !== undefined) out[key] = item;
      }
      if (keys.length > n) out["…"] = `${keys.length - n} more keys`;
      return out;
    } finally {
      st.ancestors.delete(obj);
    }
  } catch {
    return "[Unserializable]"; // e.g. a proxy whose traps throw
  }
}

function typedArrayJson(view: ArrayBufferView, depth: number, limits: JsonLimits, st: WalkState): Json {
  const kind = view.constructor.name;
  if (view instanceof DataView) return { $array: kind, byteLength: view.byteLength };
  const items = view as unknown as ArrayLike<number | bigint>;
  if (items.length > limits.maxArray || depth >= limits.depth) return { $array: kind, length: items.length };
  st.nodes += items.length;
  return Array.from(items, (x) => (typeof x === "bigint" ? x.toString() : Number.isFinite(x) ? x : null));
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null;
}

function attempt<T>(f: () => T): T | undefined {
  try {
    return f();
  } catch {
    return undefined;
  }
}
