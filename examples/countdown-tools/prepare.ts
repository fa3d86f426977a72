// Prepares the tool-use example (issue 34): countdown where the policy may check an expression with
// the calculator before it answers. Writes a character tokenizer with a chat template (Qwen2.5's
// layout: tool answers in a user turn between <tool_response> tags), RL rows (train, val), the tool
// config, and a base policy SFT'd on conversations of two kinds, so one model can be trained with
// tools or without:
//   - with tools (the prompt lists them): the policy calls the calculator on an expression, reads
//     the value, and answers; half the time its first expression is wrong (it evaluates to another
//     reachable number), the tool says so, and it calls again with a solution before answering;
//   - without tools: the policy answers with a solution at once.
//   npx tsx examples/countdown-tools/prepare.ts                  # the example (see README.md)
//   npx tsx examples/countdown-tools/prepare.ts --preset smoke --out /tmp/tools   # minutes less
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import YAML from 'yaml';
import { buildTokenizer, generateCountdown, initEngine, resolveConfig, Rng, runSft, smallLlamaConfig, solveCountdown, writeRowsJsonl, type DataRow } from '../../core-adapters/index.js';

const PRESETS = {
  example: { problems: 8000, val: 256, sftSteps: 6000, hidden: 128, layers: 3, lr: 2e-3 },
  smoke: { problems: 300, val: 16, sftSteps: 40, hidden: 32, layers: 1, lr: 3e-3 },
};

const { values } = parseArgs({ options: { out: { type: 'string', default: path.dirname(new URL(import.meta.url).pathname) }, preset: { type: 'string', default: 'example' }, seed: { type: 'string', default: '7' } } });
const preset = PRESETS[values.preset as keyof typeof PRESETS];
if (!preset) throw new Error(`--preset must be one of ${Object.keys(PRESETS).join(', ')}`);
const out = path.resolve(values.out!);
const seed = Number(values.seed);
fs.mkdirSync(path.join(out, 'data'), { recursive: true });
await initEngine('auto');

// The call's fixed parts are single tokens, so a call is about ten tokens long.
const CALL_OPEN = '{"name": "calculator", "arguments": {"expression": "';
const CALL_CLOSE = '"}}';
const TEMPLATE = [
  "{%- if tools %}{{ '<|im_start|>system\\ntools:' }}{% for tool in tools %}{{ ' ' + tool.function.name }}{% endfor %}{{ '<|im_end|>\\n' }}{%- endif %}",
  '{%- for message in messages %}',
  "{%- if message.role == 'tool' %}",
  "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{ '<|im_start|>user' }}{% endif %}",
  "{{ '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}",
  "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{ '<|im_end|>\\n' }}{% endif %}",
  "{%- else %}{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{% endif %}",
  '{%- endfor %}',
  "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
].join('');
const tokenizer = buildTokenizer({
  characters: '0123456789+-*/()=, >\n',
  words: ['user', 'assistant', 'system', 'tools:', ' calculator', '<tool_call>', '</tool_call>', '<tool_response>', '</tool_response>', CALL_OPEN, CALL_CLOSE],
  specialTokens: { pad: '<pad>', bos: '<s>', eos: '<|im_end|>', unk: '<unk>', extra: ['<|im_start|>'] },
  chatTemplate: TEMPLATE,
});
const tokenizerDir = path.join(out, 'tokenizer');
tokenizer.save(tokenizerDir);
fs.writeFileSync(path.join(out, 'tools.yaml'), YAML.stringify({ tools: [{ class_name: 'Calculator', config: { type: 'native' } }] }));

// Problems: RL training prompts, validation prompts and SFT problems, disjoint.
const rng = new Rng(seed);
const rows = generateCountdown({ count: preset.problems, seed, sizes: [3], maxNumber: 10, targetRange: [1, 40], promptTemplate: '{numbers} -> {target}' });
const key = (row: DataRow) => JSON.stringify(row.reward_model.ground_truth);
const distinct = rng.shuffle([...new Map(rows.map((r) => [key(r), r])).values()]);
const val = distinct.slice(0, preset.val);
const rl = distinct.slice(preset.val, preset.val * 3);
const sft = distinct.slice(preset.val * 3);
const relabel = (list: DataRow[], split: string) => list.map((row, index) => ({ ...row, extra_info: { split, index } }));
writeRowsJsonl(path.join(out, 'data', 'train.jsonl'), relabel(rl, 'train'));
writeRowsJsonl(path.join(out, 'data', 'val.jsonl'), relabel(val, 'val'));

/** A reachable wrong value's expression over the same numbers (what a policy might try first). */
function wrongTry(numbers: number[], target: number): { expression: string; value: number } | undefined {
  for (let attempt = 0; attempt < 20; attempt++) {
    const value = 1 + rng.int(40);
    if (value === target) continue;
    const solutions = solveCountdown(numbers, value);
    if (solutions.length) return { expression: solutions[rng.int(solutions.length)], value };
  }
  return undefined;
}
const call = (expression: string) => `<tool_call>${CALL_OPEN}${expression}${CALL_CLOSE}</tool_call>`;
const conversations = sft.flatMap((row) => {
  const { numbers, target } = row.reward_model.ground_truth as { numbers: number[]; target: number };
  const solutions = solveCountdown(numbers, target);
  const solution = solutions[rng.int(solutions.length)];
  const user = { role: 'user', content: row.prompt[0].content };
  const wrong = rng.int(2) === 0 ? wrongTry(numbers, target) : undefined;
  const withTools = [user, ...(wrong ? [{ role: 'assistant', content: call(wrong.expression) }, { role: 'tool', content: String(wrong.value) }] : []), { role: 'assistant', content: call(solution) }, { role: 'tool', content: String(target) }, { role: 'assistant', content: solution }];
  return [
    { messages: withTools, tools: ['calculator'] },
    { messages: [user, { role: 'assistant', content: solutions[rng.int(solutions.length)] }] },
  ];
});
const scratch = fs.mkdtempSync(path.join(out, '.sft-'));
const sftFile = path.join(scratch, 'conversations.jsonl');
fs.writeFileSync(sftFile, conversations.map((c) => JSON.stringify(c)).join('\n') + '\n');
const modelConfig = path.join(out, 'model-config.json');
fs.writeFileSync(modelConfig, JSON.stringify(smallLlamaConfig(tokenizer, { hidden: preset.hidden, layers: preset.layers, heads: 4, kvHeads: 2, maxPositions: 128 }), null, 2) + '\n');
const config = resolveConfig({
  userFile: path.join(out, 'prepare.ts'),
  user: {
    data: { train_files: sftFile, max_prompt_length: 32, max_response_length: 80 },
    actor_rollout_ref: { model: { tokenizer_path: tokenizerDir }, rollout: { multi_turn: { tool_config_path: path.join(out, 'tools.yaml') } } },
    sft: { messages_key: 'messages', init_config: modelConfig, total_steps: preset.sftSteps, batch_size: 32, lr: preset.lr, lr_scheduler_type: 'cosine', warmup_steps: 50, output_dir: path.join(out, 'base-model') },
    trainer: { seed, default_local_dir: scratch },
  },
});
await runSft(config);
fs.rmSync(scratch, { recursive: true, force: true });
console.log(`wrote ${out}: tokenizer, tools.yaml, data/{train,val}.jsonl (${rl.length} and ${val.length} prompts), base-model (${conversations.length} SFT conversations, ${preset.sftSteps} steps)`);
