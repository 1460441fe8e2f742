// Error messages that quote a file's bytes (a key, a tensor name, a string value) stay short and
// printable whatever the file holds: control characters are escaped, and a long message keeps its
// beginning and its end (where the offset is) around an elision.

/** Largest message length (characters) after `safeMessage`. */
export const MAX_MESSAGE = 480;

/** The characters a message must not carry as they are: C0 (tab and newline included: a message is one line), DEL, C1, and the Unicode line and paragraph separators. */
// eslint-disable-next-line no-control-regex
export const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/;

/** `s` with control characters (CONTROL_CHARACTERS) written as \xNN / \uNNNN escapes, and cut to MAX_MESSAGE. */
export function safeMessage(s: string, max = MAX_MESSAGE): string {
  let out = s.replace(new RegExp(CONTROL_CHARACTERS.source, "g"), (c) => {
    const code = c.charCodeAt(0);
    return code < 0x100 ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
  });
  if (out.length > max) {
    const tail = Math.floor(max / 4);
    out = `${out.slice(0, max - tail - 20)} …(${out.length - max + 20} characters)… ${out.slice(out.length - tail)}`;
  }
  return out;
}
