// Run f with stderr silenced (CLI progress and load messages in tests that call main()).
export async function quietly<T>(f: () => Promise<T>): Promise<T> {
  const w = process.stderr.write.bind(process.stderr);
  process.stderr.write = (() => true) as typeof process.stderr.write;
  try {
    return await f();
  } finally {
    process.stderr.write = w;
  }
}
