// Small text helpers shared by the rule-based scorers.

/** The last `count` characters, counted in code points as Python slices strings. */
export function lastCharacters(text: string, count: number): string {
  const characters = [...text];
  return characters.length > count ? characters.slice(-count).join('') : text;
}
