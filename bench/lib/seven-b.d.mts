// Types of bench/lib/seven-b.mjs (for the tests that import it).
export interface Cofire {
  group: number;
  share: string | undefined;
}
export declare const SEVEN_B_OPTIONS: Record<"cofire-group" | "cofire-share", { type: "string" }>;
export declare function cofireOf(v: { "cofire-group"?: string; "cofire-share"?: string }): Cofire;
export declare function cofireSynthArgs(c: Cofire): string[];
export declare function sevenBFiles(dir: string, c: Cofire): { name: string; model: string; profile: string; predictor: string; pack: string; corpus: string };
