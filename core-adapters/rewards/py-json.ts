// Python's json.loads, on the host, as harness values (PyValue): a call-based test's expected result
// is read here, so it never enters the sandbox where the program could read or rewrite it.
import type { PyValue } from './python-harness.js';
import { asciiDigits, pyStrip } from './text.js';

/** Nesting json.loads reaches before Python's recursion limit stops it. */
const MAX_DEPTH = 900;
/** The most digits int() reads from text (Python 3.11's default int_max_str_digits). */
const MAX_INT_DIGITS = 4300;
const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/y;
const ESCAPES: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

class Reader {
  at = 0;
  constructor(readonly text: string) {}

  space(): void {
    while (this.at < this.text.length && ' \t\n\r'.includes(this.text[this.at])) this.at++;
  }

  take(word: string): boolean {
    if (!this.text.startsWith(word, this.at)) return false;
    this.at += word.length;
    return true;
  }

  value(depth: number): PyValue | undefined {
    if (depth > MAX_DEPTH) return undefined;
    this.space();
    const c = this.text[this.at];
    if (c === '"') {
      const s = this.string();
      return s === undefined ? undefined : { s };
    }
    if (c === '[') return this.array(depth);
    if (c === '{') return this.object(depth);
    if (this.take('true')) return true;
    if (this.take('false')) return false;
    if (this.take('null')) return null;
    if (this.take('NaN')) return { f: 'nan' };
    if (this.take('Infinity')) return { f: 'inf' };
    if (this.take('-Infinity')) return { f: '-inf' };
    NUMBER.lastIndex = this.at;
    const m = NUMBER.exec(this.text);
    if (!m) return undefined;
    this.at += m[0].length;
    if (m[1] !== undefined || m[2] !== undefined) return { f: m[0] };
    // Python 3.11+ refuses to read an int of more digits (sys.get_int_max_str_digits).
    return m[0].replace('-', '').length > MAX_INT_DIGITS ? undefined : { i: m[0] };
  }

  /** A string's contents (strict, as json.loads: no raw control characters); lone surrogates kept. */
  string(): string | undefined {
    this.at++;
    let out = '';
    for (;;) {
      const c = this.text[this.at++];
      if (c === undefined || c < ' ') return undefined;
      if (c === '"') return out;
      if (c !== '\\') {
        out += c;
        continue;
      }
      const e = this.text[this.at++];
      if (e === 'u') {
        const hex = this.text.slice(this.at, this.at + 4);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) return undefined;
        out += String.fromCharCode(parseInt(hex, 16));
        this.at += 4;
      } else if (e !== undefined && Object.hasOwn(ESCAPES, e)) {
        out += ESCAPES[e];
      } else {
        return undefined;
      }
    }
  }

  array(depth: number): PyValue | undefined {
    this.at++;
    const items: PyValue[] = [];
    this.space();
    if (this.take(']')) return { l: items };
    for (;;) {
      const item = this.value(depth + 1);
      if (item === undefined) return undefined;
      items.push(item);
      this.space();
      if (this.take(']')) return { l: items };
      if (!this.take(',')) return undefined;
    }
  }

  object(depth: number): PyValue | undefined {
    this.at++;
    const pairs = new Map<string, PyValue>();
    this.space();
    if (this.take('}')) return { d: [] };
    for (;;) {
      this.space();
      if (this.text[this.at] !== '"') return undefined;
      const key = this.string();
      this.space();
      if (key === undefined || !this.take(':')) return undefined;
      const value = this.value(depth + 1);
      if (value === undefined) return undefined;
      // A repeated key keeps its first place and its last value, as a dict does.
      pairs.set(key, value);
      this.space();
      if (this.take('}')) return { d: [...pairs].map(([k, v]) => [{ s: k }, v]) };
      if (!this.take(',')) return undefined;
    }
  }
}

/** Python's json.loads(text) as a PyValue; undefined where it raises (bad JSON, extra data, too deep). */
export function pyJsonLoads(text: string): PyValue | undefined {
  const reader = new Reader(text);
  const value = reader.value(1);
  reader.space();
  return value !== undefined && reader.at === text.length ? value : undefined;
}

const PY_INT = /^[+-]?[0-9](?:_?[0-9])*$/;

/** Python's int(text) on a str: surrounding whitespace, a sign, digits of any script, single underscores; undefined where it raises. */
export function pyIntOf(text: string): bigint | undefined {
  const t = asciiDigits(pyStrip(text));
  const digits = t.replaceAll('_', '');
  return PY_INT.test(t) && digits.replace(/^[+-]/, '').length <= MAX_INT_DIGITS ? BigInt(digits) : undefined;
}

/**
 * prime_code's reading of a call's expected result: json.loads, then a dict whose keys all read
 * as ints (or a list whose first item is such a dict) becomes [that dict with int keys].
 */
export function expectedCallResult(text: string): PyValue | undefined {
  const value = pyJsonLoads(text);
  if (value === undefined || value === null || typeof value !== 'object') return value;
  const dict = 'd' in value ? value : 'l' in value && value.l[0] !== null && typeof value.l[0] === 'object' && 'd' in value.l[0] ? value.l[0] : undefined;
  if (!dict) return value;
  const byKey = new Map<bigint, PyValue>();
  for (const [key, item] of dict.d) {
    const int = pyIntOf((key as { s: string }).s);
    if (int === undefined) return value;
    byKey.set(int, item);
  }
  return { l: [{ d: [...byKey].map(([k, v]) => [{ i: String(k) }, v]) }] };
}
