// Helpers of the benchmarks that run an engine under a memory limit: the page-cache eviction of
// a model file, the memory cgroup (v1) a child runs in and the check that the limit was reached,
// CPU time, the machine's other load and the hypervisor's steal, a CPU lock shared with other
// heavy jobs, and medians.
//
// Why eviction: cgroup v1 charges a page-cache page to the group that first touched it. Pages of
// the model that are already cached (by `pack`, by an in-memory run, by an earlier bench) stay
// charged to that other group and are not limited: a "limited" run then reads its weights from
// memory and measures nothing. So before each limited run the file's pages are dropped, and after
// it the cgroup's peak usage must have reached its limit.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmdirSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";

export const MiB = 2 ** 20;
export const GiB = 2 ** 30;

/** Bytes of `path` in the page cache (util-linux fincore, i.e. mincore over a mapping), or undefined. */
export function residentBytes(path) {
  const r = spawnSync("fincore", ["--bytes", "--noheadings", "--output", "RES", path], { encoding: "utf8" });
  if (r.status !== 0) return undefined;
  const n = Number(r.stdout.trim());
  return Number.isFinite(n) ? n : undefined;
}

export const EVICT_METHOD = "posix_fadvise(POSIX_FADV_DONTNEED) over the whole file (GNU dd iflag=nocache count=0)";

/**
 * Drop `path`'s pages from the page cache, only this file's (not `echo 1 > drop_caches`, which
 * empties everyone's cache on a shared machine). POSIX_FADV_DONTNEED drops clean pages that no
 * process maps; pages still mapped by a running process stay, which `ok` reports.
 */
export function evictFile(path) {
  const size = statSync(path).size;
  const residentBefore = residentBytes(path);
  const t0 = performance.now();
  const r = spawnSync("dd", [`if=${path}`, "iflag=nocache", "count=0", "status=none"], { encoding: "utf8" });
  const seconds = (performance.now() - t0) / 1000;
  const residentAfter = residentBytes(path);
  const error = r.status !== 0 ? `dd failed: ${r.stderr || r.error || `exit ${r.status}`}` : undefined;
  // a few MiB may stay (pages mapped by another process); more than 1% of the file is a failure
  const ok = !error && residentAfter !== undefined && residentAfter <= Math.max(16 * MiB, 0.01 * size);
  return { method: EVICT_METHOD, file: path, fileBytes: size, residentBefore, residentAfter, seconds, ok, error };
}

/** The memory cgroup (v1) this process is in, when its directory is writable here; or undefined. */
export function memoryCgroupRoot() {
  try {
    const line = readFileSync("/proc/self/cgroup", "utf8").split("\n").find((l) => /^\d+:([^:]*,)?memory(,[^:]*)?:/.test(l));
    if (!line) return undefined;
    const p = join("/sys/fs/cgroup/memory", line.split(":")[2]);
    return existsSync(join(p, "memory.limit_in_bytes")) ? p : undefined;
  } catch {
    return undefined;
  }
}

/** Create a child memory cgroup of `root` limited to `limit` bytes; returns its directory. */
export function createCgroup(root, name, limit) {
  const cg = join(root, name);
  mkdirSync(cg);
  writeFileSync(join(cg, "memory.limit_in_bytes"), String(limit));
  return cg;
}

/** memory.stat of a v1 cgroup as numbers (this group's own lines: cache, rss, mapped_file, …). */
export function cgroupMemoryStat(cg) {
  const out = {};
  for (const line of readFileSync(join(cg, "memory.stat"), "utf8").split("\n")) {
    const [k, val] = line.split(" ");
    if (k && val !== undefined) out[k] = Number(val);
  }
  return out;
}

/**
 * Sample a cgroup's memory.stat every `ms` while a child runs: the largest anonymous (rss),
 * page-cache (cache) and mapped-file figures seen. memory.max_usage_in_bytes has only the sum.
 */
export function sampleCgroup(cg, ms = 1000) {
  const peak = { rss: 0, cache: 0, mappedFile: 0, samples: 0 };
  const tick = () => {
    try {
      const s = cgroupMemoryStat(cg);
      peak.rss = Math.max(peak.rss, s.rss ?? 0);
      peak.cache = Math.max(peak.cache, s.cache ?? 0);
      peak.mappedFile = Math.max(peak.mappedFile, s.mapped_file ?? 0);
      peak.samples++;
    } catch {}
  };
  const timer = setInterval(tick, ms);
  return {
    stop() {
      clearInterval(timer);
      tick();
      return peak;
    },
  };
}

/**
 * The cgroup's counters after the run, and whether the limit was reached: peak usage within
 * max(16 MiB, 1%) of the limit (the kernel charges in batches of a few pages, so the peak can
 * stop a little short of it). A run that never reached its limit was not limited.
 */
export function cgroupReport(cg, limit) {
  const maxUsage = Number(readFileSync(join(cg, "memory.max_usage_in_bytes"), "utf8"));
  const failcnt = Number(readFileSync(join(cg, "memory.failcnt"), "utf8"));
  const oomKills = Number(/oom_kill (\d+)/.exec(readFileSync(join(cg, "memory.oom_control"), "utf8"))?.[1] ?? NaN);
  const tolerance = Math.max(16 * MiB, 0.01 * limit);
  return { limit, maxUsage, failcnt, oomKills, limited: maxUsage >= limit - tolerance, tolerance };
}

export function removeCgroup(cg) {
  rmdirSync(cg);
}

/** CPU time (user + system, all threads) this process has used, in seconds. */
export function ownCpuSeconds() {
  const r = process.resourceUsage();
  return (r.userCPUTime + r.systemCPUTime) / 1e6;
}

/**
 * The all-CPU line of /proc/stat ("cpu  user nice system idle iowait irq softirq steal …",
 * jiffies since boot) as busy and total jiffies, and the steal among the busy ones: time this
 * VM's cores were ready to run while the hypervisor ran something else. Undefined for text that
 * is not such a line.
 */
export function parseCpuLine(text) {
  const f = text.split("\n")[0].trim().split(/\s+/);
  if (f[0] !== "cpu" || f.length < 9) return undefined;
  const n = f.slice(1, 9).map(Number);
  if (n.some((x) => !Number.isFinite(x))) return undefined;
  const idle = n[3] + n[4]; // idle + iowait
  const total = n.reduce((a, b) => a + b, 0); // user..steal (guest is inside user)
  return { busy: total - idle, total, steal: n[7] };
}

/** parseCpuLine of this machine's /proc/stat now, or undefined off Linux. */
export function cpuTimes() {
  try {
    return parseCpuLine(readFileSync("/proc/stat", "utf8"));
  } catch {
    return undefined;
  }
}

/** Jiffies per second per core between two readings (self-calibrated: USER_HZ is not exposed), or undefined. */
function jiffiesPerSecond(before, after, wallSeconds, cpus) {
  if (!before || !after || wallSeconds <= 0) return undefined;
  const dTotal = after.total - before.total;
  return dTotal > 0 ? dTotal / (wallSeconds * cpus) : undefined;
}

/**
 * Average number of cores that OTHER processes used over an interval: the machine's busy CPU
 * time (/proc/stat) less its steal and `ownCpuSeconds`, per second of wall time. With 2 cores,
 * anything above ~0.1 makes speed figures unreliable.
 */
export function otherLoad(before, after, wallSeconds, ownCpu, cpus = os.cpus().length) {
  const hz = jiffiesPerSecond(before, after, wallSeconds, cpus);
  if (hz === undefined) return undefined;
  const busySeconds = (after.busy - before.busy - (after.steal - before.steal)) / hz;
  return Math.max(0, (busySeconds - ownCpu) / wallSeconds);
}

/**
 * Average number of cores the hypervisor took from this VM over an interval (/proc/stat's
 * steal). On this VM it follows the engine's own reads (the host emulates the disk on the same
 * physical cores: ~0.1 cores while the 7B decodes half offloaded, none in memory,
 * docs/benchmarks.md), so it is reported apart from other processes' load, not counted in it.
 */
export function stealCores(before, after, wallSeconds, cpus = os.cpus().length) {
  const hz = jiffiesPerSecond(before, after, wallSeconds, cpus);
  if (hz === undefined) return undefined;
  return (after.steal - before.steal) / hz / wallSeconds;
}

/** Median, min and max of numbers (undefined for none). */
export function spread(xs) {
  const a = xs.filter((x) => typeof x === "number" && Number.isFinite(x)).sort((p, q) => p - q);
  if (a.length === 0) return undefined;
  const m = a.length >> 1;
  return { median: a.length % 2 ? a[m] : (a[m - 1] + a[m]) / 2, min: a[0], max: a[a.length - 1], n: a.length };
}

/**
 * Hold an flock(1) lock on `file` until release() is called (or this process dies): a `flock`
 * child keeps the lock while its stdin is open. Other heavy jobs on the machine wrap their
 * commands in `flock FILE …`, so a benchmark child and someone's build never run at once.
 */
export function acquireLock(file) {
  return new Promise((resolvePromise, reject) => {
    const t0 = performance.now();
    const p = spawn("flock", [file, "sh", "-c", "echo locked; exec cat >/dev/null"], { stdio: ["pipe", "pipe", "inherit"] });
    p.on("error", reject);
    p.stdout.once("data", () =>
      resolvePromise({
        waitedSeconds: (performance.now() - t0) / 1000,
        release: () => p.stdin.end(),
      }),
    );
  });
}
