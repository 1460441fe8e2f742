// Test helpers: a raw `ws` viewer that records the inspection messages it receives.
import { WebSocket } from "ws";

/** An inspection message as it arrives on the wire (the @statelyai/inspect format). */
export interface Msg {
  type: string;
  sessionId: string;
  name?: string;
  actorId?: string;
  systemId?: string;
  parentId?: string;
  rootId?: string;
  sourceId?: string;
  definition?: string;
  _version?: string;
  createdAt?: string;
  id?: null;
  event?: { type: string; [key: string]: unknown };
  snapshot?: { status?: string; value?: unknown; context?: Record<string, unknown>; error?: unknown; [key: string]: unknown };
}

export interface Viewer {
  ws: WebSocket;
  msgs: Msg[];
  /** The actor message of the actor known by `name` (systemId, id or machine name). */
  actor(name: string): Msg | undefined;
  closed: Promise<void>;
}

export async function connectViewer(url: string, headers?: Record<string, string>): Promise<Viewer> {
  const ws = new WebSocket(url, { headers });
  const msgs: Msg[] = [];
  ws.on("message", (data, isBinary) => {
    if (!isBinary) msgs.push(JSON.parse(data.toString()) as Msg);
  });
  const closed = new Promise<void>((resolve) => ws.on("close", () => resolve()));
  await new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("error", reject);
  });
  const actor = (name: string) =>
    msgs.find((m) => m.type === "@xstate.actor" && (m.systemId === name || m.actorId === name || m.name === name));
  return { ws, msgs, actor, closed };
}
