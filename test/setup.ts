// Root hooks: one tfjs backend for the whole run (wasm unless FLOWRL_TEST_BACKEND says otherwise).
import 'reflect-metadata';
import { initEngine, type BackendChoice } from '../core-adapters/index.js';

// Products split one way throughout, whatever else the machine runs (a shared machine's parts round
// differently, and CI type-checks beside the tests): the tests that want the shared paths ask for
// them (withSharedMachine), and children inherit this.
process.env.FLOWRL_OVERSUBSCRIBE ??= 'off';

export const mochaHooks = {
  async beforeAll(this: Mocha.Context) {
    this.timeout(60000);
    await initEngine((process.env.FLOWRL_TEST_BACKEND as BackendChoice) ?? 'wasm', { quiet: true });
  },
};
