// Prompts from verl rows: rendered with the tokenizer's chat template when it has one (plain
// concatenation of the messages otherwise), tokenized, filtered by length, and served in a
// seeded, resumable order.
import { inject, injectable, optional } from 'inversify';
import type { Config } from '../config/load.js';
import type { AgentRouting, DataPosition, Dataset, PromptRecord } from '../contracts/index.js';
import { InputError } from '../errors.js';
import type { TextTokenizer } from '../model/tokenizer.js';
import { Rng } from '../random.js';
import { TOKENS } from '../tokens.js';
import { ScorerRegistry } from '../rewards/registry.js';
import { readRows, type DataRow } from './rows.js';

/** The prompt text of a row: the chat template when the tokenizer has one, else the contents joined. */
export function renderPrompt(row: DataRow, tokenizer: TextTokenizer): string {
  if (tokenizer.hasChatTemplate) return tokenizer.applyChatTemplate(row.prompt, true);
  return row.prompt.map((m) => m.content).join('\n');
}

/** A config's file list (a path, a list of paths, or null) as an array. */
export function fileList(value: string | string[] | null | undefined): string[] {
  if (value === null || value === undefined) return [];
  return Array.isArray(value) ? value : [value];
}

/** verl-format rows (jsonl or parquet), rendered and tokenized, checked for a scorer, served in seeded order. */
@injectable()
export class PromptDataset implements Dataset {
  train: PromptRecord[] = [];
  val: PromptRecord[] = [];
  /** Prompts dropped for exceeding data.max_prompt_length, per split. */
  readonly dropped = { train: 0, val: 0 };

  constructor(
    @inject(TOKENS.Config) protected readonly config: Config,
    @inject(TOKENS.Tokenizer) protected readonly tokenizer: TextTokenizer,
  ) {}

  /** Multi-turn rows (agent_name tool_agent) are rendered with the tools' schemas; absent outside a container. */
  @inject(TOKENS.AgentRouting) @optional() protected readonly multiTurn?: AgentRouting;

  /** The host's scorers (plugins' included); the built-ins alone when constructed outside a container. */
  @inject(TOKENS.ScorerRegistry) @optional() protected readonly scorers: ScorerRegistry = new ScorerRegistry();

  async init(): Promise<void> {
    this.train = await this.load(fileList(this.config.data.train_files), 'train');
    this.val = await this.load(fileList(this.config.data.val_files), 'val');
    const limit = this.config.data.val_max_samples;
    if (limit !== null && this.val.length > limit) this.val = this.val.slice(0, limit);
  }

  private async load(files: string[], split: 'train' | 'val'): Promise<PromptRecord[]> {
    const out: PromptRecord[] = [];
    const max = this.config.data.max_prompt_length;
    for (const file of files) {
      const rows = await readRows(file);
      rows.forEach((row, i) => {
        const agentName = this.multiTurn?.agentOf(row.agent_name, `${file} row ${i + 1}`);
        const selection = row.extra_info?.tool_selection;
        const text = agentName === 'tool_agent' ? this.multiTurn!.promptText(row.prompt, Array.isArray(selection) ? (selection as string[]) : undefined) : renderPrompt(row, this.tokenizer);
        const ids = this.tokenizer.encode(text);
        if (ids.length === 0) throw new InputError(`${file} row ${i + 1}: the prompt encodes to no tokens`);
        // Found now rather than when the row is first scored, possibly hours into a run.
        if (!this.config.custom_reward_function.path) this.scorers.checkRow(`${file} row ${i + 1}`, row.data_source, row.reward_model.ground_truth);
        if (ids.length > max) {
          if (!this.config.data.filter_overlong_prompts) {
            throw new InputError(`${file} row ${i + 1}: prompt has ${ids.length} tokens > data.max_prompt_length ${max} (set data.filter_overlong_prompts to drop such rows)`);
          }
          this.dropped[split] += 1;
          return;
        }
        const multiTurn = this.multiTurn?.enabled ? { messages: row.prompt, agentName } : {};
        out.push({ ids, dataSource: row.data_source, groundTruth: row.reward_model.ground_truth, extraInfo: row.extra_info ?? {}, index: out.length, ...multiTurn });
      });
    }
    return out;
  }

  private order(epoch: number): number[] {
    const indices = this.train.map((_, i) => i);
    if (!this.config.data.shuffle) return indices;
    const seed = this.config.data.seed ?? this.config.trainer.seed;
    return Rng.derive(seed, epoch).shuffle(indices);
  }

  stepsPerEpoch(size: number): number {
    return Math.floor(this.train.length / size);
  }

  /** Full batches only (verl drops the last partial one); an exhausted epoch rolls into the next. */
  nextBatch(position: DataPosition, size: number, key = 'data.train_batch_size'): { prompts: PromptRecord[]; next: DataPosition } {
    if (this.train.length < size) {
      throw new InputError(`${key} is ${size} but the training data has ${this.train.length} usable prompts`);
    }
    let { epoch, offset } = position;
    if (offset + size > this.train.length) {
      epoch += 1;
      offset = 0;
    }
    const order = this.order(epoch);
    const prompts = order.slice(offset, offset + size).map((i) => this.train[i]);
    return { prompts, next: { epoch, offset: offset + size } };
  }
}
