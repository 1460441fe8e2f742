// The bench's reading of /proc/stat (bench/lib/measure.mjs): the machine's busy time split into
// other processes' load and the hypervisor's steal, checked on hand-written /proc/stat lines with
// the figures worked out by hand below.
import { describe, expect, it } from "vitest";
// @ts-expect-error: a plain .mjs module of the bench scripts
import { otherLoad, parseCpuLine, stealCores } from "../../bench/lib/measure.mjs";

// the first line of /proc/stat: user nice system idle iowait irq softirq steal guest guest_nice
const before = "cpu  1000 0 200 5000 50 0 10 100 0 0\ncpu0 500 0 100 2500 25 0 5 50 0 0\n";
// 10 s later on 2 cores: 2,060 jiffies more, 1,710 of them busy (100 of those stolen)
const after = "cpu  2500 0 300 5300 100 0 20 200 0 0\ncpu0 1250 0 150 2650 50 0 10 100 0 0\n";

describe("bench/lib/measure.mjs on /proc/stat", () => {
  it("parses the all-CPU line: busy, total and steal jiffies", () => {
    // busy = user + nice + system + irq + softirq + steal = 1000 + 200 + 10 + 100
    expect(parseCpuLine(before)).toEqual({ busy: 1310, total: 6360, steal: 100 });
    expect(parseCpuLine(after)).toEqual({ busy: 3020, total: 8420, steal: 200 });
  });

  it("splits the busy time into other processes' load and steal", () => {
    const a = parseCpuLine(before);
    const b = parseCpuLine(after);
    // 2,060 jiffies over 10 s on 2 cores: 103 a second; busy 1,710 of which steal 100
    // other = (1,710 − 100) / 103 − 12 s of our own CPU = 3.631 s over 10 s
    expect(otherLoad(a, b, 10, 12, 2)).toBeCloseTo((1610 / 103 - 12) / 10, 10);
    // steal: 100 / 103 s over 10 s
    expect(stealCores(a, b, 10, 2)).toBeCloseTo(100 / 103 / 10, 10);
    // more of our own CPU than the machine was busy: no negative load
    expect(otherLoad(a, b, 10, 20, 2)).toBe(0);
  });

  it("gives nothing for a line that is not /proc/stat's", () => {
    expect(parseCpuLine("intr 1 2 3")).toBeUndefined();
    expect(parseCpuLine("cpu  1 2")).toBeUndefined();
    expect(otherLoad(undefined, parseCpuLine(after), 10, 1, 2)).toBeUndefined();
    expect(stealCores(parseCpuLine(before), parseCpuLine(after), 0, 2)).toBeUndefined();
  });
});
