// Read-batch completion flags in shared memory, so a compute worker can wait for the bytes it
// needs without a round trip through the scheduler: the I/O worker sets flag[id mod R] = id
// after a batch's copies (−id when it failed) and wakes waiters; the "back" task of a layer
// waits on the flags of its batches (Atomics.wait blocks the worker's thread, not a core).
const RING = 4096;

export function createIoFlags(): SharedArrayBuffer {
  return new SharedArrayBuffer(RING * 4);
}

export function markBatch(flags: Int32Array, id: number, ok: boolean): void {
  Atomics.store(flags, id % RING, ok ? id : -id);
  Atomics.notify(flags, id % RING);
}

/** Wait until batch `id` has landed; throws if it failed, or after `timeoutMs` (a lost batch). */
export function waitBatch(flags: Int32Array, id: number, what: string, timeoutMs = 120_000): void {
  const i = id % RING;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = Atomics.load(flags, i);
    if (v === id) return;
    if (v === -id) throw new Error(`${what}: read batch ${id} failed`);
    const left = deadline - Date.now();
    if (left <= 0) throw new Error(`${what}: read batch ${id} did not land within ${timeoutMs} ms`);
    Atomics.wait(flags, i, v, Math.min(left, 1000));
  }
}
