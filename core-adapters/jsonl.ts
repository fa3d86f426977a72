// JSON-lines files (data rows, metrics.jsonl, val_prompts.jsonl): one reader, one message for a bad line.
import fs from 'node:fs';
import { InputError } from './errors.js';

/** A parsed line and where it came from ("FILE line N"), for the caller's own checks. */
export interface JsonLine {
  value: unknown;
  where: string;
}

/** Each non-blank line of a JSON-lines file, parsed; a line that is not JSON is an InputError naming the file and line. */
export function readJsonLines(file: string): JsonLine[] {
  const out: JsonLine[] = [];
  fs.readFileSync(file, 'utf8')
    .split('\n')
    .forEach((raw, i) => {
      const line = raw.trim();
      if (!line) return;
      const where = `${file} line ${i + 1}`;
      try {
        out.push({ value: JSON.parse(line), where });
      } catch (e) {
        throw new InputError(`${where}: not valid JSON (${(e as Error).message})`);
      }
    });
  return out;
}
