// npm test's checks before mocha, side by side: build (the tests that start the command run dist/),
// type-check and lint are independent and each leaves a core partly idle, so together they take
// about the longest one's time. Each one's output is printed whole when it ends; any failure fails.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { staleOutputs } from './stale-dist.mjs';

// A dist/ newer than every source (npm ci's prepare has just built it) is not built again.
const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const fresh = staleOutputs(root).length === 0;
if (fresh) console.log('npm run build: skipped (dist/ is newer than every source)');
const CHECKS = fresh ? ['typecheck', 'lint'] : ['build', 'typecheck', 'lint'];
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

const results = await Promise.all(
  CHECKS.map(
    (name) =>
      new Promise((resolve) => {
        const started = Date.now();
        const child = spawn(npm, ['run', '--silent', name], { stdio: ['ignore', 'pipe', 'pipe'] });
        const output = [];
        child.stdout.on('data', (chunk) => output.push(chunk));
        child.stderr.on('data', (chunk) => output.push(chunk));
        child.on('error', (error) => resolve({ name, status: 1, output: String(error), seconds: 0 }));
        child.on('close', (status) => resolve({ name, status, output: Buffer.concat(output).toString(), seconds: (Date.now() - started) / 1000 }));
      }),
  ),
);
for (const { name, status, output, seconds } of results) {
  console.log(`npm run ${name}: ${status === 0 ? 'ok' : `failed (exit ${status})`} in ${seconds.toFixed(1)} s`);
  if (output.trim()) process.stdout.write(output.endsWith('\n') ? output : `${output}\n`);
}
process.exitCode = results.every((r) => r.status === 0) ? 0 : 1;
