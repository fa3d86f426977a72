import { expect } from 'chai';
import { passAtJOf, passAtJs, passAtK, reportedKs } from '../core-adapters/trainer/pass-at-k.js';

describe('pass@k, the unbiased estimator of Chen et al. (2021)', () => {
  it('equals 1 - C(n-c, k) / C(n, k), worked by hand', () => {
    // n 5, c 2: C(3,1)/C(5,1) = 3/5; C(3,2)/C(5,2) = 3/10; C(3,3)/C(5,3) = 1/10; k 4 needs 4 wrong of 3.
    expect(passAtK(5, 2, 1)).to.be.closeTo(0.4, 1e-12);
    expect(passAtK(5, 2, 2)).to.be.closeTo(0.7, 1e-12);
    expect(passAtK(5, 2, 3)).to.be.closeTo(0.9, 1e-12);
    expect(passAtK(5, 2, 4)).to.equal(1);
    // n 10, c 3, k 5: 1 - C(7,5)/C(10,5) = 1 - 21/252.
    expect(passAtK(10, 3, 5)).to.be.closeTo(1 - 21 / 252, 1e-12);
    // n 64, c 1: one right answer among 64 is found by k of them with probability k/64.
    for (const k of [1, 8, 32, 64]) expect(passAtK(64, 1, k)).to.be.closeTo(k / 64, 1e-12);
    expect(passAtK(8, 0, 8)).to.equal(0);
    expect(passAtK(8, 8, 1)).to.equal(1);
  });

  it('refuses impossible counts, and reports k = 1, 2, 4, ... up to n', () => {
    expect(() => passAtK(4, 5, 1)).to.throw('0 <= c <= n');
    expect(() => passAtK(4, 1, 5)).to.throw('1 <= k <= n');
    expect(reportedKs(1)).to.deep.equal([1]);
    expect(reportedKs(8)).to.deep.equal([1, 2, 4, 8]);
    expect(reportedKs(12)).to.deep.equal([1, 2, 4, 8, 12]);
  });

  it('reads j from val/pass@j keys only', () => {
    expect(['val/pass@1', 'val/pass@64', 'val/pass@k', 'val/pass@', 'val/accuracy', 'x/val/pass@2'].map(passAtJOf)).to.deep.equal([1, 64, null, null, null, null]);
    // passAtJs: the js of any iterable of keys (a Map's keys, an object's), numerically ascending.
    expect(passAtJs(new Map([['val/pass@16', 1], ['val/pass@2', 1], ['val/pass@k', 1], ['val/accuracy', 1]]).keys())).to.deep.equal([2, 16]);
    expect(passAtJs(Object.keys({ 'val/pass@4': 0, 'val/pass@1': 0 }))).to.deep.equal([1, 4]);
    expect(passAtJs([])).to.deep.equal([]);
  });
});
