/** Typed arrays joined end to end (never spread into a call: long arrays would overflow the stack). */
export function concatFloat32(parts: ArrayLike<number>[]): Float32Array {
  const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}
