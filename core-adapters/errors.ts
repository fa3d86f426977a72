/**
 * Bad input from a user: a config key, a file, a data row, a manifest. The CLI prints the message
 * alone (no stack) and exits with code 2.
 */
export class InputError extends Error {
  readonly exitCode = 2;
  constructor(message: string) {
    super(message);
    this.name = 'InputError';
  }
}

/** Throws an InputError naming `where` (a file, key or row) unless `condition` holds. */
export function check(condition: unknown, where: string, problem: string): asserts condition {
  if (!condition) throw new InputError(`${where}: ${problem}`);
}

/**
 * A run stopped on request (SIGINT, SIGTERM) after finishing its step and saving a checkpoint. The
 * CLI prints the message and exits with the signal's conventional code (128 + its number).
 */
export class RunStopped extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
    this.name = 'RunStopped';
  }
}

/**
 * A data-parallel rank stopping for a reason every rank found together, which rank 0 reports: the
 * CLI exits with the code without a message, so the job prints it once.
 */
export class ReportedByRankZero extends Error {
  constructor(readonly exitCode = 2) {
    super('stopped with rank 0 (which says why)');
    this.name = 'ReportedByRankZero';
  }
}

/**
 * Every rollout server stopped answering. The trainer saves a checkpoint of the last finished step
 * first; the CLI prints the message and exits with code 3, and the same command resumes.
 */
export class RolloutUnavailable extends Error {
  readonly exitCode = 3;
  constructor(message: string) {
    super(message);
    this.name = 'RolloutUnavailable';
  }
}

/**
 * The GPU reported an error (validation, out of memory, internal, device lost) under a run: its
 * results since the last readback are not trustworthy. The CLI prints the message, which names
 * the operation, and exits with code 1.
 */
export class GpuDeviceError extends Error {
  readonly exitCode = 1;
  constructor(message: string) {
    super(message);
    this.name = 'GpuDeviceError';
  }
}

/**
 * Scoring one response failed in a way the response caused (a harness report that is not a
 * record's shape, a value too deep to compare): the response scores 0 and `kind` is counted
 * (reward/errors/<kind>); the run goes on.
 */
export class ScoringError extends Error {
  constructor(
    readonly kind: string,
    message: string,
  ) {
    super(message);
    this.name = 'ScoringError';
  }
}

/**
 * A scorer's own machinery cannot work (the code sandbox does not start, a SandboxFusion server
 * does not answer): not any response's doing, so it stops the run (exit 1) rather than score 0.
 */
export class ScorerUnavailable extends Error {
  readonly exitCode = 1;
  constructor(message: string) {
    super(message);
    this.name = 'ScorerUnavailable';
  }
}
