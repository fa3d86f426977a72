// flowrl serve: a model behind SGLang's and vLLM's rollout routes (and OpenAI chat completions)
// until SIGINT or SIGTERM.
import fs from 'node:fs';
import path from 'node:path';
import { initEngine, type BackendChoice } from '../engine/backend.js';
import { InputError } from '../errors.js';
import { TextTokenizer } from '../model/tokenizer.js';
import { FlowrlServer } from '../rollout/serve.js';
import { BACKEND_FLAG, numberFlag, parseFlags, requiredString } from './args.js';

const LOGPROBS_MODES = ['processed_logprobs', 'raw_logprobs'] as const;

export async function serveCommand(argv: string[]): Promise<void> {
  const { values } = parseFlags('serve', argv, {
    model: { type: 'string' },
    adapter: { type: 'string' },
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string' },
    'max-batch': { type: 'string' },
    'max-queue': { type: 'string' },
    'max-body-mb': { type: 'string' },
    'logprobs-mode': { type: 'string', default: 'processed_logprobs' },
    'test-faults': { type: 'boolean', default: false },
    ...BACKEND_FLAG,
  });
  const modelDir = requiredString('serve', values, 'model');
  if (!fs.existsSync(path.join(modelDir, 'config.json'))) throw new InputError(`${modelDir}: no config.json; --model must be a Hugging Face model directory`);
  const logprobsMode = values['logprobs-mode'] as (typeof LOGPROBS_MODES)[number];
  if (!LOGPROBS_MODES.includes(logprobsMode)) throw new InputError(`--logprobs-mode must be one of ${LOGPROBS_MODES.join(', ')}; got '${logprobsMode}'`);
  await initEngine(values.backend as BackendChoice, { quiet: true });
  const tokenizer = fs.existsSync(path.join(modelDir, 'tokenizer.json')) ? TextTokenizer.load(modelDir) : undefined;
  const server = new FlowrlServer({
    modelDir: path.resolve(modelDir),
    adapterDir: values.adapter as string | undefined,
    host: values.host as string,
    port: numberFlag('serve', values, 'port', 30000, { integer: true, min: 0, max: 65535 }),
    maxBatch: numberFlag('serve', values, 'max-batch', 64, { integer: true, min: 1 }),
    maxQueue: numberFlag('serve', values, 'max-queue', 1024, { integer: true, min: 1 }),
    maxBodyBytes: numberFlag('serve', values, 'max-body-mb', 16, { min: 0.001 }) * 2 ** 20,
    logprobsMode,
    tokenizer,
    testFaults: values['test-faults'] as boolean,
  });
  let url: string;
  try {
    url = await server.listen();
  } catch (e) {
    server.engine.dispose();
    throw new InputError(`cannot listen on ${values.host as string}:${values.port ?? 30000}: ${(e as Error).message}`);
  }
  // One line on stdout, so a launcher can wait for it and read the port.
  console.log(`flowrl serve: listening on ${url} (model ${modelDir}${values.adapter ? `, adapter ${values.adapter as string}` : ''}; SGLang /generate, vLLM /v1/completions, OpenAI /v1/chat/completions)`);
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  await server.close();
}
