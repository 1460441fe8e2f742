// Worker-thread entry point (piscina): runs a generation off the caller's thread and streams
// pieces back over a MessagePort. Models stay loaded in the worker between tasks (keyed by
// path), so only the first task on a worker pays for loading. Messages carry text and token
// ids only; the weights and activations stay in this thread's native memory.
import { loadModel, type Model } from "../src/api/model.js";
import type { GenerationStats } from "../src/api/session.js";
import type { GenerateTask, WorkerMessage } from "../src/api/generation-pool.js";

const models = new Map<string, Model>();

export default async function generate(task: GenerateTask): Promise<GenerationStats> {
  let model = models.get(task.modelPath);
  if (!model) {
    model = await loadModel(task.modelPath, { threads: task.threads });
    models.set(task.modelPath, model);
  }
  const ac = new AbortController();
  task.port.on("message", (m: { type?: string }) => {
    if (m?.type === "abort") ac.abort(new Error("aborted by the caller"));
  });
  const session = model.createSession({ contextSize: task.contextSize });
  try {
    const it = session.generate(task.prompt, { ...task.options, signal: ac.signal });
    let r = await it.next();
    while (!r.done) {
      task.port.postMessage({ type: "piece", text: r.value.text, token: r.value.token } satisfies WorkerMessage);
      r = await it.next();
    }
    task.port.postMessage({ type: "done", stats: r.value } satisfies WorkerMessage);
    return r.value;
  } finally {
    session.dispose();
    task.port.close();
  }
}
