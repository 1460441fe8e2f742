// Stop sequences over streamed text: text is released only once it cannot be the start of a stop
// string, and generation ends at the first stop string found, which is not released (as
// llama-server and the OpenAI API: the reply excludes the stop sequence).

export class StopSequences {
  private held = "";
  private readonly longest: number;

  constructor(private readonly stops: readonly string[]) {
    for (const s of stops) if (typeof s !== "string" || s.length === 0) throw new RangeError(`stop sequences must be non-empty strings, got ${JSON.stringify(s)}`);
    this.longest = Math.max(0, ...stops.map((s) => s.length));
  }

  /** Text to release after `text` arrives, and whether a stop string was found. */
  push(text: string): { text: string; stopped: boolean } {
    this.held += text;
    let at = -1;
    for (const s of this.stops) {
      const i = this.held.indexOf(s);
      if (i >= 0 && (at < 0 || i < at)) at = i;
    }
    if (at >= 0) {
      const out = this.held.slice(0, at);
      this.held = "";
      return { text: out, stopped: true };
    }
    // keep the longest tail that is a prefix of some stop string
    let keep = 0;
    for (let k = Math.min(this.longest - 1, this.held.length); k > 0; k--) {
      const tail = this.held.slice(this.held.length - k);
      if (this.stops.some((s) => s.startsWith(tail))) {
        keep = k;
        break;
      }
    }
    const out = this.held.slice(0, this.held.length - keep);
    this.held = this.held.slice(this.held.length - keep);
    return { text: out, stopped: false };
  }

  /** The text still held back (generation ended without a stop string). */
  flush(): string {
    const out = this.held;
    this.held = "";
    return out;
  }
}
