// The judging thread (see judge.ts): judges each run it is sent and replies with the tests passed,
// or the error (a malformed record's kind kept).
import { parentPort } from 'node:worker_threads';
import { ScoringError } from '../errors.js';
import { judgeRunHere, type RunToJudge } from './judge.js';

parentPort!.on('message', ({ id, run }: { id: number; run: RunToJudge }) => {
  try {
    parentPort!.postMessage({ id, passed: judgeRunHere(run) });
  } catch (e) {
    const error = e as Error;
    parentPort!.postMessage({ id, error: { kind: e instanceof ScoringError ? e.kind : undefined, message: error.message } });
  }
});
