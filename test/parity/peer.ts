// Shared helpers of the parity suite: the llama.cpp peer (bench/peer/llama-peer.mjs), synthetic
// models in a temp dir, text sets and distribution metrics. The peer is REQUIRED: when it is not
// installed the suites fail (never skip) with the command that installs it.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { openPeer, peerInstalled, type Peer, type PeerOptions } from "../../bench/peer/llama-peer.mjs";

export const INSTALL_HINT =
  "the llama.cpp peer is not installed: run `bash bench/install.sh` " +
  "(node-llama-cpp 3.22.1 + its CPU binary into bench/node_modules; the parity suite requires it)";

/** Throws (failing the suite) when node-llama-cpp is missing under bench/. */
export function requirePeerInstalled(): void {
  if (!peerInstalled()) throw new Error(INSTALL_HINT);
}

export async function openRequiredPeer(path: string, opts: PeerOptions = {}): Promise<Peer> {
  requirePeerInstalled();
  return openPeer(path, { threads: 2, ...opts });
}

/** A temp directory for synthetic models; `cleanup()` removes it. */
export function tempModelDir(tag: string): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), `neuronpipe-parity-${tag}-`));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

// ---- texts ---------------------------------------------------------------------------------

/** Our own cases: the kinds of input where tokenizers typically disagree. */
export const parityTexts: string[] = [
  "",
  " ",
  "  ",
  "\n",
  "\t",
  "Hello world",
  " Hello world",
  "Hello  world   with    runs     of      spaces",
  "trailing spaces   ",
  "   leading spaces",
  "line one\nline two\n\nline four\r\nwindows line\r\n",
  "tabs\tbetween\t\twords\t",
  "mixed \t \n whitespace \n\t\n",
  "Numbers: 0 1 12 123 1234 12345 123456 3.14159 -42 1e10 1,000,000 2024-06-01",
  "Phone +1 (555) 010-9999, price $19.99, 50% off, #hashtag @mention",
  "I'm you're he's she'd we'll they've can't won't isn't Y'ALL'D O'Neil's",
  "don't DON'T Don'T 'quoted' \"double\" `backtick`",
  "function add(a, b) {\n  return a + b; // sum\n}\n\nconst x = add(1, 2);\nif (x !== 3) throw new Error(`bad ${x}`);",
  "def f(x):\n    if x <= 0:\n        return [i**2 for i in range(10)]\n    return {'k': x}\n",
  "<div class=\"a\">&amp; &lt;tag&gt;</div>",
  "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
  "Ünïcödé façade naïve café résumé Ångström",
  "Привет, как дела? Это тест.",
  "Γειά σου κόσμε",
  "مرحبا بالعالم",
  "שלום עולם",
  "नमस्ते दुनिया",
  "你好，世界！这是一个测试。",
  "日本語のテキストとカタカナ、ひらがな。",
  "한국어 텍스트입니다",
  "ภาษาไทย",
  "emoji 🙂😀🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ✔",
  "math ∑ ∫ √ ∞ ≠ ≤ ≥ π θ λ µ ° ±",
  "zero\u200bwidth\u200djoiner and nbsp\u00a0here",
  "combining e\u0301 vs é, Å vs A\u030a",
  "a",
  "A",
  "1",
  "!!!???...",
  "____----====",
  "https://example.com/path?query=1&b=two#frag",
  "email: someone@example.org",
  "CamelCaseIdentifier snake_case_identifier kebab-case-identifier SCREAMING_CASE",
  "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
  "A sentence with a very long word: pneumonoultramicroscopicsilicovolcanoconiosis.",
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "the the the the the the the the the the",
  "<s> </s> <unk> <|begin_of_text|> <|eot_id|> literal special-token text",
  "\u00ff\u00fe byte-ish characters \u0000 nul and \u007f del",
  "Mixed: English, 中文, русский, العربية, emoji 😀 and code `x += 1`.",
];

/** A passage of plain English for the logit tests (tokenised by the peer). */
export const passage =
  "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age " +
  "of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season " +
  "of Light, it was the season of Darkness, it was the spring of hope, it was the winter of " +
  "despair, we had everything before us, we had nothing before us, we were all going direct to " +
  "Heaven, we were all going direct the other way.";

/**
 * The tokenizer engineer's text set (test/tokenizer/texts.ts) merged with ours. The file is
 * imported dynamically because it is owned elsewhere; the export is looked for under a few
 * names (TOKENIZER_TEXTS, texts, TEXTS, tokenizerTexts, default) and may be a string array or an array of
 * { text } objects. Returns which source(s) were used, so the test can report it.
 */
export async function loadTexts(): Promise<{ texts: string[]; sources: string[] }> {
  const sources = ["test/parity/peer.ts (parityTexts)"];
  const all = [...parityTexts];
  const file = fileURLToPath(new URL("../tokenizer/texts.ts", import.meta.url));
  if (existsSync(file)) {
    const mod: Record<string, unknown> = await import(pathToFileURL(file).href);
    let found = false;
    for (const name of ["TOKENIZER_TEXTS", "texts", "TEXTS", "tokenizerTexts", "corpus", "default"]) {
      const v = mod[name];
      if (!Array.isArray(v)) continue;
      for (const item of v) {
        const t = typeof item === "string" ? item : (item as { text?: unknown })?.text;
        if (typeof t === "string") all.push(t);
      }
      sources.push(`test/tokenizer/texts.ts (${name})`);
      found = true;
      break;
    }
    if (!found) throw new Error(`test/tokenizer/texts.ts exports none of TOKENIZER_TEXTS/texts/TEXTS/tokenizerTexts/corpus/default as an array (exports: ${Object.keys(mod).join(", ")})`);
  }
  return { texts: [...new Set(all)], sources };
}

// ---- metrics -------------------------------------------------------------------------------

export function argmax(a: ArrayLike<number>): number {
  let b = 0;
  for (let i = 1; i < a.length; i++) if (a[i]! > a[b]!) b = i;
  return b;
}

/** Gap between the largest and second-largest entries. */
export function top2Margin(a: ArrayLike<number>): number {
  let m1 = -Infinity;
  let m2 = -Infinity;
  for (let i = 0; i < a.length; i++) {
    const v = a[i]!;
    if (v > m1) {
      m2 = m1;
      m1 = v;
    } else if (v > m2) m2 = v;
  }
  return m1 - m2;
}

export function logSoftmax(a: ArrayLike<number>): Float64Array {
  let m = -Infinity;
  for (let i = 0; i < a.length; i++) m = Math.max(m, a[i]!);
  let s = 0;
  for (let i = 0; i < a.length; i++) s += Math.exp(a[i]! - m);
  const lse = m + Math.log(s);
  const out = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = a[i]! - lse;
  return out;
}

/** KL(P‖Q) in nats, P and Q given as logits. */
export function klDivergence(pLogits: ArrayLike<number>, qLogits: ArrayLike<number>): number {
  const lp = logSoftmax(pLogits);
  const lq = logSoftmax(qLogits);
  let kl = 0;
  for (let i = 0; i < lp.length; i++) {
    const p = Math.exp(lp[i]!);
    if (p > 0) kl += p * (lp[i]! - lq[i]!);
  }
  return Math.max(0, kl);
}

export function std(a: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]!;
  const mean = s / a.length;
  let v = 0;
  for (let i = 0; i < a.length; i++) v += (a[i]! - mean) ** 2;
  return Math.sqrt(v / a.length);
}

/** max_i |a_i − b_i| / std(b): the worst logit error in units of the reference's spread. */
export function maxRelLogitError(ours: ArrayLike<number>, ref: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < ref.length; i++) m = Math.max(m, Math.abs(ours[i]! - ref[i]!));
  return m / std(ref);
}

/** Root-mean-square logit error relative to std(ref). */
export function rmsRelLogitError(ours: ArrayLike<number>, ref: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < ref.length; i++) s += (ours[i]! - ref[i]!) ** 2;
  return Math.sqrt(s / ref.length) / std(ref);
}

export function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}
