// `neuronpipe chat` driven in a real terminal (tmux: send-keys, capture-pane): two turns whose
// replies are the library's ChatSession replies, then Ctrl-C during a reply stops the reply and
// leaves the prompt usable, and /exit ends the program.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChatSession } from "../../src/api/chat.js";
import { loadModel, synthModel } from "../../src/index.js";

const root = join(import.meta.dirname, "..", "..");
const dir = mkdtempSync(join(tmpdir(), "np-chat-"));
const socket = `np-chat-test-${process.pid}`;
const tmux = (...args: string[]) => execFileSync("tmux", ["-L", socket, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
let modelPath: string;

beforeAll(async () => {
  // slow enough (~100 tok/s on one thread) that a 200-token reply can be interrupted
  modelPath = join(dir, "chat.gguf");
  await synthModel({ shape: { embd: 512, ff: 1536, layers: 8, heads: 8, kvHeads: 8, ctx: 2048 }, type: "f32", seed: 3 }).write(modelPath);
}, 120_000);
afterAll(() => {
  try {
    tmux("kill-server");
  } catch {
    // already gone
  }
  rmSync(dir, { recursive: true, force: true });
});

const pane = () => tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "chat");
/** What the terminal shows after the message `msg` was sent, up to the next prompt. */
function replyTo(text: string, msg: string): string {
  const at = text.indexOf(`> ${msg}\n`);
  if (at < 0) return "";
  const rest = text.slice(at + msg.length + 3);
  const end = rest.search(/(^|\n)>( |$)/m);
  return end < 0 ? rest : rest.slice(0, end);
}

async function until(what: string, ok: (text: string) => boolean, ms = 60_000): Promise<string> {
  const t0 = Date.now();
  for (;;) {
    const t = pane();
    if (ok(t)) return t;
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}; the terminal shows:\n${t}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The printable ASCII of a text, whitespace removed (the terminal renders the rest its own way). */
const ascii = (s: string) => s.replace(/[^\x21-\x7e]/g, "");

describe("neuronpipe chat in a terminal", () => {
  it("two turns, then Ctrl-C during a reply stops it and the prompt stays usable", async () => {
    const cmd = `node ${join(root, "bin", "neuronpipe.js")} chat -m ${modelPath} -c 2048 -n 200 --temp 0 -t 1`;
    tmux("new-session", "-d", "-s", "chat", "-x", "250", "-y", "50", cmd);
    const lastLineIsPrompt = (t: string) => t.trimEnd().split("\n").at(-1) === ">";
    await until("the first prompt", lastLineIsPrompt);
    tmux("send-keys", "-t", "chat", "Hello", "Enter");
    const afterOne = await until("the first reply", (t) => lastLineIsPrompt(t) && t.includes("> Hello"));
    tmux("send-keys", "-t", "chat", "Tell me more", "Enter");
    const afterTwo = await until("the second reply", (t) => lastLineIsPrompt(t) && t.includes("> Tell me more"));
    // the replies the library's ChatSession gives for the same conversation
    const model = await loadModel(modelPath);
    const ref = new ChatSession(model, { contextSize: 2048 });
    const r1 = (await ref.reply("Hello", { maxTokens: 200, temperature: 0, seed: 0 })).text;
    const r2 = (await ref.reply("Tell me more", { maxTokens: 200, temperature: 0, seed: 1 })).text;
    ref.dispose();
    model.dispose();
    expect(ascii(replyTo(afterOne, "Hello"))).toBe(ascii(r1));
    expect(ascii(replyTo(afterTwo, "Tell me more"))).toBe(ascii(r2));
    expect(ascii(r1).length).toBeGreaterThan(10);
    // a third message; Ctrl-C once its reply has started
    tmux("send-keys", "-t", "chat", "Go on", "Enter");
    const before = pane();
    await until("the third reply to start", (t) => t.length > before.length + 5);
    tmux("send-keys", "-t", "chat", "C-c");
    const stopped = await until("the reply to stop", (t) => t.includes("[stopped]") && lastLineIsPrompt(t), 10_000);
    expect(replyTo(stopped, "Go on")).toMatch(/ \[stopped\]\n?$/);
    // the prompt is usable: a fourth message gets a reply
    tmux("send-keys", "-t", "chat", "Again", "Enter");
    const afterFour = await until("the fourth reply", (t) => lastLineIsPrompt(t) && t.includes("> Again"));
    expect(ascii(replyTo(afterFour, "Again")).length).toBeGreaterThan(0);
    tmux("send-keys", "-t", "chat", "/exit", "Enter");
    for (let k = 0; k < 500; k++) {
      try {
        tmux("has-session", "-t", "chat");
      } catch {
        return; // the program ended and its session with it
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`chat did not exit after /exit:\n${pane()}`);
  }, 180_000);
});
