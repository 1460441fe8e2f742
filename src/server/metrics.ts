// The server's Prometheus metrics (prom-client: the maintained Node client, text exposition
// format), in a registry of its own so that two servers in one process do not mix.
import { Counter, Gauge, Histogram, Registry } from "prom-client";

export class ServerMetrics {
  readonly registry = new Registry();
  readonly requests = new Counter({ name: "neuronpipe_requests_total", help: "HTTP requests answered, by endpoint and status", labelNames: ["endpoint", "status"] as const, registers: [this.registry] });
  readonly promptTokens = new Counter({ name: "neuronpipe_prompt_tokens_total", help: "Prompt tokens of completed generations", registers: [this.registry] });
  readonly generatedTokens = new Counter({ name: "neuronpipe_generated_tokens_total", help: "Tokens generated", registers: [this.registry] });
  readonly cancelled = new Counter({ name: "neuronpipe_generations_cancelled_total", help: "Generations stopped because the client went away", registers: [this.registry] });
  readonly rejected = new Counter({ name: "neuronpipe_requests_rejected_total", help: "Requests refused with 503: the waiting line was full", registers: [this.registry] });
  readonly waiting = new Gauge({ name: "neuronpipe_requests_waiting", help: "Requests waiting for a session", registers: [this.registry] });
  readonly busy = new Gauge({ name: "neuronpipe_sessions_busy", help: "Sessions generating", registers: [this.registry] });
  readonly firstToken = new Histogram({
    name: "neuronpipe_time_to_first_token_seconds",
    help: "From the request's arrival to its first generated token (waiting, prefill and one decode step)",
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });
  readonly decodeRate = new Histogram({
    name: "neuronpipe_decode_tokens_per_second",
    help: "Decode speed of each completed generation",
    buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000],
    registers: [this.registry],
  });
  readonly duration = new Histogram({
    name: "neuronpipe_request_duration_seconds",
    help: "Time to answer a request, by endpoint",
    labelNames: ["endpoint"] as const,
    buckets: [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });
}
