// Which sources are newer than their compiled file in dist/ (or have none): a stale dist/ would run
// old code. npm test's checks skip the build when none is (npm ci has just built it), and the tests
// that start the built command refuse to run on a stale one.
import fs from 'node:fs';
import path from 'node:path';

/** Sources under core-adapters/ and plugin/ of `root` whose dist/ file is missing or older, relative to `root`. */
export function staleOutputs(root) {
  const stale = [];
  for (const dir of ['core-adapters', 'plugin']) {
    for (const entry of fs.readdirSync(path.join(root, dir), { recursive: true, encoding: 'utf8' })) {
      if (!entry.endsWith('.ts') || entry.endsWith('.d.ts')) continue;
      const source = path.join(root, dir, entry);
      const compiled = path.join(root, 'dist', dir, entry.replace(/\.ts$/, '.js'));
      if (!fs.existsSync(compiled) || fs.statSync(compiled).mtimeMs < fs.statSync(source).mtimeMs) stale.push(path.relative(root, source));
    }
  }
  return stale;
}
