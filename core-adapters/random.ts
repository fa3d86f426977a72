/** A small seeded PRNG (mulberry32) for sampling, shuffling and initialisation: same seed, same stream. */
export class Rng {
  private state: number;
  private spare: number | undefined;

  constructor(seed: number) {
    this.state = (Math.floor(seed) ^ 0x9e3779b9) >>> 0;
  }

  /** An independent stream for item `index` under `seed` (e.g. one per batch row). */
  static derive(seed: number, index: number): Rng {
    return new Rng(Rng.deriveSeed(seed, index));
  }

  /** The seed of derive(seed, index)'s stream: new Rng(deriveSeed(seed, index)) draws the same numbers. */
  static deriveSeed(seed: number, index: number): number {
    return Math.imul(Math.floor(seed) ^ 0x85ebca6b, 0x27d4eb2f) ^ Math.imul(index + 1, 0x165667b1);
  }

  /**
   * A 32-bit seed for an integer seed of up to 53 bits (a request's 64-bit seed, as JSON carries
   * it): seeds that fit 32 bits are kept, larger ones mix their high bits in, so seeds that differ
   * only above bit 32 draw different streams instead of the same one.
   */
  static foldSeed(seed: number): number {
    if (seed >= -(2 ** 31) && seed < 2 ** 32) return seed;
    const high = Math.floor(seed / 2 ** 32);
    const low = seed - high * 2 ** 32;
    return (Math.imul(high ^ 0x5bd1e995, 0x27d4eb2f) ^ low) >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Standard normal (Box-Muller). */
  normal(): number {
    if (this.spare !== undefined) {
      const s = this.spare;
      this.spare = undefined;
      return s;
    }
    let u = 0;
    while (u === 0) u = this.next();
    const v = this.next();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }

  /** Integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** Fisher-Yates shuffle in place. */
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      [items[i], items[j]] = [items[j], items[i]];
    }
    return items;
  }
}
