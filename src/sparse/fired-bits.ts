// Fired flags as the profiler collects them and the predictor trainer reads them: per token a row
// of bytes, bit i (LSB first) set when neuron i fired.

/** Bit i of row t of `bits` (rows of `rowBytes` bytes): 1 when neuron i fired on token t, else 0. */
export function firedBit(bits: Uint8Array, rowBytes: number, t: number, i: number): number {
  return (bits[t * rowBytes + (i >> 3)]! >> (i & 7)) & 1;
}
