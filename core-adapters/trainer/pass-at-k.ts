// pass@k as the papers compute it (Chen et al. 2021, "Evaluating Large Language Models Trained on
// Code"): from n samples of which c are correct, the unbiased estimate of the chance that at least
// one of k samples drawn without replacement is correct, 1 - C(n - c, k) / C(n, k).

/** The unbiased pass@k from n samples with c correct, as the product 1 - prod_{i=n-c+1..n} (1 - k/i). */
export function passAtK(n: number, c: number, k: number): number {
  if (!(Number.isInteger(n) && Number.isInteger(c) && Number.isInteger(k)) || n < 1 || c < 0 || c > n || k < 1 || k > n) {
    throw new Error(`passAtK: needs whole numbers with 0 <= c <= n and 1 <= k <= n; got n ${n}, c ${c}, k ${k}`);
  }
  if (n - c < k) return 1;
  let allWrong = 1;
  for (let i = n - c + 1; i <= n; i++) allWrong *= 1 - k / i;
  return 1 - allWrong;
}

/** j of a `val/pass@j` metric key; null for any other key (val/pass@k included). */
export function passAtJOf(key: string): number | null {
  const j = /^val\/pass@(\d+)$/.exec(key)?.[1];
  return j === undefined ? null : Number(j);
}

/** The j of the `val/pass@j` keys among `keys`, ascending. */
export function passAtJs(keys: Iterable<string>): number[] {
  return [...keys]
    .map(passAtJOf)
    .filter((j) => j !== null)
    .sort((a, b) => a - b);
}

/** The k reported for n samples per prompt: the powers of two below n, and n. */
export function reportedKs(n: number): number[] {
  const ks: number[] = [];
  for (let k = 1; k < n; k *= 2) ks.push(k);
  ks.push(n);
  return ks;
}
