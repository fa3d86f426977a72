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

/** Row indices by group id (the prompt groups of a batch's uid column), in first-seen order. */
export function rowsByGroup(ids: readonly string[]): number[][] {
  const groups = new Map<string, number[]>();
  ids.forEach((id, row) => {
    const rows = groups.get(id);
    if (rows) rows.push(row);
    else groups.set(id, [row]);
  });
  return [...groups.values()];
}

/** Contiguous row ranges splitting `rows` into `parts` near-equal shards (empty ones dropped). */
export function shardRanges(rows: number, parts: number): [number, number][] {
  const out: [number, number][] = [];
  for (let i = 0; i < parts; i++) {
    const start = Math.round((i * rows) / parts);
    const end = Math.round(((i + 1) * rows) / parts);
    if (end > start) out.push([start, end]);
  }
  return out;
}
