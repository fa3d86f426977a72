// Checkpoints under <default_local_dir>/checkpoints/global_step_N/, each written to a temporary
// directory and renamed into place, so a write cut off part-way leaves the previous one usable.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { inject, injectable } from 'inversify';
import type { Config } from '../config/load.js';
import type { CheckpointInfo, CheckpointStore } from '../contracts/index.js';
import { InputError } from '../errors.js';
import { writeDirectoryAtomically } from '../model/checkpoint.js';
import { TOKENS } from '../tokens.js';

/** Written last inside every checkpoint: its presence marks the checkpoint complete. */
export const TRAINER_STATE_FILE = 'trainer_state.json';

const STEP_DIR = /^global_step_(\d+)$/;

/** What a checkpoint needs besides the models to continue exactly where it stopped. */
export interface TrainerState {
  global_step: number;
  data_position: { epoch: number; offset: number };
  kl_coef: number;
  /**
   * The step's metrics line (without the save's own timing), so a run killed after the checkpoint
   * but before its metrics append gets that line back at resume.
   */
  metrics?: Record<string, number>;
  /** trainer.v1 separate_async: the launch batch a resumed run samples first (data_position is where it begins). */
  rollout_launch?: number;
}

/** Reads and checks DIR/trainer_state.json; a corrupt file is an InputError naming it. */
export function readTrainerState(dir: string): TrainerState {
  const file = path.join(dir, TRAINER_STATE_FILE);
  let state: Partial<TrainerState>;
  try {
    state = JSON.parse(fs.readFileSync(file, 'utf8')) as Partial<TrainerState>;
  } catch (e) {
    throw new InputError(`${file}: not a readable trainer state (${(e as Error).message})`);
  }
  const position = state.data_position;
  const whole = (v: unknown) => Number.isInteger(v) && (v as number) >= 0;
  if (!whole(state.global_step) || !position || !whole(position.epoch) || !whole(position.offset) || typeof state.kl_coef !== 'number') {
    throw new InputError(`${file}: needs global_step, data_position {epoch, offset} and kl_coef`);
  }
  return state as TrainerState;
}

export function isCheckpoint(dir: string): boolean {
  return fs.existsSync(path.join(dir, TRAINER_STATE_FILE));
}

/** Written last into every checkpoint: each file's size and SHA-256. */
export const CHECKPOINT_MANIFEST = 'manifest.json';

interface ManifestEntry {
  size: number;
  sha256: string;
}

function filesUnder(dir: string): string[] {
  return (fs.readdirSync(dir, { recursive: true, encoding: 'utf8' }) as string[]).filter((name) => fs.statSync(path.join(dir, name)).isFile()).sort();
}

function sha256(file: string): string {
  return createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

/** Writes dir/manifest.json listing every file already in dir. */
export function writeCheckpointManifest(dir: string): void {
  const files: Record<string, ManifestEntry> = {};
  for (const name of filesUnder(dir)) files[name] = { size: fs.statSync(path.join(dir, name)).size, sha256: sha256(path.join(dir, name)) };
  fs.writeFileSync(path.join(dir, CHECKPOINT_MANIFEST), JSON.stringify({ files }, null, 1) + '\n');
}

/**
 * What is wrong with a checkpoint, naming the file, or undefined when every file its manifest lists
 * is there with its size and hash. A checkpoint from before manifests (none written) passes.
 */
export function checkpointDamage(dir: string): string | undefined {
  const file = path.join(dir, CHECKPOINT_MANIFEST);
  if (!fs.existsSync(file)) return undefined;
  let files: Record<string, ManifestEntry>;
  try {
    files = (JSON.parse(fs.readFileSync(file, 'utf8')) as { files: Record<string, ManifestEntry> }).files;
    if (typeof files !== 'object' || files === null) throw new Error('no files');
  } catch (e) {
    return `${file}: not a readable manifest (${(e as Error).message})`;
  }
  for (const [name, want] of Object.entries(files)) {
    const target = path.join(dir, name);
    if (!fs.existsSync(target)) return `${target}: missing`;
    const size = fs.statSync(target).size;
    if (size !== want.size) return `${target}: ${size} bytes, the manifest says ${want.size}`;
    if (sha256(target) !== want.sha256) return `${target}: its SHA-256 differs from the manifest's`;
  }
  return undefined;
}

/** Checkpoints as global_step_N directories under the run directory, written atomically. */
@injectable()
export class LocalCheckpointStore implements CheckpointStore {
  constructor(@inject(TOKENS.Config) protected readonly config: Config) {}

  get root(): string {
    return path.join(this.config.trainer.default_local_dir!, 'checkpoints');
  }

  async save(step: number, write: (dir: string) => void | Promise<void>): Promise<CheckpointInfo> {
    const dir = path.join(this.root, `global_step_${step}`);
    await writeDirectoryAtomically(dir, async (tmp) => {
      await write(tmp);
      writeCheckpointManifest(tmp);
    });
    this.prune();
    return { step, dir };
  }

  private all(): CheckpointInfo[] {
    if (!fs.existsSync(this.root)) return [];
    return fs
      .readdirSync(this.root)
      .map((name) => ({ name, match: STEP_DIR.exec(name) }))
      .filter(({ name, match }) => match && isCheckpoint(path.join(this.root, name)))
      .map(({ name, match }) => ({ step: Number(match![1]), dir: path.join(this.root, name) }))
      .sort((a, b) => a.step - b.step);
  }

  private prune(): void {
    const keep = this.config.trainer.max_checkpoints_to_keep;
    if (keep === null || keep <= 0) return;
    const all = this.all();
    for (const old of all.slice(0, Math.max(0, all.length - keep))) fs.rmSync(old.dir, { recursive: true, force: true });
  }

  latest(): CheckpointInfo | undefined {
    return this.all().at(-1);
  }

  /**
   * The checkpoint resume_mode asks for. With auto, the newest intact one: a damaged checkpoint
   * (a file missing, cut short or changed since its manifest) is reported and skipped, and when
   * every one is damaged the run stops rather than start over.
   */
  resumeTarget(): CheckpointInfo | undefined {
    const mode = this.config.trainer.resume_mode;
    if (mode === 'disable') return undefined;
    if (mode === 'auto') {
      const all = this.all();
      const damaged: string[] = [];
      for (const checkpoint of [...all].reverse()) {
        const damage = checkpointDamage(checkpoint.dir);
        if (!damage) {
          if (damaged.length && this.config.trainer.progress) console.error(`[flowrl] resuming from ${checkpoint.dir}: newer checkpoints are damaged (${damaged.join('; ')})`);
          return checkpoint;
        }
        damaged.push(damage);
      }
      if (damaged.length) throw new InputError(`${this.root}: every checkpoint is damaged (${damaged.join('; ')}); set trainer.resume_mode=disable to start over`);
      return undefined;
    }
    const dir = path.resolve(mode);
    if (!isCheckpoint(dir)) {
      throw new InputError(`trainer.resume_mode: '${mode}' is not a checkpoint directory (no ${TRAINER_STATE_FILE}); use auto, disable or a global_step_N path`);
    }
    const damage = checkpointDamage(dir);
    if (damage) throw new InputError(`trainer.resume_mode: checkpoint '${mode}' is damaged: ${damage}`);
    return { step: readTrainerState(dir).global_step, dir };
  }
}
