// The safetensors format: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [start, end]}, __metadata__?}, then the raw row-major bytes.
// Everything is read into float32, since tfjs computes in float32.
import fs from 'node:fs';
import path from 'node:path';
import { InputError } from '../errors.js';
import { OPERATOR_FILES, openRegularFile, type FileAccess } from './files.js';

export interface TensorEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

export interface SafetensorsHeader {
  tensors: Map<string, TensorEntry>;
  metadata: Record<string, string>;
  /** Byte offset of the data section in the file. */
  dataStart: number;
}

export interface F32Tensor {
  shape: number[];
  data: Float32Array;
  /** The dtype stored in the file, before upcasting. */
  storedDtype: string;
}

const BYTES: Record<string, number> = { F64: 8, F32: 4, F16: 2, BF16: 2 };
const MAX_HEADER = 100_000_000;

function fail(file: string, problem: string): never {
  throw new InputError(`${file}: ${problem}`);
}

function readExactly(fd: number, length: number, position: number, file: string): Buffer {
  const buffer = Buffer.alloc(length);
  let done = 0;
  while (done < length) {
    const n = fs.readSync(fd, buffer, done, length - done, position + done);
    if (n === 0) fail(file, `file is truncated (wanted ${length} bytes at offset ${position})`);
    done += n;
  }
  return buffer;
}

/** Parses and validates the header of a .safetensors file. */
export function readHeader(file: string, access: FileAccess = OPERATOR_FILES): SafetensorsHeader {
  const fd = openRegularFile(file, access);
  try {
    const size = fs.fstatSync(fd).size;
    if (size < 8) fail(file, 'not a safetensors file (shorter than its 8-byte header length)');
    const headerLength = Number(readExactly(fd, 8, 0, file).readBigUInt64LE(0));
    if (headerLength <= 0 || headerLength > MAX_HEADER || 8 + headerLength > size) {
      fail(file, `not a safetensors file (header length ${headerLength} for a file of ${size} bytes)`);
    }
    let json: unknown;
    try {
      json = JSON.parse(readExactly(fd, headerLength, 8, file).toString('utf8'));
    } catch {
      fail(file, 'corrupt safetensors header (not valid JSON)');
    }
    if (typeof json !== 'object' || json === null || Array.isArray(json)) fail(file, 'corrupt safetensors header (not an object)');
    const dataStart = 8 + headerLength;
    const dataLength = size - dataStart;
    const tensors = new Map<string, TensorEntry>();
    let metadata: Record<string, string> = {};
    for (const [name, value] of Object.entries(json as Record<string, unknown>)) {
      if (name === '__metadata__') {
        const ok = value === null || (typeof value === 'object' && !Array.isArray(value) && Object.values(value).every((v) => typeof v === 'string'));
        if (!ok) fail(file, 'corrupt safetensors header (__metadata__ must map names to strings)');
        metadata = (value ?? {}) as Record<string, string>;
        continue;
      }
      const entry = value as Partial<TensorEntry>;
      const where = `tensor '${name}'`;
      if (!entry || typeof entry.dtype !== 'string' || !Array.isArray(entry.shape) || !Array.isArray(entry.data_offsets)) {
        fail(file, `${where} has no dtype, shape or data_offsets`);
      }
      const bytes = BYTES[entry.dtype];
      if (!bytes) fail(file, `${where} has dtype ${entry.dtype}; supported: ${Object.keys(BYTES).join(', ')}`);
      const [start, end] = entry.data_offsets;
      const count = entry.shape.reduce((a, b) => a * b, 1);
      if (!entry.shape.every((d) => Number.isInteger(d) && d >= 0)) fail(file, `${where} has an invalid shape [${entry.shape}]`);
      if (!Number.isInteger(start) || !Number.isInteger(end) || start < 0 || end > dataLength || end - start !== count * bytes) {
        fail(file, `${where} has data_offsets [${start}, ${end}] that do not fit its shape [${entry.shape}] (${entry.dtype}) or the file`);
      }
      tensors.set(name, { dtype: entry.dtype, shape: entry.shape, data_offsets: [start, end] });
    }
    // The format lays tensors out one after another: two sharing bytes is a corrupt (or hostile) file.
    const ranges = [...tensors].map(([name, t]) => ({ name, start: t.data_offsets[0], end: t.data_offsets[1] })).sort((a, b) => a.start - b.start);
    for (let i = 1; i < ranges.length; i++) {
      if (ranges[i].start < ranges[i - 1].end) fail(file, `tensors '${ranges[i - 1].name}' and '${ranges[i].name}' overlap in the data section`);
    }
    return { tensors, metadata, dataStart };
  } finally {
    fs.closeSync(fd);
  }
}

// Bit patterns of half-precision floats widened to float32.
function f16ToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * fraction * 2 ** -24;
  if (exponent === 31) return fraction ? NaN : sign * Infinity;
  return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
}

function decode(raw: Buffer, dtype: string, count: number): Float32Array {
  const out = new Float32Array(count);
  if (dtype === 'F32') {
    new Uint8Array(out.buffer).set(raw);
  } else if (dtype === 'BF16') {
    const bits = new Uint32Array(out.buffer);
    for (let i = 0; i < count; i++) bits[i] = raw.readUInt16LE(2 * i) << 16;
  } else if (dtype === 'F16') {
    for (let i = 0; i < count; i++) out[i] = f16ToF32(raw.readUInt16LE(2 * i));
  } else {
    for (let i = 0; i < count; i++) out[i] = raw.readDoubleLE(8 * i);
  }
  return out;
}

/** Reads the named tensors (all when `names` is omitted), upcast to float32. */
export function readTensors(file: string, names?: Iterable<string>, access: FileAccess = OPERATOR_FILES): Map<string, F32Tensor> {
  const header = readHeader(file, access);
  const wanted = names ? [...names] : [...header.tensors.keys()];
  const out = new Map<string, F32Tensor>();
  const fd = openRegularFile(file, access);
  try {
    for (const name of wanted) {
      const entry = header.tensors.get(name);
      if (!entry) fail(file, `tensor '${name}' is missing`);
      const [start, end] = entry.data_offsets;
      const count = entry.shape.reduce((a, b) => a * b, 1);
      const raw = readExactly(fd, end - start, header.dataStart + start, file);
      out.set(name, { shape: entry.shape, data: decode(raw, entry.dtype, count), storedDtype: entry.dtype });
    }
  } finally {
    fs.closeSync(fd);
  }
  return out;
}

/**
 * Refuses weights holding NaN or an infinity, naming the file, tensor and index: a diverged run's
 * weights, which a model samples NaN from (they once crashed the native sampler).
 */
export function checkFiniteWeights(file: string, tensors: Map<string, F32Tensor>): void {
  for (const [name, { data }] of tensors) {
    for (let i = 0; i < data.length; i++) if (data[i] - data[i] !== 0) fail(file, `tensor '${name}' holds ${data[i]} at flat index ${i}; weights must be finite`);
  }
}

/** Writes float32 tensors in name order, header padded with spaces to 8-byte alignment. */
export function writeSafetensors(
  file: string,
  tensors: Map<string, { shape: number[]; data: Float32Array }>,
  metadata: Record<string, string> = { format: 'pt' },
): void {
  const names = [...tensors.keys()].sort();
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const name of names) {
    const { shape, data } = tensors.get(name)!;
    const count = shape.reduce((a, b) => a * b, 1);
    if (count !== data.length) throw new Error(`writeSafetensors: ${name} has ${data.length} values for shape [${shape}]`);
    header[name] = { dtype: 'F32', shape, data_offsets: [offset, offset + 4 * count] };
    offset += 4 * count;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + Buffer.byteLength(json)) % 8)) % 8);
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const fd = fs.openSync(file, 'w');
  try {
    fs.writeSync(fd, length);
    fs.writeSync(fd, json);
    for (const name of names) {
      const { data } = tensors.get(name)!;
      fs.writeSync(fd, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    }
  } finally {
    fs.closeSync(fd);
  }
}
