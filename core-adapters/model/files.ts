// Opening a checkpoint's files. Only regular files are read (a FIFO would block the event loop, a
// device such as /dev/zero would stream into memory without end), JSON files are bounded in size,
// shard names from an index stay in their directory, and a directory a client named (flowrl
// serve's --weights-root) is read without following symbolic links, so nothing outside it is read.
import fs from 'node:fs';
import path from 'node:path';
import { InputError } from '../errors.js';

/** How far a checkpoint's files are trusted. */
export interface FileAccess {
  /** Follow symbolic links (a model directory the operator named, such as a Hugging Face cache snapshot). */
  followLinks: boolean;
}

/** Files the operator named: links followed (the Hugging Face cache links every file to a blob). */
export const OPERATOR_FILES: FileAccess = { followLinks: true };
/** Files under a directory a client named: links refused. */
export const CONFINED_FILES: FileAccess = { followLinks: false };

/** Largest JSON file of a checkpoint (config, index, adapter config) read: real ones are kilobytes. */
export const MAX_CHECKPOINT_JSON_BYTES = 16 * 2 ** 20;

/** Opens `file` for reading if it is a regular file (the error names the file); the caller closes the descriptor. */
export function openRegularFile(file: string, access: FileAccess = OPERATOR_FILES): number {
  // Non-blocking, so that opening a FIFO returns at once and is refused below instead of waiting for a writer.
  const flags = fs.constants.O_RDONLY | fs.constants.O_NONBLOCK | (access.followLinks ? 0 : fs.constants.O_NOFOLLOW);
  let fd: number;
  try {
    fd = fs.openSync(file, flags);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new InputError(`${file}: file not found`);
    if (code === 'ELOOP') throw new InputError(`${file}: a symbolic link; files under an allowed weights root must be regular files`);
    throw new InputError(`${file}: cannot open (${code ?? String(e)})`);
  }
  if (!fs.fstatSync(fd).isFile()) {
    fs.closeSync(fd);
    throw new InputError(`${file}: not a regular file`);
  }
  return fd;
}

/** A JSON file of a checkpoint, parsed; errors name the file and never quote its content. */
export function readJsonFile(file: string, access: FileAccess = OPERATOR_FILES, maxBytes = MAX_CHECKPOINT_JSON_BYTES): unknown {
  const fd = openRegularFile(file, access);
  let text: string;
  try {
    const size = fs.fstatSync(fd).size;
    if (size > maxBytes) throw new InputError(`${file}: ${size} bytes; a checkpoint's JSON file may hold at most ${maxBytes}`);
    text = fs.readFileSync(fd, 'utf8');
  } finally {
    fs.closeSync(fd);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    // V8's message quotes the text; the position is enough to find the fault.
    const at = /position (\d+)/.exec((e as Error).message);
    throw new InputError(`${file}: not valid JSON${at ? ` (at position ${at[1]})` : ''}`);
  }
}

/** `dir/name` for a file name an index gives; a name with a directory part ('../x', 'a/b') is refused. */
export function fileInDirectory(dir: string, name: unknown, source: string): string {
  if (typeof name !== 'string' || !name || name === '.' || name === '..' || name.includes('/') || name.includes('\\') || name.includes('\0')) {
    throw new InputError(`${source}: ${JSON.stringify(name)} is not a file name in ${dir}`);
  }
  return path.join(dir, name);
}
