// TensorBoard event files (trainer.logger: tensorboard; verl v0.9.0's _TensorboardAdapter in
// verl/utils/tracking.py): each logged step is one Event holding a Summary of scalar values, framed
// as a TFRecord, in $TENSORBOARD_DIR or tensorboard_log/<project_name>/<experiment_name> (verl's
// place). The Event is encoded by protobufjs and checksummed by @aws-crypto/crc32c; the framing is
// TensorFlow's record format (tensorflow/core/lib/io/record_writer.cc): the payload's length (u64 LE),
// the length's masked CRC32C (u32 LE), the payload, the payload's masked CRC32C. A tracker that fails
// costs the run a warning, never the run.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { crc32c } from '@aws-crypto/crc32c';
import { inject, injectable } from 'inversify';
import protobuf from 'protobufjs';
import type { Config } from '../config/load.js';
import type { Metrics } from '../contracts/index.js';
import { TOKENS } from '../tokens.js';
import type { RunAwareSink } from './metrics.js';

// The field numbers of tensorboard/compat/proto/event.proto, summary.proto and tensor.proto
// (tensorflow/tensorboard 2.21.0): Event.wall_time 1, step 2, file_version 3, summary 5;
// Summary.value 1; Summary.Value.tag 1, simple_value 2, tensor 8, metadata 9;
// SummaryMetadata.plugin_data 1 {plugin_name 1, content 2}; TensorProto.dtype 1 (DT_STRING = 7),
// tensor_shape 2 (empty: a scalar), string_val 8. Text is the text plugin's ("text", empty content).
const root = new protobuf.Root();
const PluginData = new protobuf.Type('PluginData').add(new protobuf.Field('pluginName', 1, 'string')).add(new protobuf.Field('content', 2, 'bytes'));
const SummaryMetadata = new protobuf.Type('SummaryMetadata').add(new protobuf.Field('pluginData', 1, 'PluginData'));
const TensorShape = new protobuf.Type('TensorShape');
const Tensor = new protobuf.Type('Tensor').add(new protobuf.Field('dtype', 1, 'int32')).add(new protobuf.Field('tensorShape', 2, 'TensorShape')).add(new protobuf.Field('stringVal', 8, 'bytes', 'repeated'));
const SummaryValue = new protobuf.Type('SummaryValue')
  .add(new protobuf.Field('tag', 1, 'string'))
  .add(new protobuf.Field('simpleValue', 2, 'float'))
  .add(new protobuf.Field('tensor', 8, 'Tensor'))
  .add(new protobuf.Field('metadata', 9, 'SummaryMetadata'));
const DT_STRING = 7;
const Summary = new protobuf.Type('Summary').add(new protobuf.Field('value', 1, 'SummaryValue', 'repeated'));
const EventType = new protobuf.Type('Event')
  .add(new protobuf.Field('wallTime', 1, 'double'))
  .add(new protobuf.Field('step', 2, 'int64'))
  .add(new protobuf.Field('fileVersion', 3, 'string'))
  .add(new protobuf.Field('summary', 5, 'Summary'));
root.define('tensorboard').add(PluginData).add(SummaryMetadata).add(TensorShape).add(Tensor).add(SummaryValue).add(Summary).add(EventType);

/** The version string TensorBoard's readers expect in a file's first event. */
export const EVENT_FILE_VERSION = 'brain.Event:2';

/** TensorFlow's masked CRC32C (crc32c.h: rotate right by 15, add 0xa282ead8). */
function maskedCrc(bytes: Uint8Array): number {
  const crc = crc32c(bytes);
  return (((crc >>> 15) | (crc << 17)) + 0xa282ead8) >>> 0;
}

/** One TFRecord around `payload`. */
export function tfRecord(payload: Uint8Array): Buffer {
  const header = Buffer.alloc(12);
  header.writeBigUInt64LE(BigInt(payload.length), 0);
  header.writeUInt32LE(maskedCrc(header.subarray(0, 8)), 8);
  const footer = Buffer.alloc(4);
  footer.writeUInt32LE(maskedCrc(payload), 0);
  return Buffer.concat([header, payload, footer]);
}

/** An Event's bytes: the file-version event, or a step's scalars (finite numbers only) and texts (the text plugin's). */
export function encodeEvent(event: { wallTime: number; step?: number; fileVersion?: string; scalars?: Metrics; texts?: Record<string, string> }): Uint8Array {
  const message: Record<string, unknown> = { wallTime: event.wallTime };
  if (event.step !== undefined) message.step = event.step;
  if (event.fileVersion !== undefined) message.fileVersion = event.fileVersion;
  if (event.scalars || event.texts) {
    const scalars = Object.entries(event.scalars ?? {}).filter(([, v]) => Number.isFinite(v)).map(([tag, simpleValue]) => ({ tag, simpleValue }));
    const texts = Object.entries(event.texts ?? {}).map(([tag, text]) => ({ tag, metadata: { pluginData: { pluginName: 'text' } }, tensor: { dtype: DT_STRING, tensorShape: {}, stringVal: [Buffer.from(text, 'utf8')] } }));
    message.summary = { value: [...scalars, ...texts] };
  }
  return EventType.encode(EventType.fromObject(message)).finish();
}

/** verl's log_generations_to_tensorboard layout: the step, then each sample's input, output and score, as Markdown. */
export function generationsMarkdown(step: number, generations: ValGenerationText[]): string {
  return [`**Generation Results - Step ${step}**`, ...generations.map((g, i) => `### Sample ${i + 1}\n**Input:** ${g.prompt}\n\n**Output:** ${g.response}\n\n**Score:** ${g.score}`)].join('\n\n');
}

/** What a sink is given of one logged validation generation. */
export interface ValGenerationText {
  prompt: string;
  response: string;
  score: number;
}

/** Where a run's event files go: $TENSORBOARD_DIR, else tensorboard_log/<project>/<experiment> (as verl). */
export function tensorboardDir(config: Config): string {
  return process.env.TENSORBOARD_DIR ?? path.join('tensorboard_log', config.trainer.project_name, config.trainer.experiment_name);
}

/** Event files this process started (the name's last part: two runs in one second never share a file). */
let eventFiles = 0;

@injectable()
export class TensorBoardSink implements RunAwareSink {
  private file?: string;
  private failed = false;

  constructor(@inject(TOKENS.Config) private readonly config: Config) {}

  begin(): void {
    const dir = tensorboardDir(this.config);
    // A new file per start (as SummaryWriter does): TensorBoard reads every events file in the directory.
    this.file = path.join(dir, `events.out.tfevents.${Math.floor(Date.now() / 1000)}.${os.hostname()}.${process.pid}.${eventFiles++}`);
    this.write(() => {
      fs.mkdirSync(dir, { recursive: true });
      fs.writeFileSync(this.file!, tfRecord(encodeEvent({ wallTime: Date.now() / 1000, fileVersion: EVENT_FILE_VERSION })));
    });
  }

  log(step: number, metrics: Metrics): void {
    this.write(() => fs.appendFileSync(this.file!, tfRecord(encodeEvent({ wallTime: Date.now() / 1000, step, scalars: metrics }))));
  }

  /** trainer.log_val_generations: one text summary per validation (verl's tag and layout). */
  logGenerations(step: number, generations: ValGenerationText[]): void {
    this.write(() => fs.appendFileSync(this.file!, tfRecord(encodeEvent({ wallTime: Date.now() / 1000, step, texts: { val_generations: generationsMarkdown(step, generations) } }))));
  }

  close(): void {}

  private write(action: () => void): void {
    if (this.failed || !this.file) return;
    try {
      action();
    } catch (e) {
      this.failed = true;
      console.warn(`[flowrl] trainer.logger tensorboard: cannot write ${this.file} (${(e as Error).message}); the run goes on without it`);
    }
  }
}

/** The events of an event file (checks each record's CRCs): for `flowrl` tests and tools that read runs back. */
export function readEventFile(bytes: Uint8Array): { wallTime: number; step: number; fileVersion?: string; scalars: Record<string, number>; texts: Record<string, string> }[] {
  const data = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const events = [];
  for (let offset = 0; offset < data.length; ) {
    const length = Number(data.readBigUInt64LE(offset));
    if (data.readUInt32LE(offset + 8) !== maskedCrc(data.subarray(offset, offset + 8))) throw new Error(`event file: bad length checksum at byte ${offset}`);
    const payload = data.subarray(offset + 12, offset + 12 + length);
    if (data.readUInt32LE(offset + 12 + length) !== maskedCrc(payload)) throw new Error(`event file: bad payload checksum at byte ${offset}`);
    offset += 16 + length;
    const event = EventType.toObject(EventType.decode(payload), { longs: Number }) as { wallTime: number; step?: number; fileVersion?: string; summary?: { value?: { tag: string; simpleValue?: number; tensor?: { stringVal?: Uint8Array[] } }[] } };
    const values = event.summary?.value ?? [];
    events.push({
      wallTime: event.wallTime,
      step: event.step ?? 0,
      fileVersion: event.fileVersion,
      scalars: Object.fromEntries(values.filter((v) => !v.tensor).map((v) => [v.tag, v.simpleValue ?? 0])),
      texts: Object.fromEntries(values.filter((v) => v.tensor).map((v) => [v.tag, Buffer.from(v.tensor!.stringVal?.[0] ?? []).toString('utf8')])),
    });
  }
  return events;
}
