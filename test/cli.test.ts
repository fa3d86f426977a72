// The flowrl model commands (init-model, generate, score) and their messages: exit codes, stdout
// and stderr. They run in this process, one after another (their output is captured globally);
// other files keep one child-process test per exit code.
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { buildTokenizer, generate, loadModel, TextTokenizer } from '../core-adapters/index.js';
import { initWeights } from '../core-adapters/model/checkpoint.js';
import { parseModelConfig } from '../core-adapters/model/config.js';
import { responseLogProbs } from '../core-adapters/model/logprobs.js';
import { readHeader, readTensors } from '../core-adapters/model/safetensors.js';
import { expectClose, flowrlInProcess, ROOT, tempDir, type CliResult } from './helpers.js';
import YAML from 'yaml';

let queue: Promise<unknown> = Promise.resolve();

/** Runs `flowrl ...args` in-process after every run started before it. */
function flowrl(args: string[]): Promise<CliResult> {
  const run = queue.then(() => flowrlInProcess(args));
  queue = run.catch(() => undefined);
  return run;
}

function describeRun(r: CliResult): string {
  return `exit ${r.status}${r.signal ? ` (${r.signal})` : ''}\n--- stdout\n${r.stdout}--- stderr\n${r.stderr}`;
}

/** stderr lines other than the backend announcement. */
function messageLines(r: CliResult): string[] {
  return r.stderr.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('[flowrl] tfjs backend'));
}

/** Exit code 2, one message line naming every fragment, and no stack trace. */
function expectInputFailure(r: CliResult, ...fragments: string[]): string {
  expect(r.status, describeRun(r)).to.equal(2);
  expect(r.stderr, 'stack trace on stderr').to.not.match(/^ {4}at /m);
  const lines = messageLines(r);
  expect(lines, describeRun(r)).to.have.length(1);
  for (const f of fragments) expect(lines[0]).to.include(f);
  return lines[0];
}

/** The single JSON object a --json command prints on stdout. */
function jsonOutput<T>(r: CliResult): T {
  expect(r.status, describeRun(r)).to.equal(0);
  const lines = r.stdout.split('\n').filter((l) => l.trim() !== '');
  expect(lines, describeRun(r)).to.have.length(1);
  return JSON.parse(lines[0]) as T;
}

interface ScoreJson {
  prompt_ids: number[];
  response_ids: number[];
  logprobs: number[];
}
interface GenerateJson {
  prompt_ids: number[];
  response_ids: number[];
  text: string;
}

const CHARACTERS = 'abcdefghij 0123456789';
const MODEL_CONFIG = {
  model_type: 'llama',
  vocab_size: 40,
  hidden_size: 32,
  intermediate_size: 64,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  max_position_embeddings: 64,
  rms_norm_eps: 1e-6,
  bos_token_id: 1,
  eos_token_id: 2,
  tie_word_embeddings: false,
};

describe('flowrl CLI', function () {
  this.timeout(240_000);
  const work = tempDir('flowrl-cli-');
  const tokDir = path.join(work, 'tokenizer');
  const cfgFile = path.join(work, 'model-config.json');
  const modelDir = path.join(work, 'model');
  let init: CliResult;
  /** Every later run, started together once the model exists. */
  const runs: Record<string, Promise<CliResult>> = {};

  /** A copy of the initialised model dir, changed by `edit`. */
  function variant(name: string, edit: (dir: string) => void): string {
    const dir = path.join(work, name);
    fs.cpSync(modelDir, dir, { recursive: true });
    edit(dir);
    return dir;
  }

  before(async () => {
    buildTokenizer({ characters: CHARACTERS }).save(tokDir);
    fs.writeFileSync(cfgFile, JSON.stringify(MODEL_CONFIG, null, 2));
    init = await flowrl(['init-model', '--config', cfgFile, '--tokenizer', tokDir, '--out', modelDir, '--seed', '3', '--backend', 'wasm']);
    if (init.status !== 0) return; // the init-model test reports it

    const noConfig = variant('no-config', (d) => fs.rmSync(path.join(d, 'config.json')));
    const gpt2 = variant('gpt2', (d) => fs.writeFileSync(path.join(d, 'config.json'), JSON.stringify({ ...MODEL_CONFIG, model_type: 'gpt2' })));
    const corrupt = variant('corrupt', (d) => fs.writeFileSync(path.join(d, 'model.safetensors'), 'definitely not safetensors'));
    const noTokenizer = variant('no-tokenizer', (d) => fs.rmSync(path.join(d, 'tokenizer.json')));
    const smallCfg = path.join(work, 'small-vocab.json');
    fs.writeFileSync(smallCfg, JSON.stringify({ ...MODEL_CONFIG, vocab_size: 10 }));

    const wasm = ['--backend', 'wasm'];
    const gen = ['generate', '--model', modelDir, '--prompt', 'abc', '--max-new-tokens', '5', '--json', ...wasm];
    const todo: Record<string, string[]> = {
      score: ['score', '--model', modelDir, '--prompt', 'abc', '--response', 'de', '--json', ...wasm],
      seed1a: [...gen, '--seed', '1'],
      seed1b: [...gen, '--seed', '1'],
      greedyA: [...gen, '--greedy'],
      greedyB: [...gen, '--greedy'],
      unknownCommand: ['frobnicate', '--model', modelDir],
      missingModel: ['generate', '--prompt', 'abc', ...wasm],
      badMaxNew: ['generate', '--model', modelDir, '--prompt', 'abc', '--max-new-tokens', 'abc', ...wasm],
      badBackend: ['score', '--model', modelDir, '--prompt', 'abc', '--response', 'de', '--backend', 'bogus'],
      noConfig: ['score', '--model', noConfig, '--prompt', 'abc', '--response', 'de', ...wasm],
      gpt2: ['generate', '--model', gpt2, '--prompt', 'abc', ...wasm],
      corrupt: ['score', '--model', corrupt, '--prompt', 'abc', '--response', 'de', ...wasm],
      noTokenizer: ['generate', '--model', noTokenizer, '--prompt', 'abc', ...wasm],
      smallVocab: ['init-model', '--config', smallCfg, '--tokenizer', tokDir, '--out', path.join(work, 'small'), ...wasm],
    };
    for (const [name, args] of Object.entries(todo)) {
      runs[name] = flowrl(args);
      runs[name].catch(() => undefined); // awaited by its test
    }
    await Promise.allSettled(Object.values(runs));
  });

  /** The named run's result; fails when init-model did not succeed (so there is nothing to run on). */
  async function result(name: string): Promise<CliResult> {
    expect(init.status, `init-model failed, so '${name}' never ran:\n${describeRun(init)}`).to.equal(0);
    return runs[name];
  }

  describe('init-model', () => {
    it('exits 0 and writes config.json, model.safetensors and the tokenizer files', () => {
      expect(init.status, describeRun(init)).to.equal(0);
      expect(init.stdout).to.include(modelDir);
      expect(fs.readdirSync(work).filter((n) => n.includes('.tmp-')), 'leftover temporary directories').to.deep.equal([]);
      expect(fs.readdirSync(modelDir).sort()).to.deep.equal(['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']);
      expect(fs.readFileSync(path.join(modelDir, 'tokenizer.json')).equals(fs.readFileSync(path.join(tokDir, 'tokenizer.json')))).to.equal(true);
      const written = JSON.parse(fs.readFileSync(path.join(modelDir, 'config.json'), 'utf8')) as Record<string, unknown>;
      expect(written).to.deep.equal({ ...MODEL_CONFIG, torch_dtype: 'float32' });
    });

    it('writes the weights initWeights gives for --seed 3', () => {
      expect(init.status, describeRun(init)).to.equal(0);
      const config = parseModelConfig(MODEL_CONFIG);
      const want = initWeights(config, 3);
      const file = path.join(modelDir, 'model.safetensors');
      expect([...readHeader(file).tensors.keys()].sort()).to.deep.equal([...want.keys()].sort());
      const got = readTensors(file);
      for (const [name, w] of want) {
        expect(got.get(name)!.shape, name).to.deep.equal(w.shape);
        expect(Buffer.from(got.get(name)!.data.buffer).equals(Buffer.from(w.data.buffer)), name).to.equal(true);
      }
    });

    it('exits 2 naming vocab_size when the config has fewer tokens than the tokenizer', async () => {
      const r = await result('smallVocab');
      expectInputFailure(r, 'vocab_size', 'small-vocab.json');
      expect(fs.existsSync(path.join(work, 'small'))).to.equal(false);
    });
  });

  describe('score', () => {
    it('prints one JSON object whose log-probs match responseLogProbs in-process', async () => {
      const out = jsonOutput<ScoreJson>(await result('score'));
      const tokenizer = TextTokenizer.load(modelDir);
      expect(out.prompt_ids).to.deep.equal(tokenizer.encode('abc'));
      expect(out.response_ids).to.deep.equal(tokenizer.encode('de'));
      expect(out.logprobs).to.have.length(out.response_ids.length);
      for (const lp of out.logprobs) expect(lp).to.be.below(0);
      const model = loadModel(modelDir);
      try {
        const want = (await responseLogProbs(model, [out.prompt_ids], [out.response_ids]))[0];
        expectClose(out.logprobs, want, 1e-5, 'logprobs');
      } finally {
        model.dispose();
      }
    });
  });

  describe('generate', () => {
    it('gives at most --max-new-tokens response ids for the encoded prompt', async () => {
      const out = jsonOutput<GenerateJson>(await result('seed1a'));
      const tokenizer = TextTokenizer.load(modelDir);
      expect(out.prompt_ids).to.deep.equal(tokenizer.encode('abc'));
      expect(out.response_ids.length).to.be.within(1, 5);
      for (const id of out.response_ids) expect(id).to.be.within(0, MODEL_CONFIG.vocab_size - 1);
      expect(out.text).to.equal(tokenizer.decode(out.response_ids.filter((id) => id !== 2)));
    });

    it('the same --seed gives the same output', async () => {
      const [a, b] = [await result('seed1a'), await result('seed1b')];
      expect(jsonOutput(a)).to.deep.equal(jsonOutput(b));
    });

    it('--greedy twice gives the same output, the greedy continuation of the model', async () => {
      const [a, b] = [jsonOutput<GenerateJson>(await result('greedyA')), jsonOutput<GenerateJson>(await result('greedyB'))];
      expect(a).to.deep.equal(b);
      const tokenizer = TextTokenizer.load(modelDir);
      const model = loadModel(modelDir);
      try {
        const want = (
          await generate(model, [a.prompt_ids], {
            maxNewTokens: 5,
            greedy: true,
            stopTokenIds: [2],
            padTokenId: tokenizer.padTokenId,
          })
        ).tokens[0];
        expect(a.response_ids).to.deep.equal(want);
      } finally {
        model.dispose();
      }
    });
  });

  describe('bad input exits 2 with one message and no stack trace', () => {
    it('an unknown command', async () => {
      expectInputFailure(await result('unknownCommand'), "'frobnicate'", 'generate');
    });

    it('a missing --model', async () => {
      expectInputFailure(await result('missingModel'), '--model');
    });

    it('--max-new-tokens abc', async () => {
      expectInputFailure(await result('badMaxNew'), '--max-new-tokens', "'abc'");
    });

    it('an unknown --backend', async () => {
      expectInputFailure(await result('badBackend'), 'bogus');
    });

    it('a model dir with no config.json names the path to config.json', async () => {
      expectInputFailure(await result('noConfig'), path.join(work, 'no-config', 'config.json'));
    });

    it("a config.json with model_type 'gpt2' names model_type", async () => {
      expectInputFailure(await result('gpt2'), path.join(work, 'gpt2', 'config.json'), 'model_type', 'gpt2');
    });

    it('a corrupt model.safetensors names the file', async () => {
      expectInputFailure(await result('corrupt'), path.join(work, 'corrupt', 'model.safetensors'));
    });

    it('a missing tokenizer.json names the path', async () => {
      expectInputFailure(await result('noTokenizer'), path.join(work, 'no-tokenizer', 'tokenizer.json'));
    });

    it("each message carries the 'flowrl <command>:' prefix once", async () => {
      const names = ['missingModel', 'badMaxNew', 'noConfig', 'gpt2', 'corrupt', 'noTokenizer', 'smallVocab'];
      const doubled: string[] = [];
      for (const name of names) {
        for (const line of messageLines(await result(name))) if (/^(flowrl [\w-]+: ).*\1/.test(line)) doubled.push(`${name}: ${line}`);
      }
      expect(doubled, 'messages with a repeated prefix').to.deep.equal([]);
    });
  });
});

describe('flowrl new-plugin into an existing project', () => {
  it("completes an ES module project's package.json and refuses a CommonJS one, writing nothing", async () => {
    const esm = tempDir();
    fs.writeFileSync(path.join(esm, 'package.json'), JSON.stringify({ name: 'scratch', type: 'module', dependencies: { flowrl: '*' } }));
    const made = await flowrl(['new-plugin', esm, '--name', 'acme']);
    expect(made.status, describeRun(made)).to.equal(0);
    const completed = JSON.parse(fs.readFileSync(path.join(esm, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    expect(completed).to.include({ name: 'scratch', type: 'module' });
    // A sample config for `npm run train`: the plugin's algorithm on the countdown example of this installation.
    expect(completed.scripts.train).to.equal('tsc && flowrl train acme.yaml');
    const sample = YAML.parse(fs.readFileSync(path.join(esm, 'acme.yaml'), 'utf8')) as { plugins: string[]; algorithm: { name: string }; data: { train_files: string; val_files: string }; actor_rollout_ref: { model: { path: string } } };
    expect(sample.plugins).to.deep.equal(['./plugin.json']);
    expect(sample.algorithm.name).to.equal('acme_rloo');
    for (const file of [sample.data.train_files, sample.data.val_files, path.join(sample.actor_rollout_ref.model.path, 'config.json')]) {
      expect(path.resolve(esm, file), file).to.satisfy((f: string) => fs.existsSync(f) && f.startsWith(path.join(ROOT, 'examples', 'countdown')));
    }
    for (const type of [undefined, 'commonjs']) {
      const cjs = tempDir();
      const before = JSON.stringify({ name: 'scratch', ...(type ? { type } : {}) });
      fs.writeFileSync(path.join(cjs, 'package.json'), before);
      expectInputFailure(await flowrl(['new-plugin', cjs, '--name', 'acme']), path.join(cjs, 'package.json'), 'this project is CommonJS', 'plugins/NAME');
      expect(fs.readdirSync(cjs)).to.deep.equal(['package.json']);
      expect(fs.readFileSync(path.join(cjs, 'package.json'), 'utf8')).to.equal(before);
    }
  });
});
