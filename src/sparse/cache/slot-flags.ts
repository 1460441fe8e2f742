// Which reads a cache slot waits for, in shared memory, so a compute worker can wait for the
// bytes it needs without a round trip through the scheduler (actor pipeline):
//
//   want[s]   the read batch that last wrote (or will write) slot s — the cache sets it when it
//             queues the read (ReadBatcher.slotBatch); 0: loaded synchronously, nothing to wait for
//   ready[s]  the batch whose copies into slot s have landed — the I/O worker sets it after the
//             copies (−batch when the read failed)
//   ready[S]  a sequence number bumped after every batch, the word waiters sleep on
//
// A slot is ready when want[s] is 0 or ready[s] equals it. A slot is only given to another
// neuron in a new cache window, after every computation that used it has answered, so want[s]
// does not change under a waiter.

/** Shared buffers of the flags for `slots` slots. */
export function createSlotFlags(slots: number): { want: SharedArrayBuffer; ready: SharedArrayBuffer } {
  return { want: new SharedArrayBuffer(Math.max(1, slots) * 4), ready: new SharedArrayBuffer((slots + 1) * 4) };
}

/** After batch `batch`'s copies ([arenaOffset, stagingOffset, length]…) landed (ok) or failed: mark their slots, wake waiters. */
export function markSlots(ready: Int32Array, copies: ArrayLike<number>, slotBytes: number, batch: number, ok: boolean): void {
  const v = ok ? batch : -batch;
  for (let i = 0; i < copies.length; i += 3) Atomics.store(ready, Math.floor(copies[i]! / slotBytes), v);
  const seq = ready.length - 1;
  Atomics.add(ready, seq, 1);
  Atomics.notify(ready, seq);
}

/** Is slot s ready (its last read landed)? A failed read counts as not ready. */
export function slotReady(want: Int32Array, ready: Int32Array, s: number): boolean {
  const w = Atomics.load(want, s);
  return w === 0 || Atomics.load(ready, s) === w;
}

/**
 * Block this thread (not a core) until every slot slots[start, start+count) is ready; a failed
 * read throws naming `what` and the batch. A batch that never lands throws after `timeoutMs`.
 */
export function waitSlots(want: Int32Array, ready: Int32Array, slots: Int32Array, start: number, count: number, what: string, timeoutMs = 120_000): void {
  const seqAt = ready.length - 1;
  let deadline = 0;
  for (let k = start; k < start + count; ) {
    const s = slots[k]!;
    const w = Atomics.load(want, s);
    if (w === 0) {
      k++;
      continue;
    }
    const seq = Atomics.load(ready, seqAt); // read before the flag: a batch landing in between bumps it
    const r = Atomics.load(ready, s);
    if (r === w) {
      k++;
      continue;
    }
    if (r === -w) throw new Error(`${what}: read batch ${w} failed`);
    if (deadline === 0) deadline = Date.now() + timeoutMs;
    const left = deadline - Date.now();
    if (left <= 0) throw new Error(`${what}: read batch ${w} did not land within ${timeoutMs} ms`);
    Atomics.wait(ready, seqAt, seq, Math.min(left, 1000));
  }
}
