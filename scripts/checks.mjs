// npm test after its prerequisites: the build (the tests that start the command run dist/), then
// mocha, with the type-check and lint beside it at the lowest CPU priority. Mocha leaves about a
// sixth of two cores idle (tests waiting on servers, sandboxes and timers); the checks fill that
// instead of running first, and barely slow the tests when the cores are busy. Each check's output
// is printed whole when it ends; any failure fails npm test.
import { spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { staleOutputs } from './stale-dist.mjs';

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

/** Runs `npm run NAME`, its output kept until it ends; `nice` lowers its priority (and its children's). */
function check(name, { nice = false } = {}) {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(npm, ['run', '--silent', name], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    // Set before npm starts the script's process, which inherits it.
    if (nice && child.pid) {
      try {
        os.setPriority(child.pid, 19);
      } catch {
        // not permitted here: the check runs at normal priority
      }
    }
    const output = [];
    child.stdout.on('data', (chunk) => output.push(chunk));
    child.stderr.on('data', (chunk) => output.push(chunk));
    const report = (status, text) => {
      const seconds = (Date.now() - started) / 1000;
      console.log(`npm run ${name}: ${status === 0 ? 'ok' : `failed (exit ${status})`} in ${seconds.toFixed(1)} s`);
      if (text.trim()) process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
      resolve(status);
    };
    child.on('error', (error) => report(1, String(error)));
    child.on('close', (status) => report(status, Buffer.concat(output).toString()));
  });
}

// A dist/ newer than every source (npm ci's prepare has just built it) is not built again.
if (staleOutputs(root).length === 0) console.log('npm run build: skipped (dist/ is newer than every source)');
else if ((await check('build')) !== 0) process.exit(1);

const mocha = new Promise((resolve) => {
  const child = spawn(process.execPath, [path.join(root, 'node_modules', 'mocha', 'bin', 'mocha.js'), ...process.argv.slice(2)], { cwd: root, stdio: 'inherit' });
  child.on('error', (error) => {
    console.error(`mocha did not start: ${error.message}`);
    resolve(1);
  });
  child.on('close', (status, signal) => resolve(status ?? (signal ? 1 : 0)));
});
const statuses = await Promise.all([check('typecheck', { nice: true }), check('lint', { nice: true }), mocha]);
process.exitCode = statuses.every((s) => s === 0) ? 0 : 1;
