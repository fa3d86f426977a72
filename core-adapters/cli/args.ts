// Flag parsing shared by the subcommands; bad values are InputErrors that name the flag.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { InputError } from '../errors.js';

export type Options = NonNullable<ParseArgsConfig['options']>;

export function parseFlags(command: string, argv: string[], options: Options) {
  try {
    return parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  } catch (e) {
    throw new InputError((e as Error).message);
  }
}

export function requiredString(command: string, values: Record<string, unknown>, flag: string): string {
  const value = values[flag];
  if (typeof value !== 'string' || value === '') throw new InputError(`--${flag} is required`);
  return value;
}

export function numberFlag(
  command: string,
  values: Record<string, unknown>,
  flag: string,
  fallback: number,
  check: { integer?: boolean; min?: number; max?: number } = {},
): number {
  const raw = values[flag];
  if (raw === undefined) return fallback;
  const value = Number(raw);
  const bad =
    !Number.isFinite(value) ||
    (check.integer && !Number.isInteger(value)) ||
    (check.min !== undefined && value < check.min) ||
    (check.max !== undefined && value > check.max);
  if (bad) {
    const range = [check.integer ? 'an integer' : 'a number', check.min !== undefined ? `>= ${check.min}` : '', check.max !== undefined ? `<= ${check.max}` : '']
      .filter(Boolean)
      .join(' ');
    throw new InputError(`--${flag} must be ${range}; got '${String(raw)}'`);
  }
  return value;
}

export const BACKEND_FLAG: Options = { backend: { type: 'string', default: 'auto' } };
