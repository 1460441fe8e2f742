// Types of bench/lib/seven-b.mjs (for the tests that import it).
export interface Cofire {
  group: number;
  share: string | undefined;
}
type SevenBValues = { "cofire-group"?: string; "cofire-share"?: string; "cold-share"?: string; "target-recall"?: string };
export declare const SEVEN_B_OPTIONS: Record<keyof SevenBValues, { type: "string" }>;
export declare const TRAINER_RECALL: string;
export declare function cofireOf(v: SevenBValues): Cofire;
export declare function coldShareOf(v: SevenBValues): string;
export declare function targetRecallOf(v: SevenBValues): string;
export declare function cofireSynthArgs(c: Cofire): string[];
export declare function sevenBFiles(
  dir: string,
  c: Cofire,
  coldShare?: string,
  targetRecall?: string,
): { name: string; model: string; profile: string; predictorArgs: string[]; predictor: string; pack: string; corpus: string };
