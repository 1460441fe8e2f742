// Stop sequences over streamed text, hand-computed cases.
import { describe, expect, it } from "vitest";
import { StopSequences } from "../../src/api/stop-sequences.js";

function run(stops: string[], pieces: string[]) {
  const s = new StopSequences(stops);
  const out: string[] = [];
  for (const p of pieces) {
    const r = s.push(p);
    out.push(r.text);
    if (r.stopped) return { out, stopped: true };
  }
  out.push(s.flush());
  return { out, stopped: false };
}

describe("StopSequences", () => {
  it("holds back text that may begin a stop string, releases it when it cannot", () => {
    expect(run(["END"], ["ab", "cE", "N", "x"])).toEqual({ out: ["ab", "c", "", "ENx", ""], stopped: false });
  });
  it("stops at a stop string split over pieces and drops it and what follows", () => {
    expect(run(["END"], ["abE", "N", "Dzz"])).toEqual({ out: ["ab", "", ""], stopped: true });
    expect(run(["\n\n", "User:"], ["Hi.\n", "Us", "er: more"])).toEqual({ out: ["Hi.", "\n", ""], stopped: true });
  });
  it("the earliest of several stop strings wins", () => {
    expect(run(["cd", "b"], ["abcd"])).toEqual({ out: ["a"], stopped: true });
  });
  it("refuses an empty stop string", () => {
    expect(() => new StopSequences([""])).toThrow(/non-empty strings/);
  });
});
