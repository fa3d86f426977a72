// The trackers that speak a server's API (MLflow's REST API, W&B's GraphQL and file stream): what
// their clients do for the sink's thread (tracker-sink.ts), and their HTTP requests, tried again
// with growing waits when the server may answer later, refused at once when it will not, and failed
// with the cause (fetch alone says "fetch failed").
import type { Metrics } from '../contracts/index.js';

export type TrackerKind = 'mlflow' | 'wandb';

/** What the sink tells its thread (the client's calls, in order); flush is answered with flushed. */
export type TrackerMessage =
  | { type: 'begin' }
  | { type: 'log'; step: number; metrics: Metrics; timestamp: number }
  | { type: 'generations'; step: number; generations: { prompt: string; response: string; score: number }[] }
  | { type: 'close'; status: 'FINISHED' | 'FAILED' }
  | { type: 'flush'; id: number };

/** A tracker's client, as its thread drives it. */
export interface TrackerClient {
  begin(): void;
  log(step: number, metrics: Metrics, timestamp: number): void;
  logGenerations?(step: number, generations: { prompt: string; response: string; score: number }[]): void;
  close(status: 'FINISHED' | 'FAILED'): void;
  /** Resolves once what was queued has been sent (or given up on). */
  flush(): Promise<void>;
}


/** Waits before each retry, in ms (5 attempts: 7.5 s of waiting in all); FLOWRL_TRACKER_RETRY_MS sets the first (the others double it). */
export function trackerRetryDelays(env = process.env): number[] {
  const first = Number(env.FLOWRL_TRACKER_RETRY_MS ?? 500);
  return [1, 2, 4, 8].map((k) => k * (Number.isFinite(first) && first >= 0 ? first : 500));
}

const REQUEST_TIMEOUT_MS = 10_000;

export interface TrackerRequest {
  method: 'GET' | 'POST' | 'PUT';
  url: string;
  /** How the request is named in errors (a route, not the whole URL). */
  label: string;
  headers: Record<string, string>;
  body?: string;
  /** Whether an answer with this status may change on a retry. */
  retryable: (status: number) => boolean;
}

/** A request that failed for good; `refused` when the server answered with a status a retry would not change. */
export class TrackerRequestError extends Error {
  constructor(
    message: string,
    readonly refused: boolean,
  ) {
    super(message);
  }
}

/**
 * Sends `request`, trying again after each of trackerRetryDelays() while the failure may pass (the
 * network, a status `retryable` accepts); returns the parsed JSON answer, or throws a TrackerRequestError with the last cause.
 */
export async function trackerRequest(request: TrackerRequest): Promise<unknown> {
  const { method, url, label, headers, body } = request;
  let last = '';
  let refused = false;
  const delays = trackerRetryDelays();
  for (let attempt = 0; attempt <= delays.length; attempt++) {
    // An abandoned tracker's thread is terminated, waits and all.
    if (attempt > 0) await new Promise((resolve) => setTimeout(resolve, delays[attempt - 1]));
    try {
      const response = await fetch(url, { method, headers, body, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
      const text = await response.text();
      if (response.ok) return text ? JSON.parse(text) : {};
      last = `${method} ${label}: HTTP ${response.status} ${text.slice(0, 200)}`;
      if (!request.retryable(response.status)) {
        refused = true;
        break;
      }
    } catch (e) {
      // fetch says only "fetch failed"; its cause says why (ECONNREFUSED, a reset, a timeout).
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      last = `${method} ${label}: ${(e as Error).message}${cause ? ` (${cause.message ?? cause.code})` : ''}`;
    }
  }
  throw new TrackerRequestError(last, refused);
}

/** Rounds of tries (each trackerRequest's five) for what is left, and the run's end, when a run ends (within the trainer's 30 s). */
export const FINAL_ROUNDS = 3;

/** The run's last request, given FINAL_ROUNDS rounds of tries; a refusal is not tried again. */
export async function inFinalRounds<T>(request: () => Promise<T>): Promise<T> {
  for (let round = 1; ; round++) {
    try {
      return await request();
    } catch (e) {
      if ((e instanceof TrackerRequestError && e.refused) || round >= FINAL_ROUNDS) throw e;
    }
  }
}

/** Tells of a server that does not answer once, when it starts (the steps kept from then), and once when it answers again. */
export class OutageNotice {
  private from?: number;

  constructor(
    private readonly tracker: string,
    private readonly warn: (line: string) => void,
    private readonly say: (line: string) => void,
  ) {}

  failed(step: number, cause: string): void {
    if (this.from !== undefined) return;
    this.from = step;
    this.warn(`[flowrl] trainer.logger ${this.tracker}: the server does not answer (${cause}); the steps from ${step} are kept and sent when it does`);
  }

  /** Said once at the end of a run for the steps still queued (they are in metrics.jsonl). */
  unsent(firstStep: number, lastStep: number): void {
    this.warn(`[flowrl] trainer.logger ${this.tracker}: steps ${firstStep}-${lastStep} were not sent (the server did not answer); they are in metrics.jsonl`);
  }

  sent(lastStep: number): void {
    if (this.from === undefined) return;
    this.say(`[flowrl] trainer.logger ${this.tracker}: the server answers again; steps ${this.from}-${lastStep} sent`);
    this.from = undefined;
  }
}
