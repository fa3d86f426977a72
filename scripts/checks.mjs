// npm test's checks before mocha, side by side: build (the tests that start the command run dist/),
// type-check and lint are independent and each leaves a core partly idle, so together they take
// about the longest one's time. Each one's output is printed whole when it ends; any failure fails.
import { spawn } from 'node:child_process';

const CHECKS = ['build', 'typecheck', 'lint'];
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
