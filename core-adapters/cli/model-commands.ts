// flowrl generate | score | init-model: direct use of a Hugging Face model directory.
import type { BackendChoice } from '../config/choices.js';
import { initEngine } from '../engine/backend.js';
import { InputError } from '../errors.js';
import { initWeights, loadModel, modelFromWeights, saveModel } from '../model/checkpoint.js';
import { loadAdapters } from '../model/lora.js';
import { readModelConfig } from '../model/config.js';
import { generate } from '../model/generate.js';
import { responseLogProbs } from '../model/logprobs.js';
import { stopTokenIds, TextTokenizer } from '../model/tokenizer.js';
import { BACKEND_FLAG, numberFlag, parseFlags, requiredString } from './args.js';

/** The model of DIR, with the PEFT adapter of `adapterDir` attached when given. */
function loadModelAndTokenizer(dir: string, adapterDir?: string) {
  const tokenizer = TextTokenizer.load(dir);
  const model = loadModel(dir);
  if (adapterDir) {
    try {
      model.attachAdapters(loadAdapters(model.config, adapterDir));
    } catch (e) {
      model.dispose();
      throw e;
    }
  }
  return { model, tokenizer };
}

export async function generateCommand(argv: string[]): Promise<void> {
  const { values } = parseFlags('generate', argv, {
    model: { type: 'string' },
    prompt: { type: 'string' },
    'max-new-tokens': { type: 'string' },
    temperature: { type: 'string' },
    'top-p': { type: 'string' },
    'top-k': { type: 'string' },
    greedy: { type: 'boolean', default: false },
    chat: { type: 'boolean', default: false },
    seed: { type: 'string' },
    json: { type: 'boolean', default: false },
    adapter: { type: 'string' },
    ...BACKEND_FLAG,
  });
  const dir = requiredString('generate', values, 'model');
  const prompt = requiredString('generate', values, 'prompt');
  const options = {
    maxNewTokens: numberFlag('generate', values, 'max-new-tokens', 64, { integer: true, min: 1 }),
    temperature: numberFlag('generate', values, 'temperature', 1, { min: 0 }),
    topP: numberFlag('generate', values, 'top-p', 1, { min: 0, max: 1 }),
    topK: numberFlag('generate', values, 'top-k', 0, { integer: true, min: -1 }),
    seed: numberFlag('generate', values, 'seed', 0, { integer: true }),
    greedy: values.greedy as boolean,
  };
  await initEngine(values.backend as BackendChoice, { quiet: values.json as boolean });
  const { model, tokenizer } = loadModelAndTokenizer(dir, values.adapter as string | undefined);
  if (values.chat && !tokenizer.hasChatTemplate) throw new InputError(`${dir}: --chat was given but the tokenizer has no chat template`);
  const text = values.chat ? tokenizer.applyChatTemplate([{ role: 'user', content: prompt }]) : prompt;
  const promptIds = tokenizer.encode(text);
  if (promptIds.length === 0) throw new InputError('flowrl generate: --prompt encodes to no tokens');
  const stops = stopTokenIds(model.config.eosTokenIds, tokenizer);
  const { tokens } = await generate(model, [promptIds], { ...options, stopTokenIds: stops, padTokenId: tokenizer.padTokenId });
  const responseIds = tokens[0];
  const completion = tokenizer.decode(responseIds.filter((id) => !stops.includes(id)));
  if (values.json) console.log(JSON.stringify({ prompt_ids: promptIds, response_ids: responseIds, text: completion }));
  else console.log(completion);
  model.dispose();
}

export async function scoreCommand(argv: string[]): Promise<void> {
  const { values } = parseFlags('score', argv, {
    model: { type: 'string' },
    prompt: { type: 'string' },
    response: { type: 'string' },
    json: { type: 'boolean', default: false },
    adapter: { type: 'string' },
    ...BACKEND_FLAG,
  });
  const dir = requiredString('score', values, 'model');
  const prompt = requiredString('score', values, 'prompt');
  const response = requiredString('score', values, 'response');
  await initEngine(values.backend as BackendChoice, { quiet: values.json as boolean });
  const { model, tokenizer } = loadModelAndTokenizer(dir, values.adapter as string | undefined);
  const promptIds = tokenizer.encode(prompt);
  const responseIds = tokenizer.encode(response);
  if (promptIds.length === 0) throw new InputError('flowrl score: --prompt encodes to no tokens');
  if (responseIds.length === 0) throw new InputError('flowrl score: --response encodes to no tokens');
  const logprobs = (await responseLogProbs(model, [promptIds], [responseIds]))[0];
  if (values.json) {
    console.log(JSON.stringify({ prompt_ids: promptIds, response_ids: responseIds, logprobs }));
  } else {
    responseIds.forEach((id, i) => console.log(`${JSON.stringify(tokenizer.decode([id]))}\t${id}\t${logprobs[i].toFixed(6)}`));
    console.log(`total\t\t${logprobs.reduce((a, b) => a + b, 0).toFixed(6)}`);
  }
  model.dispose();
}

export async function initModelCommand(argv: string[]): Promise<void> {
  const { values } = parseFlags('init-model', argv, {
    config: { type: 'string' },
    tokenizer: { type: 'string' },
    out: { type: 'string' },
    seed: { type: 'string' },
    ...BACKEND_FLAG,
  });
  const configFile = requiredString('init-model', values, 'config');
  const tokenizerDir = requiredString('init-model', values, 'tokenizer');
  const out = requiredString('init-model', values, 'out');
  const seed = numberFlag('init-model', values, 'seed', 0, { integer: true });
  const config = readModelConfig(configFile);
  const tokenizer = TextTokenizer.load(tokenizerDir);
  if (tokenizer.vocabSize > config.vocabSize) {
    throw new InputError(`${configFile}: key 'vocab_size' is ${config.vocabSize} but the tokenizer in ${tokenizerDir} has ${tokenizer.vocabSize} tokens`);
  }
  await initEngine(values.backend as BackendChoice, { quiet: true });
  const model = modelFromWeights(config, initWeights(config, seed));
  await saveModel(model, out, { tokenizerDir });
  const params = model.trainableVariables().reduce((n, v) => n + v.size, 0);
  console.log(`wrote ${out}: ${config.modelType}, ${params.toLocaleString('en-US')} parameters, seed ${seed}`);
  model.dispose();
}
