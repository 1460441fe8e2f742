// The median of a sample of timings, as the probe and the calibration take it over passes and
// rounds: the upper middle of an even count.

/** The median of `values` (the upper middle of an even count); `values` is not reordered. */
export function median(values: readonly number[]): number {
  if (values.length === 0) throw new RangeError("median of no values");
  return [...values].sort((a, b) => a - b)[values.length >> 1]!;
}
