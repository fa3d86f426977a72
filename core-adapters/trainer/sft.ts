// Supervised fine-tuning (verl's fsdp_sft_trainer, single process): next-token loss on the response
// of each row given its prompt, rendered exactly as the RL dataset renders prompts. It makes the
// tiny base policies that RL then improves.
import fs from 'node:fs';
import path from 'node:path';
import type { Config } from '../config/load.js';
import { getPath } from '../config/load.js';
import { fileList, renderPrompt } from '../data/dataset.js';
import { readRows } from '../data/rows.js';
import { InputError } from '../errors.js';
import type { CausalLM } from '../model/causal-lm.js';
import { initWeights, loadModel, modelFromWeights, saveModel } from '../model/checkpoint.js';
import { readModelConfig } from '../model/config.js';
import { packSequences } from '../model/logprobs.js';
import { AdamW, checkMinLrRatio, scheduledLr } from '../model/optim.js';
import { TextTokenizer, type ChatMessage } from '../model/tokenizer.js';
import { codeSandboxLimits } from '../rewards/code.js';
import { SandboxProcess } from '../rewards/sandbox-process.js';
import { ToolTurnRenderer } from '../rollout/agent-loop.js';
import { checkSchema, ToolRegistry } from '../tools/registry.js';
import type { FunctionToolSchema } from '../tools/tool.js';
import { languageModelReplicaSpec } from '../model/lm-replica.js';
import { languageModelGradients, maskedNll } from '../model/train-step.js';
import { runUpdateLoop, shuffledBatches } from '../model/update-loop.js';
import { resolveThreadCount, ThreadPool } from '../engine/thread-pool.js';
import * as tf from '@tensorflow/tfjs-core';
import { Rng } from '../random.js';
import { readScalar } from '../engine/readback.js';

/** A tokenized prompt and response for supervised fine-tuning. */
export interface SftExample {
  prompt: number[];
  response: number[];
  /** Per response token, whether the loss reads it (a conversation's assistant turns); absent: all. */
  lossMask?: number[];
}

export interface SftReadOptions {
  /** Dotted path of the response text in each row (config key named in errors). */
  responseKey: string;
  /** Rows holding whole conversations (sft.messages_key) and their tools (sft.tools_key), laid out by the multi-turn renderer. */
  conversations?: { key: string; toolsKey: string; renderer: ToolTurnRenderer };
  keyName: string;
  maxPromptLength: number;
  maxResponseLength: number;
}

/**
 * Prompt and response token ids of rows that carry a response (eos appended to the response);
 * rows longer than the limits are skipped.
 */
export async function readSftExamples(files: string[], tokenizer: TextTokenizer, options: SftReadOptions): Promise<SftExample[]> {
  const key = options.responseKey;
  const eos = tokenizer.eosTokenId;
  const out: SftExample[] = [];
  for (const file of files) {
    if (options.conversations) {
      // verl's multi-turn SFT rows carry only their conversation: read as they are, not as RL rows.
      const { key, toolsKey, renderer } = options.conversations;
      const rows = await readRows(file, (value, where) => ({
        messages: conversationOf(getPath(value, key), `${where}: sft.messages_key '${key}'`),
        tools: rowTools(getPath(value, toolsKey), renderer.schemas, `${where}: sft.tools_key '${toolsKey}'`),
      }));
      rows.forEach(({ messages, tools }, i) => {
        const example = renderer.conversation(messages, `${file} row ${i + 1}`, tools);
        if (example.prompt.length <= options.maxPromptLength && example.response.length <= options.maxResponseLength) out.push(example);
      });
      continue;
    }
    const rows = await readRows(file);
    rows.forEach((row, i) => {
      const response = getPath(row, key);
      if (typeof response !== 'string' || response.length === 0) {
        throw new InputError(`${file} row ${i + 1}: ${options.keyName} '${key}' holds no response text`);
      }
      const prompt = tokenizer.encode(renderPrompt(row, tokenizer));
      const ids = tokenizer.encode(response);
      if (eos !== undefined) ids.push(eos);
      if (prompt.length > options.maxPromptLength || ids.length > options.maxResponseLength) return;
      out.push({ prompt, response: ids });
    });
  }
  return out;
}

/**
 * A row's conversation: a non-empty list of {role, content}. An assistant message's OpenAI-style
 * `tool_calls` ([{function: {name, arguments}}], arguments an object or its JSON) are kept for the
 * renderer, which writes them as the chat template does (the text the policy writes in rollouts).
 */
function conversationOf(value: unknown, where: string): ChatMessage[] {
  if (!Array.isArray(value) || value.length === 0) throw new InputError(`${where} must hold a non-empty list of {role, content} messages`);
  return value.map((m: { role?: unknown; content?: unknown; tool_calls?: unknown }, i) => {
    const at = `${where}[${i}]`;
    if (typeof m?.role !== 'string') throw new InputError(`${at}: role must be a string`);
    const content = m.content ?? '';
    if (typeof content !== 'string') throw new InputError(`${at}: content must be a string`);
    if (m.tool_calls === undefined || m.tool_calls === null) return { role: m.role, content };
    if (m.role !== 'assistant' || !Array.isArray(m.tool_calls)) throw new InputError(`${at}: tool_calls must be a list, on an assistant message`);
    const calls = m.tool_calls.map((call: { function?: { name?: unknown; arguments?: unknown } }, j) => {
      const fn = call?.function;
      if (typeof fn?.name !== 'string') throw new InputError(`${at}.tool_calls[${j}]: function.name must be a string`);
      let args = fn.arguments ?? {};
      if (typeof args === 'string') {
        try {
          args = JSON.parse(args);
        } catch {
          throw new InputError(`${at}.tool_calls[${j}]: function.arguments is not JSON`);
        }
      }
      if (typeof args !== 'object' || args === null || Array.isArray(args)) throw new InputError(`${at}.tool_calls[${j}]: function.arguments must be an object (or its JSON)`);
      return { type: 'function' as const, function: { name: fn.name, arguments: args as Record<string, unknown> } };
    });
    return { role: m.role, content, tool_calls: calls };
  });
}

/**
 * A row's tools for its prompt: verl's list of OpenAI function schemas, or names of the run's tools
 * (rollout.multi_turn.tool_config_path); absent: none, as verl's multi-turn SFT.
 */
function rowTools(value: unknown, known: FunctionToolSchema[], where: string): FunctionToolSchema[] | undefined {
  if (value === undefined || value === null) return undefined;
  if (!Array.isArray(value)) throw new InputError(`${where} must be a list of tool names or function schemas`);
  return value.map((tool, i) => {
    if (typeof tool !== 'string') return checkSchema(tool, `${where}[${i}]`);
    const schema = known.find((s) => s.function.name === tool);
    if (!schema) throw new InputError(`${where}[${i}]: no tool '${tool}' in rollout.multi_turn.tool_config_path (known: ${known.map((s) => s.function.name).join(', ') || 'none'})`);
    return schema;
  });
}

/** Packs examples for the loss, with their loss masks when any has one. */
function packExamples(examples: SftExample[], pad: number) {
  const masked = examples.some((e) => e.lossMask);
  return packSequences(examples.map((e) => e.prompt), examples.map((e) => e.response), pad, masked ? examples.map((e) => e.lossMask ?? e.response.map(() => 1)) : undefined);
}

async function lossOn(model: CausalLM, examples: SftExample[], pad: number, batchSize: number): Promise<number> {
  let total = 0;
  for (let start = 0; start < examples.length; start += batchSize) {
    const part = examples.slice(start, start + batchSize);
    const seq = packExamples(part, pad);
    const loss = tf.tidy(() => maskedNll(model, seq));
    try {
      total += (await readScalar(loss, 'the SFT validation loss')) * part.length;
    } finally {
      loss.dispose();
    }
  }
  return total / Math.max(1, examples.length);
}

export interface SftResult {
  outputDir: string;
  steps: number;
  trainLoss: number;
  valLoss?: number;
}

/** The multi-turn renderer of the run's tools (rollout.multi_turn.tool_config_path), so SFT conversations match rollouts token for token. */
function conversationRenderer(config: Config, tokenizer: TextTokenizer, registry: ToolRegistry): ToolTurnRenderer {
  const toolConfig = config.actor_rollout_ref.rollout.multi_turn.tool_config_path;
  const tools = toolConfig ? registry.load(toolConfig, { codeSandbox: () => new SandboxProcess({ limits: codeSandboxLimits(config.reward_model.code) }) }) : new Map();
  return new ToolTurnRenderer(tokenizer, [...tools.values()].map((t) => t.schema));
}

/** flowrl sft: supervised fine-tuning on prompt/response rows; writes an HF directory. */
export async function runSft(config: Config, log: (line: string) => void = (l) => process.stderr.write(l + '\n'), tools: ToolRegistry = new ToolRegistry()): Promise<SftResult> {
  const files = fileList;
  const trainFiles = files(config.data.train_files);
  if (!trainFiles.length) throw new InputError('data.train_files is not set; sft needs rows with responses');
  const modelPath = config.actor_rollout_ref.model.path;
  const tokenizerDir = config.actor_rollout_ref.model.tokenizer_path ?? modelPath;
  if (!tokenizerDir) throw new InputError('set actor_rollout_ref.model.tokenizer_path (or model.path) for sft');
  const tokenizer = TextTokenizer.load(tokenizerDir);
  const sft = config.sft;
  checkMinLrRatio(sft.min_lr_ratio, 'sft.min_lr_ratio');
  let model: CausalLM;
  if (sft.init_config) {
    const modelConfig = readModelConfig(sft.init_config);
    if (tokenizer.vocabSize > modelConfig.vocabSize) {
      throw new InputError(`${sft.init_config}: key 'vocab_size' is ${modelConfig.vocabSize} but the tokenizer has ${tokenizer.vocabSize} tokens`);
    }
    model = modelFromWeights(modelConfig, initWeights(modelConfig, config.trainer.seed));
  } else {
    if (!modelPath) throw new InputError('set actor_rollout_ref.model.path (a model to fine-tune) or sft.init_config (a config.json to start from)');
    model = loadModel(modelPath);
  }
  const read: SftReadOptions = {
    responseKey: sft.response_key,
    conversations: sft.messages_key ? { key: sft.messages_key, toolsKey: sft.tools_key, renderer: conversationRenderer(config, tokenizer, tools) } : undefined,
    keyName: 'sft.response_key',
    maxPromptLength: config.data.max_prompt_length,
    maxResponseLength: config.data.max_response_length,
  };
  const train = await readSftExamples(trainFiles, tokenizer, read);
  const val = await readSftExamples(files(config.data.val_files), tokenizer, read);
  if (train.length === 0) throw new InputError(`${trainFiles.join(', ')}: no usable sft rows within data.max_prompt_length / max_response_length`);
  const pad = tokenizer.padTokenId ?? 0;
  const stepsPerEpoch = Math.ceil(train.length / sft.batch_size);
  const total = sft.total_steps ?? sft.epochs * stepsPerEpoch;
  const optimizer = new AdamW({ lr: sft.lr, weightDecay: sft.weight_decay });
  const schedule = {
    lr: sft.lr,
    warmupSteps: sft.warmup_steps,
    totalSteps: sft.lr_scheduler_type === 'cosine' ? total : undefined,
    minLrRatio: sft.min_lr_ratio,
  };
  const threads = resolveThreadCount(config.engine.workers);
  const pool = threads > 1 && tf.getBackend() === 'wasm' ? await ThreadPool.create({ size: threads, spec: languageModelReplicaSpec(model), params: model.params, native: config.engine.native }) : undefined;
  pool?.publish(model.params);
  const rng = new Rng(config.trainer.seed);
  let loss = NaN;
  const started = Date.now();
  log(`sft: ${train.length} examples, ${total} steps of ${sft.batch_size}`);
  await runUpdateLoop<SftExample[]>({
    miniBatches: shuffledBatches(train, sft.batch_size, total, rng),
    rows: (examples) => examples.length,
    accumulate: async (examples, _place, grads) => {
      loss = await languageModelGradients(model, packExamples(examples, pad), grads, pool);
    },
    afterStep: (_examples, _applied, step) => {
      pool?.publish(model.params);
      if ((step + 1) % 50 === 0 || step + 1 === total) log(`sft step ${step + 1}/${total} loss ${loss.toFixed(4)} lr ${scheduledLr(schedule, step).toExponential(3)} (${((Date.now() - started) / 1000).toFixed(0)} s)`);
    },
    optimizer,
    params: model.params,
    maxGradNorm: sft.grad_clip,
    lr: (step) => scheduledLr(schedule, step),
    prefix: 'sft',
  });
  await pool?.close();
  const valLoss = val.length ? await lossOn(model, val, pad, sft.batch_size) : undefined;
  if (valLoss !== undefined) log(`sft validation loss ${valLoss.toFixed(4)}`);
  const outputDir = sft.output_dir ?? path.join(config.trainer.default_local_dir!, 'sft-model');
  fs.mkdirSync(path.dirname(path.resolve(outputDir)), { recursive: true });
  await saveModel(model, outputDir, { tokenizer });
  optimizer.dispose();
  model.dispose();
  return { outputDir, steps: total, trainLoss: loss, valLoss };
}
