// Test-only fault injection for flowrl serve (`--test-faults`): POST /_flowrl/faults makes the next
// generation requests fail, drop, hang or slow down, fails health, simulates a restart to the base
// weights, skews logprobs or breaks the engine, so the tests of the rollout clients and of the server
// can see every failure a real server shows. Kept apart from serve.ts, which never imports it.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HttpError, readNumber, type Json } from './serve-http.js';
import { KEEP_ALIVE_MS, type FlowrlServer } from './serve.js';

/** Injected failures: each *_next counts down over generation requests. */
interface Faults {
  /** Answer the next N generation requests with `status`. */
  fail_next: number;
  status: number;
  /** Sample, then drop the connection without an answer, for the next N. */
  drop_next: number;
  /** Never answer the next N (the client's timeout ends them). */
  hang_next: number;
  /** /health and /health_generate answer 503. */
  health_fail: boolean;
  /** Milliseconds added before each generation answer. */
  delay_ms: number;
  /** Go back to the base weights (version '0') just before the next N generation requests: a restart the client did not see. */
  restart_next: number;
  /** The next N decode steps throw, as a failing kernel would: the engine breaks. */
  break_next: number;
  /** Answer the next `route_fail_next` calls of `route_fail` ('METHOD /path') with `status`. */
  route_fail: string;
  route_fail_next: number;
  /** The message of those answers ('' for a generic one), to stand in for a real engine's words. */
  route_fail_message: string;
  /**
   * Close a connection idle this many milliseconds after its last answer, sending no Keep-Alive
   * header (as SGLang's uvicorn does, 5 s by default); 0: Node's own keep-alive (5 s, announced).
   */
  idle_close_ms: number;
  /** Every sample's answer, as text: its tokens taken instead of drawn (then eos), scored as drawn; '' draws. */
  script: string;
}

const NO_FAULTS: Faults = { fail_next: 0, status: 500, drop_next: 0, hang_next: 0, health_fail: false, delay_ms: 0, restart_next: 0, break_next: 0, route_fail: '', route_fail_next: 0, route_fail_message: '', idle_close_ms: 0, script: '' };

/** Closes each connection `idleMs()` after its last answer unless another request came (when idleMs() > 0). */
function closeIdleConnections(http: NonNullable<FlowrlServer['httpServer']>, idleMs: () => number): void {
  const timers = new WeakMap<object, NodeJS.Timeout>();
  http.on('request', (req: IncomingMessage, res: ServerResponse) => {
    clearTimeout(timers.get(req.socket));
    res.on('finish', () => {
      if (idleMs() > 0) timers.set(req.socket, setTimeout(() => req.socket.end(), idleMs()).unref());
    });
  });
}

/** Installs the fault hooks and the /_flowrl/faults route on `server`. */
export function installFaults(server: FlowrlServer): void {
  let faults: Faults = { ...NO_FAULTS };
  let idleCloser = false;
  /** Calls per route since the last reset (tests check which calls a client makes). */
  let calls: Record<string, number> = {};
  const engine = server.engine;
  server.hooks.beforeRoute = (route) => {
    if (route === 'POST /_flowrl/faults') return;
    calls[route] = (calls[route] ?? 0) + 1;
    if (route === faults.route_fail && faults.route_fail_next > 0) {
      faults.route_fail_next -= 1;
      throw new HttpError(faults.status, faults.route_fail_message || `injected failure of ${route} (status ${faults.status})`);
    }
  };
  server.hooks.unhealthy = () => faults.health_fail;
  let scripted: { text: string; ids: number[] } | undefined;
  server.hooks.scriptedIds = () => {
    const tokenizer = server.options.tokenizer;
    if (!faults.script || !tokenizer) return undefined;
    if (scripted?.text !== faults.script) scripted = { text: faults.script, ids: [...tokenizer.encode(faults.script), ...engine.config.eosTokenIds.slice(0, 1)] };
    return scripted.ids;
  };
  engine.beforeStep = () => {
    if (faults.break_next <= 0) return;
    faults.break_next -= 1;
    throw new Error('memory access out of bounds (injected)');
  };
  server.hooks.beforeGeneration = async () => {
    if (faults.fail_next > 0) {
      faults.fail_next -= 1;
      throw new HttpError(faults.status, `injected failure (status ${faults.status})`);
    }
    if (faults.hang_next > 0) {
      faults.hang_next -= 1;
      return 'hang';
    }
    if (faults.restart_next > 0) {
      faults.restart_next -= 1;
      await engine.restartToBase();
    }
    if (faults.delay_ms > 0) await new Promise((r) => setTimeout(r, faults.delay_ms));
    if (faults.drop_next > 0) {
      faults.drop_next -= 1;
      return 'drop';
    }
    return 'answer';
  };
  server.addRoutes({
    'POST /_flowrl/faults': {
      handler: async ({ body }): Promise<Json> => {
        if (body.reset === true) {
          faults = { ...NO_FAULTS };
          calls = {};
          // The skew is an injected fault too; reset clears it back to the configured one.
          engine.logprobSkew = server.options.logprobSkew ?? 0;
        }
        for (const key of ['fail_next', 'status', 'drop_next', 'hang_next', 'delay_ms', 'restart_next', 'break_next', 'route_fail_next', 'idle_close_ms'] as const) faults[key] = readNumber(body, key, faults[key], { integer: true, min: 0 });
        const http = server.httpServer;
        if (http) {
          // keepAliveTimeout 0: Node neither announces nor enforces one; the closer below does the closing.
          http.keepAliveTimeout = faults.idle_close_ms > 0 ? 0 : KEEP_ALIVE_MS;
          if (!idleCloser && faults.idle_close_ms > 0) closeIdleConnections(http, () => faults.idle_close_ms);
          idleCloser ||= faults.idle_close_ms > 0;
        }
        if (typeof body.route_fail === 'string') faults.route_fail = body.route_fail;
        if (typeof body.route_fail_message === 'string') faults.route_fail_message = body.route_fail_message;
        if (typeof body.script === 'string') faults.script = body.script;
        if (body.health_fail !== undefined) faults.health_fail = body.health_fail === true;
        if (body.logprob_skew !== undefined) engine.logprobSkew = readNumber(body, 'logprob_skew', 0);
        if (body.restart === true) await engine.restartToBase();
        return { faults, calls, logprob_skew: engine.logprobSkew, weight_version: engine.weightVersion };
      },
    },
  });
}
