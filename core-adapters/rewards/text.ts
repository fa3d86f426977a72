// Small text helpers shared by the rule-based scorers: Python's string semantics where verl's scorers
// rely on them (code points, str.strip, str.splitlines, str.isdigit), so a port gives verl's answers.

/** The last `count` characters, counted in code points as Python slices strings. */
export function lastCharacters(text: string, count: number): string {
  const characters = [...text];
  return characters.length > count ? characters.slice(-count).join('') : text;
}

/** Python's whitespace (str.isspace, and re's \s on str): JavaScript's \s without U+FEFF, plus U+001C-U+001F and U+0085. */
export const PY_SPACE = '[\\t\\n\\v\\f\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]';
const SPACE_RUN = new RegExp(`${PY_SPACE}+`);

/** Whether a UTF-16 unit is Python whitespace (PY_SPACE's class; all of it is in the BMP). */
export function isPySpace(code: number): boolean {
  return (
    (code >= 0x09 && code <= 0x0d) ||
    (code >= 0x1c && code <= 0x20) ||
    code === 0x85 ||
    code === 0xa0 ||
    code === 0x1680 ||
    (code >= 0x2000 && code <= 0x200a) ||
    code === 0x2028 ||
    code === 0x2029 ||
    code === 0x202f ||
    code === 0x205f ||
    code === 0x3000
  );
}

/**
 * `text` without the leading and trailing units `isSpace` accepts. A scan from each end: a
 * regular expression anchored at the end (`\s+$`) retries every inner run of spaces, and a
 * program's output of one long run took seconds per 40 KB (its square).
 */
export function stripWhere(text: string, isSpace: (code: number) => boolean): string {
  let start = 0;
  let end = text.length;
  while (start < end && isSpace(text.charCodeAt(start))) start++;
  while (end > start && isSpace(text.charCodeAt(end - 1))) end--;
  return start === 0 && end === text.length ? text : text.slice(start, end);
}

/** Python's str.strip() with no argument. */
export function pyStrip(text: string): string {
  return stripWhere(text, isPySpace);
}

/** Python's str.split() with no argument: runs of whitespace separate, none empty. */
export function pySplit(text: string): string[] {
  return pyStrip(text).split(SPACE_RUN).filter((part) => part !== '');
}

/** Python's str.splitlines(): every line boundary Python knows, no trailing empty line. */
export function pySplitLines(text: string): string[] {
  if (text === '') return [];
  const lines = text.split(/\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]/);
  if (lines.at(-1) === '') lines.pop();
  return lines;
}

// Python's isdigit() beyond decimal digits (Numeric_Type=Digit): superscripts, subscripts, circled,
// parenthesised and dingbat digits, and a few scripts' own.
const OTHER_DIGITS = '\\u00b2\\u00b3\\u00b9\\u1369-\\u1371\\u19da\\u2070\\u2074-\\u2079\\u2080-\\u2089\\u2460-\\u2468\\u2474-\\u247c\\u2488-\\u2490\\u24ea\\u24f5-\\u24fd\\u24ff\\u2776-\\u277e\\u2780-\\u2788\\u278a-\\u2792\\u{10a40}-\\u{10a43}\\u{10e60}-\\u{10e68}\\u{11052}-\\u{1105a}\\u{1f100}-\\u{1f10a}';
const PY_DIGITS = new RegExp(`^[\\p{Nd}${OTHER_DIGITS}]+$`, 'u');

/** Python's str.isdigit(). */
export function pyIsDigit(text: string): boolean {
  return PY_DIGITS.test(text);
}

const DECIMAL_DIGIT = /\p{Nd}/u;

/**
 * Decimal digits of any script as ASCII digits, as Python's int() and float() read them. Unicode
 * encodes each script's digits as a run of ten from its zero, and runs of one script are adjacent,
 * so a digit's value is its distance from the start of its run of digits, modulo 10.
 */
export function asciiDigits(text: string): string {
  return text.replace(/\p{Nd}/gu, (digit) => {
    if (digit >= '0' && digit <= '9') return digit;
    const code = digit.codePointAt(0)!;
    let value = DIGIT_VALUES.get(code);
    if (value === undefined) {
      let start = code;
      while (DECIMAL_DIGIT.test(String.fromCodePoint(start - 1))) start--;
      value = String((code - start) % 10);
      // A program's output may hold a million of them: each is looked up once.
      DIGIT_VALUES.set(code, value);
    }
    return value;
  });
}

/** Each non-ASCII decimal digit's value, found once. */
const DIGIT_VALUES = new Map<number, string>();
