import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import {
  defaultScorer,
  extractCountdownAnswer,
  loadCustomScorer,
  normalizeFinalAnswer,
  scoreCountdown,
  scoreGsm8k,
  scoreMath,
  scoreValue,
  ScorerRegistry,
  type ScoreResult,
} from '../core-adapters/rewards/index.js';
import { resolveConfig } from '../core-adapters/config/load.js';
import { Batch, createHost, NaiveRewardManager, TOKENS } from '../core-adapters/index.js';
import { expectInputError, expectInputErrorAsync, tempDir, writeCountdownConfig } from './helpers.js';


describe('rewards: countdown', () => {
  // 7*(5+2)-3 = 46
  const truth = { numbers: [2, 3, 5, 7], target: 46 };
  const score = (solution: string) => scoreCountdown(solution, truth);

  it('accepts a correct expression in <answer> tags or on the last line', () => {
    expect(score('<think>7 times 7 is 49, minus 3.</think> <answer> 7*(5+2)-3 </answer>')).to.deep.equal({ score: 1, acc: true, pred: '7*(5+2)-3' });
    expect(score('Let me think.\n(2 + 5) * 7 - 3\n\n')).to.deep.equal({ score: 1, acc: true, pred: '(2 + 5) * 7 - 3' });
    expect(score('7 * (5 + 2) - 3 = 46')).to.deep.equal({ score: 1, acc: true, pred: '7 * (5 + 2) - 3' });
    expect(score('<answer>7*(5+2)-3 = 46</answer>').acc).to.equal(true);
    expect(scoreCountdown('<answer>6/(1-3/4)</answer>', { numbers: [1, 3, 4, 6], target: 24 }).acc).to.equal(true); // via 1/4
  });

  it('takes the last <answer> and ignores earlier lines', () => {
    expect(score('<answer>2+3</answer> no wait <answer>7*(5+2)-3</answer>').acc).to.equal(true);
    expect(score('<answer>7*(5+2)-3</answer> no wait <answer>2+3</answer>')).to.deep.equal({ score: 0, acc: false, pred: '2+3' });
    expect(score('7*(5+2)-3\nHmm, or maybe 2+3+5+7')).to.deep.equal({ score: 0, acc: false, pred: 'Hmm, or maybe 2+3+5+7' });
  });

  it('rejects answers that misuse the numbers', () => {
    expect(score('7*(5+2)-3-2+2').acc, 'a number used twice').to.equal(false);
    expect(scoreCountdown('7*(5+2)', { numbers: [2, 3, 5, 7], target: 49 }).acc, 'a number missing').to.equal(false);
    expect(score('7*(5+2)-3+1-1').acc, 'an extra number').to.equal(false);
    expect(score('7*(5+2)+3')).to.deep.equal({ score: 0, acc: false, pred: '7*(5+2)+3' });
  });

  it('scores division by zero, garbage and an empty response as incorrect', () => {
    expect(score('3/(7-5-2)').acc).to.equal(false);
    expect(score('I give up.')).to.deep.equal({ score: 0, acc: false, pred: 'I give up.' });
    expect(score('<answer>process.exit(46)</answer>').acc).to.equal(false);
    expect(score('')).to.deep.equal({ score: 0, acc: false, pred: '' });
  });

  it('uses the configured scores; format applies to a wrong answer inside tags', () => {
    const options = { correct: 2, incorrect: -1, format: 0.1 };
    expect(scoreCountdown('<answer>7*(5+2)-3</answer>', truth, options).score).to.equal(2);
    expect(scoreCountdown('<answer>7*(5+2)+3</answer>', truth, options).score).to.equal(0.1);
    expect(scoreCountdown('7*(5+2)+3', truth, options).score).to.equal(-1);
    expect(scoreCountdown('<answer>7*(5+2)+3</answer>', truth, { incorrect: -1 }).score).to.equal(-1);
  });

  it('extracts the left-hand side of an equation', () => {
    expect(extractCountdownAnswer('so\n<answer>\n 1 + 2 = 3 \n</answer>')).to.deep.equal({ expression: '1 + 2', tagged: true });
    expect(extractCountdownAnswer('1 + 2 = 3\n')).to.deep.equal({ expression: '1 + 2', tagged: false });
  });

  it('reads a JSON-string ground truth and rejects a malformed one', () => {
    expect(scoreCountdown('7*(5+2)-3', JSON.stringify(truth)).acc).to.equal(true);
    expectInputError(() => scoreCountdown('1+2', { numbers: [1, 2] }), 'countdown ground_truth must be {numbers: integer[], target: integer}');
    expectInputError(() => scoreCountdown('1+2', { numbers: [], target: 3 }), 'countdown ground_truth');
    expectInputError(() => scoreCountdown('1+2', 'not json'), 'countdown ground_truth');
  });
});

describe('rewards: gsm8k', () => {
  it('takes the number after the last "#### ", removing thousands commas', () => {
    expect(scoreGsm8k('Half of 144 is 72.\n#### 72', '72')).to.deep.equal({ score: 1, acc: true, pred: '72' });
    expect(scoreGsm8k('#### 1,000', '1000')).to.deep.equal({ score: 1, acc: true, pred: '1000' });
    expect(scoreGsm8k('#### -5', '-5').score).to.equal(1);
    expect(scoreGsm8k('#### 12\nno, wait\n#### 15', '15').score).to.equal(1);
    expect(scoreGsm8k('#### 12\nno, wait\n#### 15', '12')).to.deep.equal({ score: 0, acc: false, pred: '15' });
  });

  it('finds no answer without "#### " in strict mode', () => {
    expect(scoreGsm8k('The answer is 72.', '72')).to.deep.equal({ score: 0, acc: false, pred: '' });
    expect(scoreGsm8k('####72', '72').score).to.equal(0);
    expect(scoreGsm8k('#### 72' + ' and then some more words'.repeat(15), '72').score, 'beyond the last 300 characters').to.equal(0);
  });

  it('flexible mode takes the last number, keeping commas as verl does', () => {
    const flexible = { method: 'flexible' } as const;
    expect(scoreGsm8k('She has 3 bags, so 72 apples.', '72', flexible)).to.deep.equal({ score: 1, acc: true, pred: '72' });
    expect(scoreGsm8k('She earns 1,000 dollars.', '1000', flexible).pred).to.equal('1,000');
    expect(scoreGsm8k('No digits.', '1', flexible)).to.deep.equal({ score: 0, acc: false, pred: '.' });
  });

  it('gives format_score to a wrong extracted answer only', () => {
    expect(scoreGsm8k('#### 71', '72', { format_score: 0.1 }).score).to.equal(0.1);
    expect(scoreGsm8k('no answer', '72', { format_score: 0.1 }).score).to.equal(0);
    expect(scoreGsm8k('#### 72', 72, { score: 5 }).score).to.equal(5);
    expectInputError(() => scoreGsm8k('#### 72', { value: 72 }), 'gsm8k ground_truth');
  });
});

describe('rewards: math (math_dapo)', () => {
  it('normalises final answers as normalize_final_answer does', () => {
    const cases: [string, string][] = [
      ['\\frac12', '\\frac{1}{2}'],
      ['\\boxed{\\frac{1}{2}}', '\\frac{1}{2}'],
      ['$1,000$', '1000'],
      ['5 dollars', '5'],
      ['10\\text{ cm}^2', '10'],
      ['90^\\circ', '90'],
      ['x = \\sqrt2', '\\sqrt{2}'],
      ['\\text{(B)}', '(B)'],
      ['\\textbf{7}', '7'],
      ['The answer is $5$.', '5'],
      ['\\$12.50', '12.50'],
      ['1,2,3', '123'], // verl's integer rule also joins lists
    ];
    for (const [input, output] of cases) expect(normalizeFinalAnswer(input), input).to.equal(output);
  });

  it('scores "Answer:" lines +1 / -1 by default, as verl (minerva); a \\boxed{} alone is not an answer', () => {
    expect(scoreMath('2 * 21 = 42.\nAnswer: 42', '42')).to.deep.equal({ score: 1, acc: true, pred: '42' });
    expect(scoreMath('final answer: $42$ dollars', '42').score).to.equal(1);
    expect(scoreMath('So the answer: $x = \\boxed{\\frac{1}{2}}$', '\\frac12')).to.deep.equal({ score: 1, acc: true, pred: '\\frac{1}{2}' });
    expect(scoreMath('So the answer: $x = \\boxed{\\frac{1}{2}}$.', '\\frac12').pred, "verl keeps a period after the closing $").to.equal('\\frac{1}{2}.');
    expect(scoreMath('The answer is \\boxed{5}', '5')).to.deep.equal({ score: -1, acc: false, pred: '[INVALID]' });
    expect(scoreMath('Answer: 41', '42')).to.deep.equal({ score: -1, acc: false, pred: '41' });
    expect(scoreMath('I am not sure.', '42')).to.deep.equal({ score: -1, acc: false, pred: '[INVALID]' });
    expect(scoreMath('Answer: 42', 42).score).to.equal(1);
  });

  it('boxed_or_answer (opt-in) takes whichever of the last \\boxed{} and the last "Answer:" comes later', () => {
    const lenient = { method: 'boxed_or_answer' } as const;
    expect(scoreMath('\\boxed{3}. Wait, that was wrong.\nAnswer: 4', '4', lenient).score).to.equal(1);
    expect(scoreMath('Answer: 3\nWait, that was wrong: \\boxed{4}', '4', lenient).score).to.equal(1);
    expect(scoreMath('\\boxed{\\frac{\\sqrt{3}}{2}}', '\\frac{\\sqrt{3}}{2}', lenient).score).to.equal(1);
  });

  it('looks only at the last 300 characters', () => {
    expect(scoreMath('Answer: 42\n' + ' blah'.repeat(60), '42').score).to.equal(-1);
    expect(scoreMath(' blah'.repeat(60) + '\nAnswer: 42', '42').score).to.equal(1);
  });

  it("reads Answer: lines with Python's whitespace and case folding, and shorthand over any character (values from verl's own function)", () => {
    expect(scoreMath('Answer:\ufeff5', '5').score).to.equal(-1); // U+FEFF is not whitespace to Python
    expect(scoreMath('Answer:\x851,000', '1000').score).to.equal(1); // U+0085 is
    expect(scoreMath('Anſwer: 5', '5').score).to.equal(1); // 'ſ' folds to 's'
    expect(scoreMath('Answer: \\sqrt😀', '\\sqrt{😀}').score).to.equal(1); // a whole code point, not half
    expect(scoreMath('Answer: ①,000', '①000').score).to.equal(1); // isdigit() takes circled digits
  });

  it("reproduces verl's strict_box_verify: the last \\boxed{} of the last 100 characters, not normalised", () => {
    expect(scoreMath('The answer is \\boxed{5}', '5', { method: 'strict_box' })).to.deep.equal({ score: 1, acc: true, pred: '5' });
    expect(scoreMath('The answer is \\boxed{5}', '5', { strict_box_verify: true }).score).to.equal(1);
    expect(scoreMath('\\boxed{\\frac{1}{2}}', '\\frac12', { method: 'strict_box' }).score).to.equal(-1);
    expect(scoreMath('Answer: 5', '5', { method: 'strict_box' })).to.deep.equal({ score: -1, acc: false, pred: '' });
  });

  it('rejects a ground truth that is not a string or number', () => {
    expectInputError(() => scoreMath('Answer: 1', null), 'math ground_truth');
  });
});

describe('rewards: registry', () => {
  it('dispatches built-in scorers by data_source', () => {
    expect(defaultScorer('countdown')!('<answer>3+4</answer>', { numbers: [3, 4], target: 7 })).to.deep.equal({ score: 1, acc: true, pred: '3+4' });
    for (const source of ['openai/gsm8k', 'gsm8k']) {
      expect(scoreValue(defaultScorer(source)!('#### 5', '5') as ScoreResult).score, source).to.equal(1);
      expect(scoreValue(defaultScorer(source)!('#### 6', '5') as ScoreResult).score, source).to.equal(0);
    }
    for (const source of ['math', 'math_dapo', 'math_dapo_reasoning', 'aime', 'aime2024', 'aime25']) {
      expect(scoreValue(defaultScorer(source)!('Answer: 5', '5') as ScoreResult).score, source).to.equal(1);
      expect(scoreValue(defaultScorer(source)!('Answer: 6', '5') as ScoreResult).score, source).to.equal(-1);
    }
    // verl v0.9.0 sends the Hendrycks MATH sets to math_reward: the last \boxed{}, 1 or 0.
    for (const source of ['lighteval/MATH', 'DigitalLearningGmbH/MATH-lighteval', 'HuggingFaceH4/MATH-500']) {
      expect(scoreValue(defaultScorer(source)!('so \\boxed{\\dfrac{1}{2}}', '0.5') as ScoreResult).score, source).to.equal(1);
      expect(scoreValue(defaultScorer(source)!('Answer: 5', '5') as ScoreResult).score, source).to.equal(0);
    }
  });

  it("checks each scorer's options by verl's names, naming the key", () => {
    expect(scoreValue(defaultScorer('openai/gsm8k', { method: 'flexible', format_score: 0.1 })!('so 6', '5') as ScoreResult).score).to.equal(0.1);
    expectInputError(() => defaultScorer('openai/gsm8k', { method: 'flex' }), 'reward_model.reward_kwargs.openai/gsm8k.method must be one of strict, flexible');
    expectInputError(() => defaultScorer('openai/gsm8k', { formatScore: 0.1 }), "reward_model.reward_kwargs.openai/gsm8k: unknown option 'formatScore'", 'format_score');
    expectInputError(() => defaultScorer('HuggingFaceH4/MATH-500', { method: 'minerva' }), 'takes no options');
    expect(scoreValue(defaultScorer('aime2024', { method: 'boxed_or_answer' })!('\\boxed{7}', '7') as ScoreResult).score).to.equal(1);
  });

  it('takes scorer options as key=value overrides, data_source names with a slash included', () => {
    const config = resolveConfig({ user: {}, userFile: 'command line', overrides: ['reward_model.reward_kwargs.openai/gsm8k.method=flexible', 'reward_model.reward_kwargs.openai/gsm8k.format_score=0.25'] });
    expect(config.reward_model.reward_kwargs).to.deep.equal({ 'openai/gsm8k': { method: 'flexible', format_score: 0.25 } });
    const registry = new ScorerRegistry(config.reward_model);
    registry.checkRewardKwargs(config.reward_model.reward_kwargs);
    const options = config.reward_model.reward_kwargs['openai/gsm8k'] as Record<string, unknown>;
    expect(scoreValue(registry.scorer('openai/gsm8k', options)!('it is 7', '8') as ScoreResult).score).to.equal(0.25);
    expectInputError(() => registry.checkRewardKwargs({ 'my/set': { x: 1 } }), "reward_model.reward_kwargs.my/set: no scorer for data_source 'my/set'");
  });

  it('has no scorer for an unknown data_source', () => {
    for (const source of ['', 'my/dataset', 'Countdown', 'mathematics', 'gsm8k-hard']) expect(defaultScorer(source), source).to.equal(undefined);
  });

  it('splits results into score and extras', () => {
    expect(scoreValue(0.5)).to.deep.equal({ score: 0.5, extras: {} });
    expect(scoreValue({ score: -1, acc: false, pred: 'x', steps: 3 })).to.deep.equal({ score: -1, extras: { acc: false, pred: 'x', steps: 3 } });
    expect(scoreValue({ score: 1, pred: null } as never)).to.deep.equal({ score: 1, extras: {} });
    expectInputError(() => scoreValue(NaN), 'reward score must be a finite number');
    expectInputError(() => scoreValue({ acc: true } as never), "numeric 'score'");
    expectInputError(() => scoreValue({ score: 1, details: { a: 1 } } as never), "reward extra 'details'");
    expectInputError(() => scoreValue('1' as never), "numeric 'score'");
  });

  describe('custom scorers', () => {
    const dir = tempDir('flowrl-rewards-');
    const modulePath = path.join(dir, 'my_reward.mjs');
    fs.writeFileSync(
      modulePath,
      [
        'export function compute_score(data_source, solution_str, ground_truth, extra_info) {',
        '  return { score: solution_str.includes(ground_truth) ? 1 : 0, source: data_source, bonus: extra_info?.bonus ?? 0 };',
        '}',
        'export const notAFunction = 3;',
        'export function noScore() { return { acc: true }; }',
        'export async function asyncScore() { return 1; }',
        'export async function asyncNoScore() { return { acc: true }; }',
      ].join('\n'),
    );
    const relative = path.relative(process.cwd(), modulePath);

    it('loads a function by path (relative to the working directory) and name, called verl-style', async () => {
      const scorer = await loadCustomScorer(relative, 'compute_score');
      expect(scorer('the answer is 42', '42', { bonus: 2 }, 'my_source')).to.deep.equal({ score: 1, source: 'my_source', bonus: 2 });
      expect(scorer('the answer is 41', '42')).to.deep.equal({ score: 0, source: '', bonus: 0 });
    });

    it('names the key and the path of a missing file', async () => {
      await expectInputErrorAsync(loadCustomScorer('no/such/reward.mjs', 'compute_score'), 'custom_reward_function.path', 'no/such/reward.mjs', 'file not found');
      await expectInputErrorAsync(loadCustomScorer('no/such/reward.mjs', 'f', 'reward.custom'), 'reward.custom.path');
      await expectInputErrorAsync(loadCustomScorer('', 'f'), 'custom_reward_function.path');
    });

    it('names the export that is missing or not a function', async () => {
      await expectInputErrorAsync(loadCustomScorer(modulePath, 'score_fn'), 'custom_reward_function.name', "'score_fn'", 'compute_score');
      await expectInputErrorAsync(loadCustomScorer(modulePath, 'notAFunction'), "'notAFunction'");
    });

    it('reports a module that fails to import', async () => {
      const broken = path.join(dir, 'broken.mjs');
      fs.writeFileSync(broken, 'export function compute_score( {\n');
      await expectInputErrorAsync(loadCustomScorer(broken, 'compute_score'), 'custom_reward_function.path', 'cannot import');
    });

    it('rejects results that are not scores; an async function is awaited and checked the same', async () => {
      const noScore = await loadCustomScorer(modulePath, 'noScore');
      expectInputError(() => noScore('x', 'y'), 'custom_reward_function.name', "'noScore'", "numeric 'score'");
      const asyncScore = await loadCustomScorer(modulePath, 'asyncScore');
      expect(await asyncScore('x', 'y')).to.equal(1);
      const asyncNoScore = await loadCustomScorer(modulePath, 'asyncNoScore');
      await expectInputErrorAsync(Promise.resolve(asyncNoScore('x', 'y')), "'asyncNoScore'", "numeric 'score'");
    });
  });
});

describe('rewards: the reward manager when scoring one response fails', () => {
  it('that response scores 0 and reward/errors/<kind> counts it; the others are scored; a bad row still stops', async () => {
    const dir = tempDir();
    const scorer = path.join(dir, 'scorer.mjs');
    fs.writeFileSync(scorer, "export function compute_score(_source, _text, truth) { if (truth === 'crash') return truth.no.such; return truth === 'bad row' ? NaN : 1; }\n");
    const host = await createHost(writeCountdownConfig(dir, { custom_reward_function: { path: scorer } }), { quiet: true, skipEngine: true });
    const manager = host.container.get<NaiveRewardManager>(TOKENS.RewardManager);
    await manager.init();
    const batchOf = (truths: string[]) =>
      new Batch({
        tensors: { responses: { shape: [truths.length, 2], data: new Int32Array(truths.length * 2).fill(4) }, response_mask: { shape: [truths.length, 2], data: new Float32Array(truths.length * 2).fill(1) } },
        columns: { data_source: truths.map(() => 'custom'), ground_truth: truths, extra_info: truths.map(() => ({})) },
      });
    const logged: string[] = [];
    const error = console.error;
    console.error = (...parts: unknown[]) => void logged.push(parts.join(' '));
    let result;
    try {
      result = await manager.compute(batchOf(['ok', 'crash', 'ok', 'crash']));
    } finally {
      console.error = error;
    }
    expect(result.scores).to.deep.equal([1, 0, 1, 0]);
    expect(Array.from(result.tokenLevelScores)).to.deep.equal([0, 1, 0, 0, 0, 1, 0, 0]);
    expect(result.metrics['reward/errors/exception']).to.equal(2);
    expect(logged.join('\n')).to.include("2 response(s) scored 0 because scoring failed (exception: TypeError: Cannot read properties of undefined (reading 'such'))");
    // A score that is not one is the scorer's fault, not the response's: the step stops, naming it.
    await expectInputErrorAsync(manager.compute(batchOf(['ok', 'bad row'])), 'reward score must be a finite number');
  });
});
