// Exact rationals on bigint: countdown answers are checked exactly, whatever the size of the literals.

function gcd(a: bigint, b: bigint): bigint {
  if (a < 0n) a = -a;
  if (b < 0n) b = -b;
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

/** A reduced fraction with a positive denominator. */
export class Fraction {
  readonly numerator: bigint;
  readonly denominator: bigint;

  constructor(numerator: bigint, denominator = 1n) {
    if (denominator === 0n) throw new RangeError('zero denominator');
    if (denominator < 0n) {
      numerator = -numerator;
      denominator = -denominator;
    }
    const divisor = gcd(numerator, denominator);
    this.numerator = numerator / divisor;
    this.denominator = denominator / divisor;
  }

  add(other: Fraction): Fraction {
    return new Fraction(this.numerator * other.denominator + other.numerator * this.denominator, this.denominator * other.denominator);
  }

  sub(other: Fraction): Fraction {
    return new Fraction(this.numerator * other.denominator - other.numerator * this.denominator, this.denominator * other.denominator);
  }

  mul(other: Fraction): Fraction {
    return new Fraction(this.numerator * other.numerator, this.denominator * other.denominator);
  }

  /** undefined for division by zero. */
  div(other: Fraction): Fraction | undefined {
    if (other.numerator === 0n) return undefined;
    return new Fraction(this.numerator * other.denominator, this.denominator * other.numerator);
  }

  equalsInteger(value: number): boolean {
    return Number.isInteger(value) && this.denominator === 1n && this.numerator === BigInt(value);
  }

  toNumber(): number {
    return Number(this.numerator) / Number(this.denominator);
  }
}
