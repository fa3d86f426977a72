// Root hooks: one tfjs backend for the whole run (wasm unless FLOWRL_TEST_BACKEND says otherwise).
import 'reflect-metadata';
import { initEngine, type BackendChoice } from '../core-adapters/index.js';

export const mochaHooks = {
  async beforeAll(this: Mocha.Context) {
    this.timeout(60000);
    await initEngine((process.env.FLOWRL_TEST_BACKEND as BackendChoice) ?? 'wasm', { quiet: true });
  },
};
