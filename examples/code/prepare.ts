// Prepares the code example: programming by example over a small list language. A prompt shows a
// few input/output pairs of a hidden list function; the response is a one-line Python function
// `def f(x):return ...` that the sandbox runs against the shown pairs and hidden ones. Writes a
// tokenizer (characters plus the language's pieces as single tokens), train/val rows in verl's
// code-row format, a model config and the base policy SFT'd on solver programs:
//   npx tsx examples/code/prepare.ts [--sft-steps N] [--out DIR]
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { buildTokenizer, initEngine, resolveConfig, Rng, runSft, smallLlamaConfig, writeRowsJsonl, type DataRow } from '../../core-adapters/index.js';

/** One step of the language: its Python text around the argument X, and what it does to a list. */
interface Primitive {
  python: string;
  apply: (list: number[]) => number[];
}

const pythonMod = (a: number, b: number) => ((a % b) + b) % b;
const PRIMITIVES: Primitive[] = [
  { python: 'sorted(X)', apply: (l) => [...l].sort((a, b) => a - b) },
  { python: 'X[::-1]', apply: (l) => [...l].reverse() },
  { python: 'X[1:]', apply: (l) => l.slice(1) },
  { python: 'X[:-1]', apply: (l) => l.slice(0, -1) },
  { python: '[v+1 for v in X]', apply: (l) => l.map((v) => v + 1) },
  { python: '[v-1 for v in X]', apply: (l) => l.map((v) => v - 1) },
  { python: '[v*2 for v in X]', apply: (l) => l.map((v) => v * 2) },
  { python: '[v*v for v in X]', apply: (l) => l.map((v) => v * v) },
  { python: '[v for v in X if v%2==0]', apply: (l) => l.filter((v) => pythonMod(v, 2) === 0) },
  { python: '[v for v in X if v%2]', apply: (l) => l.filter((v) => pythonMod(v, 2) !== 0) },
];

/** A program: one primitive, or two applied in turn; its body is a Python expression in x. */
interface Program {
  body: string;
  apply: (list: number[]) => number[];
}
const programs: Program[] = [];
for (const inner of PRIMITIVES) {
  programs.push({ body: inner.python.replace('X', 'x'), apply: inner.apply });
  for (const outer of PRIMITIVES) {
    programs.push({ body: outer.python.replace('X', inner.python.replace('X', 'x')), apply: (l) => outer.apply(inner.apply(l)) });
  }
}

const { values } = parseArgs({
  options: {
    out: { type: 'string', default: path.dirname(new URL(import.meta.url).pathname) },
    seed: { type: 'string', default: '11' },
    'sft-steps': { type: 'string', default: '3000' },
    'sft-problems': { type: 'string', default: '6000' },
    sloppy: { type: 'string', default: '0.5' },
  },
});
const out = path.resolve(values.out!);
const rng = new Rng(Number(values.seed));
const randomList = () => Array.from({ length: 2 + rng.int(3) }, () => rng.int(10));

// Programs that agree on 64 random lists behave alike: one behaviour, several texts.
const probes = Array.from({ length: 64 }, randomList);
const behaviourOf = (program: Program) => JSON.stringify(probes.map(program.apply));
const textsByBehaviour = new Map<string, string[]>();
for (const program of programs) {
  const key = behaviourOf(program);
  textsByBehaviour.set(key, [...(textsByBehaviour.get(key) ?? []), program.body]);
}

const SHOWN = 3;
const HIDDEN = 4;
const show = (list: number[]) => list.join(',');
const pyList = (lists: number[][]) => `[${lists.map((l) => `[${l.join(',')}]`).join(',')}]`;
const sloppy = Number(values.sloppy);
/**
 * A problem: a program drawn at random, SHOWN pairs in the prompt, and those plus HIDDEN more in one
 * assert. Its response (for SFT, and RLFR's field) is a program that behaves as the drawn one; for
 * the SFT split, with probability `sloppy` a program that fits the first pair only, as sloppy
 * demonstrations teach a base to answer from a glance.
 */
function drawProblem(split: string, index: number): DataRow {
  const program = programs[rng.int(programs.length)];
  const inputs = Array.from({ length: SHOWN + HIDDEN }, randomList);
  const outputs = inputs.map(program.apply);
  const prompt = inputs.slice(0, SHOWN).map((input, i) => `${show(input)}>${show(outputs[i])}`).join(';') + ':';
  let texts = textsByBehaviour.get(behaviourOf(program))!;
  if (split === 'sft' && rng.next() < sloppy) {
    const fitsFirstOnly = programs.filter((p) => show(p.apply(inputs[0])) === show(outputs[0]) && inputs.slice(1, SHOWN).some((input, i) => show(p.apply(input)) !== show(outputs[i + 1])));
    if (fitsFirstOnly.length) texts = [fitsFirstOnly[rng.int(fitsFirstOnly.length)].body];
  }
  return {
    data_source: 'codecontests',
    prompt: [{ role: 'user', content: prompt }],
    ability: 'code',
    reward_model: { style: 'rule', ground_truth: { assert_case: [`assert [f(a) for a in ${pyList(inputs)}]==${pyList(outputs)}`] } },
    extra_info: { split, index, programs: texts.length, response: `def f(x):return ${texts[rng.int(texts.length)]}` },
  };
}

const dataDir = path.join(out, 'data');
const rows = (split: string, count: number) => Array.from({ length: count }, (_, i) => drawProblem(split, i));
const val = rows('val', 512);
const train = rows('train', 2000);
const sft = rows('sft', Number(values['sft-problems']));
// Prompts are drawn at random from about 10^40; any repeat across the splits would be chance.
const valPrompts = new Set(val.map((row) => row.prompt[0].content));
if (train.some((row) => valPrompts.has(row.prompt[0].content))) throw new Error('a training prompt is also a validation prompt');
writeRowsJsonl(path.join(dataDir, 'val.jsonl'), val);
writeRowsJsonl(path.join(dataDir, 'train.jsonl'), train);

// The language's pieces are single tokens, so a program is about eight tokens.
const words = ['def f(x):return ', 'sorted(', '[::-1]', '[1:]', '[:-1]', '[v+1', '[v-1', '[v*2', '[v*v', '[v', ' for v in ', ' if v%2==0]', ' if v%2]'];
const tokenizer = buildTokenizer({ characters: '0123456789,;>:()[]x', words });
const tokenizerDir = path.join(out, 'tokenizer');
tokenizer.save(tokenizerDir);
const longest = (texts: string[]) => Math.max(...texts.map((text) => tokenizer.encode(text).length));
const maxPrompt = longest([...train, ...val, ...sft].map((row) => row.prompt[0].content as string));
const maxResponse = longest(sft.map((row) => row.extra_info!.response as string)) + 1;
console.log(`${programs.length} programs, ${textsByBehaviour.size} behaviours; longest prompt ${maxPrompt} tokens, response ${maxResponse}`);

const modelConfig = path.join(out, 'model-config.json');
fs.writeFileSync(modelConfig, JSON.stringify(smallLlamaConfig(tokenizer, { hidden: 128, layers: 3, heads: 4, kvHeads: 2, maxPositions: 128 }), null, 2) + '\n');

await initEngine('auto');
const scratch = fs.mkdtempSync(path.join(out, '.sft-'));
const sftFile = path.join(scratch, 'sft.jsonl');
writeRowsJsonl(sftFile, sft);
const config = resolveConfig({
  userFile: path.join(out, 'prepare.ts'),
  user: {
    data: { train_files: sftFile, max_prompt_length: maxPrompt, max_response_length: maxResponse },
    actor_rollout_ref: { model: { tokenizer_path: tokenizerDir } },
    sft: { init_config: modelConfig, total_steps: Number(values['sft-steps']), batch_size: 32, lr: 2e-3, lr_scheduler_type: 'cosine', warmup_steps: 50, output_dir: path.join(out, 'base-model') },
    trainer: { seed: Number(values.seed), default_local_dir: scratch },
  },
});
await runSft(config);
fs.rmSync(scratch, { recursive: true, force: true });
