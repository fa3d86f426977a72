// flowrl serve: a model behind SGLang's and vLLM's rollout routes (and OpenAI chat completions)
// until SIGINT or SIGTERM, which drain it: requests taken are answered, new ones get 503.
import fs from 'node:fs';
import path from 'node:path';
import type { BackendChoice } from '../config/choices.js';
import { initEngine } from '../engine/backend.js';
import { InputError, RunStopped } from '../errors.js';
import { TextTokenizer } from '../model/tokenizer.js';
import { FlowrlServer } from '../rollout/serve.js';
import { RequestRefused } from '../rollout/serving-engine.js';
import { BACKEND_FLAG, numberFlag, parseFlags, requiredString } from './args.js';

const LOGPROBS_MODES = ['processed_logprobs', 'raw_logprobs'] as const;
const DIALECTS = ['both', 'sglang', 'vllm'] as const;

/** Whether `host` is reachable only from this machine. */
function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host.startsWith('127.');
}

export async function serveCommand(argv: string[]): Promise<void> {
  const { values } = parseFlags('serve', argv, {
    model: { type: 'string' },
    adapter: { type: 'string' },
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string' },
    dialect: { type: 'string', default: 'both' },
    'api-key': { type: 'string' },
    'admin-api-key': { type: 'string' },
    'allowed-host': { type: 'string', multiple: true },
    'max-connections': { type: 'string' },
    'enable-admin': { type: 'boolean', default: false },
    'weights-root': { type: 'string', multiple: true },
    'max-batch': { type: 'string' },
    'max-queue': { type: 'string' },
    'max-model-len': { type: 'string' },
    'max-total-tokens': { type: 'string' },
    'max-body-mb': { type: 'string' },
    'logprobs-mode': { type: 'string', default: 'processed_logprobs' },
    'max-logprobs': { type: 'string' },
    'test-faults': { type: 'boolean', default: false },
    ...BACKEND_FLAG,
  });
  const modelDir = requiredString('serve', values, 'model');
  if (!fs.existsSync(path.join(modelDir, 'config.json'))) throw new InputError(`${modelDir}: no config.json; --model must be a Hugging Face model directory`);
  const logprobsMode = values['logprobs-mode'] as (typeof LOGPROBS_MODES)[number];
  if (!LOGPROBS_MODES.includes(logprobsMode)) throw new InputError(`--logprobs-mode must be one of ${LOGPROBS_MODES.join(', ')}; got '${logprobsMode}'`);
  const dialect = values.dialect as (typeof DIALECTS)[number];
  if (!DIALECTS.includes(dialect)) throw new InputError(`--dialect must be one of ${DIALECTS.join(', ')}; got '${dialect}'`);
  const roots = (values['weights-root'] as string[] | undefined) ?? [];
  for (const root of roots) if (!fs.statSync(root, { throwIfNoEntry: false })?.isDirectory()) throw new InputError(`--weights-root ${root}: no such directory`);
  if (roots.length && !values['enable-admin']) throw new InputError('--weights-root needs --enable-admin (weights are loaded through the admin routes)');
  // A key on the command line shows in the process list; the environment does not (set but empty there is unset).
  const apiKey = (values['api-key'] as string | undefined) ?? (process.env.FLOWRL_SERVE_API_KEY || undefined);
  const adminApiKey = (values['admin-api-key'] as string | undefined) ?? (process.env.FLOWRL_SERVE_ADMIN_API_KEY || undefined);
  const host = values.host as string;
  if (!apiKey && !isLoopback(host)) {
    console.error(`flowrl serve: warning: listening on ${host} without --api-key: anyone who can reach this address can sample${values['enable-admin'] ? ' and load weights' : ''}`);
  }
  const engineInfo = await initEngine(values.backend as BackendChoice, { quiet: true });
  const tokenizer = fs.existsSync(path.join(modelDir, 'tokenizer.json')) ? TextTokenizer.load(modelDir) : undefined;
  let server: FlowrlServer;
  try {
    server = new FlowrlServer({
      modelDir: path.resolve(modelDir),
      adapterDir: values.adapter as string | undefined,
      host,
      port: numberFlag('serve', values, 'port', 30000, { integer: true, min: 0, max: 65535 }),
      dialect,
      apiKey,
      adminApiKey,
      allowedHosts: values['allowed-host'] as string[] | undefined,
      maxConnections: numberFlag('serve', values, 'max-connections', 512, { integer: true, min: 1 }),
      enableAdmin: values['enable-admin'] as boolean,
      weightsRoots: roots,
      maxBatch: numberFlag('serve', values, 'max-batch', 64, { integer: true, min: 1 }),
      maxQueue: numberFlag('serve', values, 'max-queue', 1024, { integer: true, min: 1 }),
      maxModelLen: values['max-model-len'] === undefined ? undefined : numberFlag('serve', values, 'max-model-len', 0, { integer: true, min: 2 }),
      maxTotalTokens: values['max-total-tokens'] === undefined ? undefined : numberFlag('serve', values, 'max-total-tokens', 0, { integer: true, min: 2 }),
      maxBodyBytes: numberFlag('serve', values, 'max-body-mb', 16, { min: 0.001 }) * 2 ** 20,
      logprobsMode,
      maxLogprobs: numberFlag('serve', values, 'max-logprobs', 20, { integer: true, min: 0 }),
      tokenizer,
    });
  } catch (e) {
    if (e instanceof RequestRefused) throw new InputError(e.message);
    throw e;
  }
  if (values['test-faults']) (await import('../rollout/serve-faults.js')).installFaults(server);
  let url: string;
  try {
    url = await server.listen();
  } catch (e) {
    server.engine.dispose();
    throw new InputError(`cannot listen on ${values.host as string}:${values.port ?? 30000}: ${(e as Error).message}`);
  }
  const engine = server.engine;
  // One line on stdout, so a launcher can wait for it and read the port.
  console.log(
    `flowrl serve: listening on ${url} (model ${modelDir}${values.adapter ? `, adapter ${values.adapter as string}` : ''}; tfjs backend ${engineInfo.backend}${engineInfo.backend === 'webgpu' && engineInfo.gpu ? ` on ${engineInfo.gpu.description}` : ''}; ${dialect === 'vllm' ? '' : 'SGLang /generate, '}${dialect === 'sglang' ? '' : 'vLLM /v1/completions, OpenAI /v1/chat/completions, '}context ${engine.maxModelLen}, KV budget ${engine.maxTotalTokens} tokens; admin routes ${values['enable-admin'] ? 'on' : 'off'}${apiKey ? ', API key required' : ''}${adminApiKey ? ', admin key required on admin routes' : ''})`,
  );
  const stopped = await new Promise<'signal' | 'fault'>((resolve) => {
    process.once('SIGINT', () => resolve('signal'));
    process.once('SIGTERM', () => resolve('signal'));
    engine.onFault = () => resolve('fault');
  });
  await server.drain();
  // A broken engine cannot be trusted again in this process: exit non-zero so a supervisor restarts it.
  if (stopped === 'fault') throw new RunStopped(`the server stopped: ${engine.fault?.message}`, 1);
}
