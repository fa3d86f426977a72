import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { parquetWriteFile } from 'hyparquet-writer';
import type { SchemaElement } from 'hyparquet-writer';
import { readRows, validateRow, writeRowsJsonl, type DataRow } from '../core-adapters/data/index.js';
import { expectInputError, expectInputErrorAsync, FLAT_ROW_SCHEMA, PARQUET_STRING, tempDir } from './helpers.js';


const ROWS: DataRow[] = [
  {
    data_source: 'openai/gsm8k',
    prompt: [
      { role: 'system', content: 'Think step by step.' },
      { role: 'user', content: 'What is 6 * 7? Put the answer after "####".' },
    ],
    ability: 'math',
    reward_model: { style: 'rule', ground_truth: '42' },
    extra_info: { split: 'train', index: 0, answer: 'Six sevens are 42.\n#### 42' },
  },
  {
    data_source: 'countdown',
    prompt: [{ role: 'user', content: 'Using the numbers 3, 4, 5, make 12. ünïcödé ✓' }],
    reward_model: { style: 'rule', ground_truth: { numbers: [3, 4, 5], target: 12 } },
  },
];

const DIR = tempDir('flowrl-data-');
let fileCounter = 0;
/** A fresh path in the scratch directory, with the given extension. */
function scratchFile(extension: string): string {
  return path.join(DIR, `file-${++fileCounter}${extension}`);
}

function writeLines(lines: unknown[]): string {
  const file = scratchFile('.jsonl');
  fs.writeFileSync(file, lines.map((line) => (typeof line === 'string' ? line : JSON.stringify(line))).join('\n') + '\n');
  return file;
}

describe('data rows: jsonl', () => {
  it('round-trips rows through writeRowsJsonl and readRows, leaving no temporary file', async () => {
    const dir = path.join(DIR, 'round-trip', 'nested');
    const file = path.join(dir, 'train.jsonl');
    writeRowsJsonl(file, ROWS);
    expect(await readRows(file)).to.deep.equal(ROWS);
    expect(fs.readFileSync(file, 'utf8').split('\n')).to.have.length(ROWS.length + 1);
    expect(fs.readdirSync(dir)).to.deep.equal(['train.jsonl']);
  });

  it('keeps the old file whole when a write fails midway', async () => {
    const dir = path.join(DIR, 'atomic');
    const file = path.join(dir, 'rows.jsonl');
    writeRowsJsonl(file, ROWS);
    const before = fs.readFileSync(file, 'utf8');
    const unserialisable = [ROWS[0], { ...ROWS[1], extra_info: { big: 1n } }] as DataRow[];
    expect(() => writeRowsJsonl(file, unserialisable)).to.throw(TypeError);
    expect(fs.readFileSync(file, 'utf8')).to.equal(before);
    expect(fs.readdirSync(dir)).to.deep.equal(['rows.jsonl']);
  });

  it('skips blank lines and reads CRLF line endings', async () => {
    const file = scratchFile('.jsonl');
    fs.writeFileSync(file, `\r\n${JSON.stringify(ROWS[0])}\r\n   \r\n\r\n${JSON.stringify(ROWS[1])}\r\n`);
    expect(await readRows(file)).to.deep.equal(ROWS);
  });

  it('normalises rows: string prompt, default style, null optionals, unknown keys dropped', async () => {
    const file = writeLines([
      { data_source: 'math', prompt: 'What is 1+1?', reward_model: { ground_truth: '2' }, ability: null, extra_info: null, question: 'x' },
    ]);
    expect(await readRows(file)).to.deep.equal([
      { data_source: 'math', prompt: [{ role: 'user', content: 'What is 1+1?' }], reward_model: { style: 'rule', ground_truth: '2' } },
    ]);
  });

  it('names the file and 1-based line of a line that is not JSON', async () => {
    const file = writeLines([ROWS[0], '', '{"data_source": "x", oops}']);
    await expectInputErrorAsync(readRows(file), `${file} line 3: not valid JSON (`);
  });

  const badRows: [string, unknown, string][] = [
    ['a list instead of an object', [1, 2], 'a row must be an object'],
    ['no data_source', { ...ROWS[0], data_source: undefined }, "key 'data_source' must be a non-empty string (got missing)"],
    ['an empty data_source', { ...ROWS[0], data_source: '' }, "key 'data_source'"],
    ['an empty prompt list', { ...ROWS[0], prompt: [] }, "key 'prompt' must be a non-empty list of {role, content} messages (it is empty)"],
    ['a numeric prompt', { ...ROWS[0], prompt: 5 }, "key 'prompt' must be a non-empty list of {role, content} messages (it is a number)"],
    ['a message without content', { ...ROWS[0], prompt: [{ role: 'user', content: 'a' }, { role: 'user' }] }, "key 'prompt' must be a non-empty list of {role, content} messages (message 2 has no string 'content')"],
    ['a message without role', { ...ROWS[0], prompt: [{ content: 'a' }] }, "key 'prompt' must be a non-empty list of {role, content} messages (message 1 has no string 'role')"],
    ['no reward_model', { ...ROWS[0], reward_model: undefined }, "key 'reward_model' must be an object {style, ground_truth}"],
    ['no ground_truth', { ...ROWS[0], reward_model: { style: 'rule' } }, "key 'reward_model.ground_truth' is missing"],
    ['a numeric style', { ...ROWS[0], reward_model: { style: 1, ground_truth: '1' } }, "key 'reward_model.style' must be a string"],
    ['a numeric ability', { ...ROWS[0], ability: 3 }, "key 'ability' must be a string"],
    ['a list extra_info', { ...ROWS[0], extra_info: [] }, "key 'extra_info' must be an object (got a list)"],
  ];
  for (const [label, row, message] of badRows) {
    it(`rejects a row with ${label}, naming file and line`, async () => {
      const file = writeLines([ROWS[0], '', row]);
      await expectInputErrorAsync(readRows(file), `${file} line 3: ${message}`);
    });
  }

  it('validateRow names the place it is given', () => {
    expectInputError(() => validateRow({ data_source: 'x' }, 'my/data.jsonl line 7'), "my/data.jsonl line 7: key 'prompt'");
    expect(validateRow(ROWS[1], 'anywhere')).to.deep.equal(ROWS[1]);
  });

  it('reports a missing file and an unsupported extension', async () => {
    const missing = path.join(DIR, 'nope', 'train.jsonl');
    await expectInputErrorAsync(readRows(missing), `${missing}: file not found`);
    await expectInputErrorAsync(readRows(path.join(DIR, 'nope.parquet')), 'nope.parquet: file not found');
    const csv = scratchFile('.csv');
    fs.writeFileSync(csv, 'a,b\n');
    await expectInputErrorAsync(readRows(csv), `${csv}: unsupported data file type '.csv'`, '.jsonl', '.parquet');
  });
});

/** The schema pandas/pyarrow give verl's rows: prompt list<struct>, reward_model and extra_info structs. */
const VERL_SCHEMA: SchemaElement[] = [
  { name: 'root', num_children: 5 },
  { name: 'data_source', ...PARQUET_STRING },
  { name: 'prompt', repetition_type: 'OPTIONAL', converted_type: 'LIST', num_children: 1 },
  { name: 'list', repetition_type: 'REPEATED', num_children: 1 },
  { name: 'element', repetition_type: 'OPTIONAL', num_children: 2 },
  { name: 'role', ...PARQUET_STRING },
  { name: 'content', ...PARQUET_STRING },
  { name: 'ability', ...PARQUET_STRING },
  { name: 'reward_model', repetition_type: 'OPTIONAL', num_children: 2 },
  { name: 'style', ...PARQUET_STRING },
  { name: 'ground_truth', ...PARQUET_STRING },
  { name: 'extra_info', repetition_type: 'OPTIONAL', num_children: 2 },
  { name: 'split', ...PARQUET_STRING },
  { name: 'index', type: 'INT64', repetition_type: 'OPTIONAL' },
];

/** Writes records whose keys are the schema's top-level columns, in schema order. */
function writeParquet(records: Record<string, unknown>[], schema: SchemaElement[]): string {
  const file = scratchFile('.parquet');
  const columns = Object.keys(records[0]);
  parquetWriteFile({ filename: file, schema, columnData: columns.map((name) => ({ name, data: records.map((r) => r[name]) })) });
  return file;
}

describe('data rows: parquet', () => {
  const verlRecords = [
    {
      data_source: 'openai/gsm8k',
      prompt: [
        { role: 'system', content: 'Think.' },
        { role: 'user', content: 'What is 6 * 7?' },
      ],
      ability: 'math',
      reward_model: { style: 'rule', ground_truth: '42' },
      extra_info: { split: 'train', index: 0n },
    },
    {
      data_source: 'openai/gsm8k',
      prompt: [{ role: 'user', content: 'What is 2 + 2?' }],
      ability: null,
      reward_model: { style: 'rule', ground_truth: '4' },
      extra_info: { split: 'train', index: 9007199254740993n },
    },
  ];

  it('reads verl rows with nested prompt, reward_model and extra_info, as plain JSON values', async () => {
    const file = writeParquet(verlRecords, VERL_SCHEMA);
    expect(await readRows(file)).to.deep.equal([
      {
        data_source: 'openai/gsm8k',
        prompt: verlRecords[0].prompt,
        ability: 'math',
        reward_model: { style: 'rule', ground_truth: '42' },
        extra_info: { split: 'train', index: 0 },
      },
      {
        data_source: 'openai/gsm8k',
        prompt: verlRecords[1].prompt,
        reward_model: { style: 'rule', ground_truth: '4' },
        // beyond 2^53: kept exactly as a string rather than rounded
        extra_info: { split: 'train', index: '9007199254740993' },
      },
    ]);
  });

  it('accepts a plain-string prompt column', async () => {
    const file = writeParquet([{ data_source: 'math', prompt: 'Solve x+1=3.', reward_model: { style: 'rule', ground_truth: '2' } }], [...FLAT_ROW_SCHEMA]);
    expect(await readRows(file)).to.deep.equal([
      { data_source: 'math', prompt: [{ role: 'user', content: 'Solve x+1=3.' }], reward_model: { style: 'rule', ground_truth: '2' } },
    ]);
  });

  it('names the file and 1-based row of an invalid row', async () => {
    const file = writeParquet([verlRecords[0], { ...verlRecords[0], data_source: null }], VERL_SCHEMA);
    await expectInputErrorAsync(readRows(file), `${file} row 2: key 'data_source' must be a non-empty string (got null)`);
    const noPrompt = writeParquet([verlRecords[0], verlRecords[0], { ...verlRecords[0], prompt: [] }], VERL_SCHEMA);
    await expectInputErrorAsync(readRows(noPrompt), `${noPrompt} row 3: key 'prompt'`);
  });

  it('rejects a file that is not parquet', async () => {
    const file = scratchFile('.parquet');
    fs.writeFileSync(file, 'this is not a parquet file at all');
    await expectInputErrorAsync(readRows(file), `${file}: not a readable parquet file`);
  });
});
