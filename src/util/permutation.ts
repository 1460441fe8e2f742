// Is an order a permutation of 0..n−1? Neuron orders are read from files (a profile's, a pack's
// blk.N.ffn_order); each reader words its own error from the first fault.

/** The first entry of `order` that keeps it from being a permutation of 0..length−1: outside the range, or repeated. */
export function permutationFault(order: ArrayLike<number>): { position: number; id: number; repeated: boolean } | undefined {
  const seen = new Uint8Array(order.length);
  for (let p = 0; p < order.length; p++) {
    const id = order[p]!;
    if (!(Number.isInteger(id) && id >= 0 && id < order.length)) return { position: p, id, repeated: false };
    if (seen[id]) return { position: p, id, repeated: true };
    seen[id] = 1;
  }
  return undefined;
}
