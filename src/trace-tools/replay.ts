// Replay a recorded generation (a version-2 trace, docs/pipeline.md "Trace format"): the
// machines run again — the session machine, and the pipeline decoder's root with its compute,
// I/O loader, prefill and token machines — with the outside world stubbed (no model file, no
// worker thread, no cache). Everything the outside sent into the machines during the run is in
// the trace as events (a worker's answer, a read landing, the cache's plan, a user's abort, a
// decode request): replay delivers those, in order, to the same actors, and the machines send
// each other what they sent the first time. The states each machine goes through are compared
// with the recorded ones, actor by actor (across actor systems the interleaving depends on when
// the outside sent what; within an actor the order is the machine's).
//
// Which events are delivered: those whose sender is outside the machines — no sender (sent from
// outside an actor system), or a sender that is not a state machine (a callback or promise
// actor: the cache, a prefill or decode-step promise). Events between machines are not: the
// machines regenerate them.
import { createActor, fromCallback, fromPromise, type AnyActorRef, type InspectionEvent } from "xstate";
import { pipelineMachine, type PipelineInput } from "../../actors/pipeline-machine.js";
import { sessionMachine, type DecodeStepInput, type DecodeStepOutput, type PrefillInput } from "../../actors/session-machine.js";
import type { ActorRecord, TraceRecord } from "../trace/recorder.js";
import { actorName, isMachineRef, scalars, stateText } from "../trace/recorder.js";

/** Each actor's states, in order. */
export function byActor(list: readonly ReplayState[]): Map<string, ReplayState[]> {
  const m = new Map<string, ReplayState[]>();
  for (const s of list) {
    let l = m.get(s.actor);
    if (!l) m.set(s.actor, (l = []));
    l.push(s);
  }
  return m;
}

/** Keep a machine's snapshot only when its state or status changed (what the recorder keeps). */
function changes(list: ReplayState[]): ReplayState[] {
  const last = new Map<string, string>();
  return list.filter((s) => {
    const key = `${s.state}|${s.status}`;
    if (last.get(s.actor) === key) return false;
    last.set(s.actor, key);
    return true;
  });
}

export interface ReplayStop {
  /** Stop once the token machine of decode step `token` is at `layer` (or has started, without a layer). */
  token: number;
  layer?: number;
}

export interface ReplayOptions {
  until?: ReplayStop;
  /** Observe the replayed actors (an inspector page, say). */
  inspect?: (ev: InspectionEvent) => void;
  /** Called after each delivered event (step mode, slow motion); may return a promise to wait for. */
  onStep?: (delivered: number, record: ActorRecord) => void | Promise<void>;
}

/** One snapshot of a machine: its state value (as "a.b") and status, and its scalar context. */
export interface ReplayState {
  actor: string;
  state: string;
  status?: string;
  context?: Record<string, number | string | boolean>;
}

export interface ReplayResult {
  /** Every machine snapshot the replay went through, in order. */
  states: ReplayState[];
  /** The recorded ones, in order (the same selection: state machines). */
  recorded: ReplayState[];
  /** Events delivered, and the index of the record where replay stopped (--until) or the trace ended. */
  delivered: number;
  stoppedAt?: number;
  /** Where replay and recording part ways — the actor and the index in its own sequence — or undefined when every actor went through the recorded states. */
  firstDifference?: { actor: string; index: number; replayed?: ReplayState; recorded?: ReplayState };
  /** Final snapshots of the roots. */
  session?: ReplayState;
  pipeline?: ReplayState;
}

export class ReplayError extends Error {
  override name = "ReplayError";
}


/** The machines, with every outside actor and action left out (their effects come from the trace). */
function replayLogic() {
  return {
    session: sessionMachine.provide({
      actors: {
        prefill: fromPromise<void, PrefillInput>(() => new Promise(() => {})),
        decodeStep: fromPromise<DecodeStepOutput, DecodeStepInput>(() => new Promise(() => {})),
      },
    }),
    pipeline: pipelineMachine.provide({ actors: { cache: fromCallback(() => {}) } }),
  };
}

export async function replayTrace(records: readonly TraceRecord[], opts: ReplayOptions = {}): Promise<ReplayResult> {
  const header = records[0];
  if (!header || header.kind !== "header") throw new ReplayError("trace has no header record");
  if (header.version < 2) throw new ReplayError(`trace version ${header.version} records event types only; record the run again (version 2 records what replay needs)`);
  const actors = records.filter((r): r is ActorRecord => r.kind === "actor");
  const machines = new Set<string>(); // names of recorded state machines (born in the trace, or roots)
  for (const r of actors) if (r.type === "@xstate.actor" && r.machine) machines.add(r.actor);
  const recorded: ReplayState[] = changes(
    actors.filter((r) => r.type === "@xstate.snapshot").map((r) => ({ actor: r.actor, state: stateText(r.state), status: r.status, context: r.context })),
  );

  let states: ReplayState[] = [];
  let recording = false; // snapshots of actors created at replay start are not part of the run
  const observe = (ev: InspectionEvent) => {
    opts.inspect?.(ev);
    if (!recording || ev.type !== "@xstate.snapshot") return;
    if (!isMachineRef(ev.actorRef)) return;
    const snap = ev.snapshot as { value?: unknown; status?: string; context?: Record<string, unknown> };
    states.push({ actor: actorName(ev.actorRef as never), state: stateText(snap.value), status: snap.status, context: scalars(snap.context) });
  };

  const logic = replayLogic();
  const roots = new Map<string, AnyActorRef>();
  // the pipeline root existed before the trace began: its birth record carries its input
  const pipelineBirth = actors.find((r) => r.type === "@xstate.actor" && r.actor === "pipeline");
  if (pipelineBirth) {
    const root = createActor(logic.pipeline, { input: pipelineBirth.input as PipelineInput, id: "pipeline", systemId: "pipeline", inspect: observe });
    root.start();
    roots.set("pipeline", root);
  }

  /** The live actor a recorded name refers to: a root, a system id, or parent/child. */
  const resolve = (name: string): AnyActorRef | undefined => {
    const root = roots.get(name);
    if (root) return root;
    for (const r of roots.values()) {
      const a = r.system.get(name) as AnyActorRef | undefined;
      if (a) return a;
    }
    const cut = name.lastIndexOf("/");
    if (cut < 0) return undefined;
    const parent = resolve(name.slice(0, cut));
    return (parent?.getSnapshot() as { children?: Record<string, AnyActorRef> } | undefined)?.children?.[name.slice(cut + 1)];
  };
  const isMachine = (name: string) => {
    if (machines.has(name)) return true;
    return isMachineRef(resolve(name));
  };

  recording = true;
  // the snapshots recorded before the first event (the pipeline root's state at trace start)
  for (const r of actors) {
    if (r.type === "@xstate.event") break;
    if (r.type === "@xstate.snapshot") states.push({ actor: r.actor, state: stateText(resolve(r.actor)?.getSnapshot().value ?? r.state), status: r.status, context: r.context });
  }
  let delivered = 0;
  let stoppedAt: number | undefined;
  for (let i = 0; i < actors.length; i++) {
    const r = actors[i]!;
    if (r.type === "@xstate.actor" && r.machine === "session" && !r.parent) {
      // the session machine is born in the trace (one per generation)
      const s = createActor(logic.session, { id: "session", systemId: "session", inspect: observe });
      roots.set("session", s);
      s.start();
      continue;
    }
    if (r.type !== "@xstate.event" || !r.event || r.event === "xstate.init") continue;
    if (r.source !== undefined && isMachine(r.source)) continue; // the machines send it again
    if (!isMachine(r.actor)) continue; // addressed to a stubbed actor: it does nothing
    const target = resolve(r.actor);
    if (!target) throw new ReplayError(`record ${i}: event ${r.event} for ${r.actor}, which does not exist at this point of the replay`);
    target.send({ type: r.event, ...(r.payload ?? {}) });
    delivered++;
    await opts.onStep?.(delivered, r);
    const u = opts.until;
    if (u) {
      const token = resolve("token")?.getSnapshot() as { context?: { step?: number; layer?: number } } | undefined;
      const c = token?.context;
      if (c && c.step === u.token && (u.layer === undefined || (c.layer ?? -1) >= u.layer)) {
        stoppedAt = i;
        break;
      }
    }
  }
  recording = false;
  states = changes(states);

  const snap = (name: string): ReplayState | undefined => {
    const a = roots.get(name);
    if (!a) return undefined;
    const s = a.getSnapshot() as { value?: unknown; status?: string; context?: Record<string, unknown> };
    return { actor: name, state: stateText(s.value), status: s.status, context: scalars(s.context) };
  };
  const result: ReplayResult = { states, recorded, delivered, stoppedAt, session: snap("session"), pipeline: snap("pipeline") };
  const mine = byActor(states);
  const theirs = byActor(recorded);
  for (const actor of new Set([...theirs.keys(), ...mine.keys()])) {
    const a = mine.get(actor) ?? [];
    const b = theirs.get(actor) ?? [];
    const n = stoppedAt === undefined ? Math.max(a.length, b.length) : a.length; // stopped: a prefix
    for (let k = 0; k < n; k++) {
      if (!a[k] || !b[k] || a[k]!.state !== b[k]!.state || a[k]!.status !== b[k]!.status) {
        result.firstDifference = { actor, index: k, replayed: a[k], recorded: b[k] };
        break;
      }
    }
    if (result.firstDifference) break;
  }
  for (const a of roots.values()) a.stop();
  return result;
}
