// Batch (verl's DataProto): arrays sharing a leading dimension, per-row columns, and the row
// operations the trainer uses (select, split, repeat, union, concat, toTensor).
import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import { Batch, type BatchTensor } from '../core-adapters/index.js';

const f32 = (shape: number[], values: number[]): BatchTensor => ({ shape, data: Float32Array.from(values) });
const i32 = (shape: number[], values: number[]): BatchTensor => ({ shape, data: Int32Array.from(values) });

/** Four rows: ids [4, 2] int32 (row r holds 10r, 10r+1), scores [4] float32, a uid column. */
function sample(): Batch {
  return new Batch({
    tensors: { ids: i32([4, 2], [0, 1, 10, 11, 20, 21, 30, 31]), scores: f32([4], [0.5, 1.5, 2.5, 3.5]) },
    columns: { uid: ['a', 'b', 'c', 'd'] },
    meta: { step: 3 },
  });
}

/** Rows of a [N, ...] array as nested plain lists. */
function rows(t: BatchTensor): number[][] {
  const width = t.shape.slice(1).reduce((a, b) => a * b, 1);
  return Array.from({ length: t.shape[0] }, (_, r) => Array.from(t.data.subarray(r * width, (r + 1) * width)));
}

/** The first id of each row (10 × the original row index). */
const rowIds = (b: Batch) => rows(b.tensor('ids')).map((r) => r[0] / 10);

describe('Batch', () => {
  describe('set / setColumn', () => {
    it('reports its size from the leading dimension', () => {
      expect(new Batch().size).to.equal(0);
      expect(sample().size).to.equal(4);
      expect(new Batch({ columns: { x: [1, 2, 3] } }).size).to.equal(3);
    });

    it('rejects an array whose leading dimension differs from the batch', () => {
      const b = sample();
      expect(() => b.set('bad', f32([3], [1, 2, 3]))).to.throw(/'bad' has 3 rows; the batch has 4/);
      expect(() => b.setColumn('bad', [1, 2])).to.throw(/'bad' has 2 rows/);
      expect(() => new Batch({ tensors: { a: f32([2], [1, 2]), b: f32([3], [1, 2, 3]) } })).to.throw(/rows/);
      expect(b.has('bad')).to.equal(false);
    });

    it('rejects an array whose data does not fill its shape', () => {
      expect(() => new Batch().set('x', f32([2, 3], [1, 2, 3, 4, 5]))).to.throw(/5 values for shape \[2,3\]/);
    });

    it('names the missing key and the keys it has', () => {
      const b = sample();
      expect(() => b.tensor('nope')).to.throw(/no tensor 'nope' \(has: ids, scores\)/);
      expect(() => b.column('nope')).to.throw(/no column 'nope' \(has: uid\)/);
    });
  });

  describe('select / pop', () => {
    it('select keeps the named arrays, and all columns unless told otherwise', () => {
      const b = sample();
      const s = b.select(['ids']);
      expect([...s.tensors.keys()]).to.deep.equal(['ids']);
      expect([...s.columns.keys()]).to.deep.equal(['uid']);
      expect(s.size).to.equal(4);
      expect(s.meta).to.deep.equal({ step: 3 });
      const none = b.select(['scores'], []);
      expect([...none.columns.keys()]).to.deep.equal([]);
      expect(b.has('ids') && b.has('scores') && b.has('uid'), 'select leaves the source intact').to.equal(true);
    });

    it('select of an unknown key throws', () => {
      expect(() => sample().select(['ids', 'nope'])).to.throw(/nope/);
    });

    it('pop removes the named keys from the source and returns them', () => {
      const b = sample();
      const ids = b.tensor('ids');
      const popped = b.pop(['ids'], ['uid']);
      expect(popped.tensor('ids')).to.equal(ids);
      expect(popped.column('uid')).to.deep.equal(['a', 'b', 'c', 'd']);
      expect(b.has('ids')).to.equal(false);
      expect(b.has('uid')).to.equal(false);
      expect(b.has('scores')).to.equal(true);
    });
  });

  describe('selectRows / slice', () => {
    it('takes rows in the given order, with repeats, as copies', () => {
      const b = sample();
      const s = b.selectRows([3, 0, 3]);
      expect(s.size).to.equal(3);
      expect(rows(s.tensor('ids'))).to.deep.equal([
        [30, 31],
        [0, 1],
        [30, 31],
      ]);
      expect(Array.from(s.tensor('scores').data)).to.deep.equal([3.5, 0.5, 3.5]);
      expect(s.tensor('ids').shape).to.deep.equal([3, 2]);
      expect(s.tensor('ids').data).to.be.instanceOf(Int32Array);
      expect(s.tensor('scores').data).to.be.instanceOf(Float32Array);
      expect(s.column('uid')).to.deep.equal(['d', 'a', 'd']);
      s.tensor('ids').data[0] = -1;
      s.column('uid')[0] = 'z';
      expect(b.tensor('ids').data[6], 'the source array is untouched').to.equal(30);
      expect(b.column('uid')[3]).to.equal('d');
    });

    it('selects no rows into an empty batch with the same keys', () => {
      const s = sample().selectRows([]);
      expect(s.size).to.equal(0);
      expect(s.tensor('ids').shape).to.deep.equal([0, 2]);
    });

    it('slice takes consecutive rows and clips at the end', () => {
      const b = sample();
      expect(rowIds(b.slice(1, 3))).to.deep.equal([1, 2]);
      expect(rowIds(b.slice(2))).to.deep.equal([2, 3]);
      expect(rowIds(b.slice(3, 10))).to.deep.equal([3]);
      expect(b.slice(4).size).to.equal(0);
      expect(b.slice(1, 3).column('uid')).to.deep.equal(['b', 'c']);
    });
  });

  describe('split / chunk', () => {
    const ten = () => new Batch({ tensors: { ids: i32([10, 2], Array.from({ length: 20 }, (_, i) => Math.floor(i / 2) * 10 + (i % 2))) } });

    it('split gives consecutive parts of at most the given size', () => {
      expect(ten().split(5).map((p) => p.size)).to.deep.equal([5, 5]);
      expect(ten().split(4).map((p) => p.size)).to.deep.equal([4, 4, 2]);
      expect(ten().split(20).map((p) => p.size)).to.deep.equal([10]);
      expect(ten().split(3).map(rowIds)).to.deep.equal([[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]);
      expect(new Batch().split(4)).to.deep.equal([]);
    });

    it('split rejects a size below 1 instead of looping forever', () => {
      const b = ten();
      let slices = 0;
      const slice = b.slice.bind(b);
      // Guard: a split that never advances would otherwise run until memory is gone.
      b.slice = (start: number, end?: number) => {
        if (++slices > 100) throw new Error('runaway split');
        return slice(start, end);
      };
      let thrown: unknown;
      try {
        b.split(0);
      } catch (e) {
        thrown = e;
      }
      expect(thrown, 'split(0) returned').to.be.instanceOf(Error);
      expect((thrown as Error).message, 'split(0) must refuse the size, not slice forever').to.not.equal('runaway split');
    });

    it('chunk splits evenly when the size divides', () => {
      expect(ten().chunk(2).map((p) => p.size)).to.deep.equal([5, 5]);
      expect(ten().chunk(5).map(rowIds)).to.deep.equal([[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]);
    });

    it('chunk gives exactly the requested number of nearly equal parts when it does not', () => {
      const three = ten().chunk(3);
      expect(three.map((p) => p.size)).to.have.length(3);
      expect(three.flatMap(rowIds)).to.deep.equal([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
      const four = ten().chunk(4).map((p) => p.size);
      expect(four, 'chunk(4) of 10 rows').to.have.length(4);
      expect(Math.max(...four) - Math.min(...four), `chunk(4) of 10 rows: sizes ${four}`).to.be.at.most(1);
      const sixInFour = ten().slice(0, 6).chunk(4).map((p) => p.size);
      expect(sixInFour, 'chunk(4) of 6 rows').to.have.length(4);
    });
  });

  describe('repeat', () => {
    it('interleaves by default (a a b b) for arrays and columns', () => {
      const b = sample().slice(0, 2);
      const r = b.repeat(2);
      expect(rows(r.tensor('ids'))).to.deep.equal([
        [0, 1],
        [0, 1],
        [10, 11],
        [10, 11],
      ]);
      expect(Array.from(r.tensor('scores').data)).to.deep.equal([0.5, 0.5, 1.5, 1.5]);
      expect(r.column('uid')).to.deep.equal(['a', 'a', 'b', 'b']);
      expect(r.meta).to.deep.equal({ step: 3 });
    });

    it('tiles when interleave is false (a b a b) for arrays and columns', () => {
      const r = sample().slice(0, 2).repeat(3, false);
      expect(rowIds(r)).to.deep.equal([0, 1, 0, 1, 0, 1]);
      expect(Array.from(r.tensor('scores').data)).to.deep.equal([0.5, 1.5, 0.5, 1.5, 0.5, 1.5]);
      expect(r.column('uid')).to.deep.equal(['a', 'b', 'a', 'b', 'a', 'b']);
    });

    it('works on a batch of columns only, and once is a copy', () => {
      const c = new Batch({ columns: { x: [1, 2] } });
      expect(c.repeat(2).column('x')).to.deep.equal([1, 1, 2, 2]);
      expect(c.repeat(2, false).column('x')).to.deep.equal([1, 2, 1, 2]);
      const once = sample().repeat(1);
      expect(rowIds(once)).to.deep.equal([0, 1, 2, 3]);
      expect(once.tensor('ids')).to.not.equal(sample().tensor('ids'));
    });
  });

  describe('union', () => {
    it('adds the other batch’s arrays and columns, keeping its own meta first', () => {
      const b = sample();
      const other = new Batch({ tensors: { values: f32([4], [9, 8, 7, 6]) }, columns: { label: [1, 0, 1, 0] }, meta: { step: 99, extra: 'x' } });
      const out = b.union(other);
      expect(out).to.equal(b);
      expect([...b.tensors.keys()]).to.deep.equal(['ids', 'scores', 'values']);
      expect(b.column('label')).to.deep.equal([1, 0, 1, 0]);
      expect(b.meta).to.deep.equal({ step: 3, extra: 'x' });
    });

    it('accepts a key both hold as the same object', () => {
      const b = sample();
      const shared = b.select(['ids'], ['uid']);
      expect(() => b.union(shared)).to.not.throw();
      expect(b.tensor('ids')).to.equal(shared.tensor('ids'));
    });

    it('throws for a key both hold with different contents, and for a different row count', () => {
      const b = sample();
      expect(() => b.union(new Batch({ tensors: { scores: f32([4], [0, 0, 0, 0]) } }))).to.throw(/different 'scores'/);
      expect(() => b.union(new Batch({ columns: { uid: ['w', 'x', 'y', 'z'] } }))).to.throw(/different column 'uid'/);
      expect(() => b.union(new Batch({ tensors: { other: f32([2], [0, 0]) } }))).to.throw(/2 rows vs 4/);
      expect(Array.from(b.tensor('scores').data)).to.deep.equal([0.5, 1.5, 2.5, 3.5]);
    });

    it('fills an empty batch', () => {
      const b = new Batch().union(sample());
      expect(b.size).to.equal(4);
      expect(rowIds(b)).to.deep.equal([0, 1, 2, 3]);
    });
  });

  describe('concat', () => {
    it('restores the original after split (arrays, columns, dtypes, meta)', () => {
      const b = sample();
      for (const size of [1, 3, 4]) {
        const back = Batch.concat(b.split(size));
        expect(back.size).to.equal(4);
        expect(back.tensor('ids').shape).to.deep.equal([4, 2]);
        expect(back.tensor('ids').data).to.be.instanceOf(Int32Array).and.deep.equal(b.tensor('ids').data);
        expect(back.tensor('scores').data).to.be.instanceOf(Float32Array).and.deep.equal(b.tensor('scores').data);
        expect(back.column('uid')).to.deep.equal(b.column('uid'));
        expect(back.meta).to.deep.equal(b.meta);
      }
    });

    it('restores the original after chunk and after an uneven split', () => {
      const b = sample().repeat(3, false);
      expect(rowIds(Batch.concat(b.chunk(5)))).to.deep.equal(rowIds(b));
      expect(rowIds(Batch.concat(b.split(5)))).to.deep.equal(rowIds(b));
    });

    it('joins rows of different batches in order', () => {
      const b = sample();
      const joined = Batch.concat([b.slice(2), b.slice(0, 1)]);
      expect(rowIds(joined)).to.deep.equal([2, 3, 0]);
      expect(joined.column('uid')).to.deep.equal(['c', 'd', 'a']);
    });

    it('throws when row shapes differ or a key is missing, and concat of nothing is empty', () => {
      const a = new Batch({ tensors: { x: f32([1, 2], [1, 2]) } });
      expect(() => Batch.concat([a, new Batch({ tensors: { x: f32([1, 3], [1, 2, 3]) } })])).to.throw(/shape/);
      expect(() => Batch.concat([a, new Batch({ tensors: { y: f32([1, 2], [1, 2]) } })])).to.throw(/no tensor 'x'/);
      expect(Batch.concat([]).size).to.equal(0);
    });
  });

  describe('toTensor', () => {
    it('gives an int32 tensor for an Int32Array and float32 for a Float32Array, with shape and values', async () => {
      const b = sample();
      const before = tf.memory().numTensors;
      const ids = b.toTensor('ids');
      const scores = b.toTensor('scores');
      try {
        expect(ids.dtype).to.equal('int32');
        expect(ids.shape).to.deep.equal([4, 2]);
        expect(Array.from(await ids.data())).to.deep.equal([0, 1, 10, 11, 20, 21, 30, 31]);
        expect(scores.dtype).to.equal('float32');
        expect(scores.shape).to.deep.equal([4]);
        expect(Array.from(await scores.data())).to.deep.equal([0.5, 1.5, 2.5, 3.5]);
      } finally {
        ids.dispose();
        scores.dispose();
      }
      expect(tf.memory().numTensors).to.equal(before);
    });

    it('throws for an unknown key without allocating a tensor', () => {
      const before = tf.memory().numTensors;
      expect(() => sample().toTensor('nope')).to.throw(/nope/);
      expect(tf.memory().numTensors).to.equal(before);
    });
  });

  describe('dispose', () => {
    it('drops every array and column', () => {
      const b = sample();
      b.dispose();
      expect(b.size).to.equal(0);
      expect(b.tensors.size + b.columns.size).to.equal(0);
      b.set('fresh', f32([2], [1, 2]));
      expect(b.size, 'a disposed batch takes any row count again').to.equal(2);
    });
  });
});
