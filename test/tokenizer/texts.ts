// Shared text set for tokenizer parity tests (our tokenizer vs HF reference vs llama.cpp).
// Keep entries deterministic and reasonably short; every category the parity
// check cares about is represented: Unicode (CJK, emoji, accents, combining
// marks), whitespace runs, digits, code, contractions and special-token text.

export interface TokenizerText {
  /** short stable identifier */
  name: string;
  text: string;
  /** contains special-token text like <s> or <|eot_id|> (results differ with parse_special) */
  special?: boolean;
}

export const TOKENIZER_TEXTS: readonly TokenizerText[] = [
  // basics / whitespace
  { name: "empty", text: "" },
  { name: "single-char", text: "a" },
  { name: "single-space", text: " " },
  { name: "hello", text: "Hello world" },
  { name: "leading-space", text: " Hello world" },
  { name: "trailing-space", text: "Hello world " },
  { name: "two-leading-spaces", text: "  two leading spaces" },
  { name: "space-runs", text: "multiple     spaces   inside  words" },
  { name: "tabs", text: "tabs\tand\t\ttabs \t mixed" },
  { name: "newlines", text: "line1\nline2\n\nline4\n" },
  { name: "only-newlines", text: "\n\n\n" },
  { name: "whitespace-mix", text: "   \n  \t \n x  \n" },
  { name: "crlf", text: "Windows\r\nline endings\r\n\r\nend" },
  { name: "trailing-spaces-many", text: "end with spaces     " },
  { name: "pangram", text: "The quick brown fox jumps over the lazy dog." },
  // contractions
  { name: "contractions", text: "I'm sure you'll see they've done it, haven't they? We'd go. It's John's." },
  { name: "contractions-upper", text: "SHOUTING DON'T WON'T I'LL WE'VE THEY'RE SHE'D" },
  { name: "quotes", text: "'quoted' \"double\" 'tis rock'n'roll ' s" },
  // digits
  { name: "numbers", text: "3.14159 2718281828 1234567890123 42 007" },
  { name: "long-number", text: "123456789012345678901234567890" },
  { name: "money-dates", text: "Price: $1,234.56 (approx. €1.100,00) on 2024-01-15 at 10:30am, 100% off" },
  { name: "ordinals", text: "1st 2nd 3rd 4th 21st-century x2 v1.2.3" },
  { name: "unicode-numbers", text: "½ ² ³ ① Ⅻ ٣٤٥ ߁ 𝟙𝟚" },
  // accents / combining marks
  { name: "accents", text: "café naïve résumé façade Ångström Øresund" },
  { name: "combining", text: "e\u0301 n\u0303 a\u0308 o\u0302\u0323 Z\u0351\u0352\u0353" },
  { name: "devanagari", text: "हिन्दी पाठ नमस्ते" },
  { name: "thai", text: "ภาษาไทย ง่ายนิดเดียว" },
  // scripts
  { name: "chinese", text: "中文测试：你好，世界！我想在apple工作1314151天～" },
  { name: "japanese", text: "日本語のテキスト、カタカナとひらがな。" },
  { name: "korean", text: "한국어 문장입니다. 안녕하세요" },
  { name: "greek-cyrillic", text: "Ελληνικά και Русский текст, нещо на Български" },
  { name: "rtl", text: "العربية نص עברית" },
  { name: "mixed-scripts", text: "apple苹果яблоко🍎りんご" },
  // emoji
  { name: "emoji", text: "Emoji: 😀😃😄 👍🏽 🇫🇷 👨‍👩‍👧‍👦" },
  { name: "rare-emoji", text: "🦙🫠🪿 and 🧑‍🚀 🚀" },
  { name: "emoji-tight", text: "ok👌ok🔥🔥🔥!" },
  // code
  { name: "python", text: "def fib(n):\n    if n < 2:\n        return n\n    return fib(n-1) + fib(n-2)\n" },
  { name: "javascript", text: "function add(a, b) { return a + b; } // sum\nconst x = [1, 2, 3].map((v) => v * 2);" },
  { name: "c", text: "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}" },
  { name: "html", text: "<html><body class=\"main\">&nbsp;&amp;</body></html>" },
  { name: "sql", text: "SELECT * FROM users WHERE id = 10 AND name LIKE '%bob%';" },
  { name: "url-email", text: "https://example.com/path?query=1&x=y#frag user@mail.org" },
  { name: "identifiers", text: "mixedCase camelCaseWords snake_case_words kebab-case-words __dunder__" },
  // punctuation / symbols
  { name: "punctuation", text: "punctuation!!! ??? ... ,,, ;;; --- ___ *** ((( )))" },
  { name: "symbols", text: "~tilde `backtick` ^caret |pipe| \\backslash @at #hash" },
  { name: "math", text: "∑ x² ≤ ∞ ± √2 → ∀ε>0 ∃δ" },
  { name: "unusual-spaces", text: "non-breaking\u00a0space and\u3000ideographic\u2009thin" },
  { name: "format-chars", text: "zero\u200bwidth\u200djoiner\u00adsoft" },
  { name: "lower-block", text: "\u2581literal \u2581\u2581 lower block" },
  { name: "nel-bom", text: "a\u0085b  \u0085\u0085 c \ufeffd" },
  // special-token text
  { name: "llama2-bos", text: "<s>", special: true },
  { name: "llama2-specials", text: "<s>[INST] Hi </s> after <unk> end", special: true },
  { name: "llama3-chat", text: "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>", special: true },
  { name: "llama3-specials-glued", text: "x<|eot_id|>y <|end_of_text|> z", special: true },
  { name: "byte-token-text", text: "<0x0A> literal byte-token text", special: true },
  { name: "fake-special", text: "<|not_a_token|> <s >", special: true },
];
