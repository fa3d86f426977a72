// Validation's numbers from samples, against values worked by hand.
import { expect } from 'chai';
import { validationMetrics } from '../core-adapters/trainer/val-metrics.js';

describe('validationMetrics: validation numbers from samples alone', () => {
  it('two prompts of four samples: accuracy, pass@k and the unbiased pass@j, distinct answers, entropy, score and length', () => {
    const { metrics, prompts } = validationMetrics({
      k: 4,
      // Prompt 0: three correct, two of them the same answer; prompt 1: none.
      correct: [true, true, false, true, false, false, false, false],
      responses: [[5, 6], [5, 6], [7], [8, 9, 1], [1], [2], [3], [4]],
      scores: [1, 1, -1, 1, -1, -1, -1, -1],
    });
    // Shares 2/3 and 1/3 of the correct samples.
    const entropy = -((2 / 3) * Math.log(2 / 3) + (1 / 3) * Math.log(1 / 3));
    expect(metrics['val/accuracy']).to.equal(3 / 8);
    expect(metrics['val/pass@k']).to.equal(1 / 2);
    expect(metrics['val/k']).to.equal(4);
    // pass@1 = mean of c/n; pass@2 and pass@4 are 1 for prompt 0 (one wrong sample cannot fill 2 draws).
    expect([metrics['val/pass@1'], metrics['val/pass@2'], metrics['val/pass@4']]).to.deep.equal([3 / 8, 1 / 2, 1 / 2]);
    expect(metrics['val/distinct_correct']).to.equal(1);
    expect(metrics['val/correct_entropy']).to.be.closeTo(entropy, 1e-12);
    expect(metrics['val/score/mean']).to.equal(-0.25);
    expect(metrics['val/response_length/mean']).to.equal(1.5);
    expect(prompts.map((p) => [p.correct, p.distinct])).to.deep.equal([
      [3, 2],
      [0, 0],
    ]);
    expect(prompts[0].correctResponses).to.deep.equal([
      [5, 6],
      [8, 9, 1],
    ]);
    expect(prompts[0].entropy).to.be.closeTo(entropy, 1e-12);
    expect(prompts[1].entropy).to.equal(0);
  });

  it('one answer taking all the correct mass has entropy 0; no prompt solved gives 0, not NaN', () => {
    const one = validationMetrics({ k: 2, correct: [true, true], responses: [[3], [3]], scores: [1, 1] }).metrics;
    expect([one['val/correct_entropy'], one['val/distinct_correct'], one['val/pass@1']]).to.deep.equal([0, 1, 1]);
    const none = validationMetrics({ k: 2, correct: [false, false], responses: [[3], [4]], scores: [0, 0] }).metrics;
    expect([none['val/correct_entropy'], none['val/pass@k'], none['val/accuracy']]).to.deep.equal([0, 0, 0]);
  });
});
