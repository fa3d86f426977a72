// The installed flowrl package's root directory (the source tree, or the package holding dist/).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

function findRoot(): { dir: string; version: string } | undefined {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const file = path.join(dir, 'package.json');
    if (fs.existsSync(file)) {
      const pkg = JSON.parse(fs.readFileSync(file, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'flowrl' && pkg.version) return { dir, version: pkg.version };
    }
    const parent = path.dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

const found = findRoot();
/** The package directory ('' when this code runs outside an installed flowrl package). */
export const PACKAGE_ROOT = found?.dir ?? '';
/** This host's version (plugins declare the range they support). */
export const HOST_VERSION = found?.version ?? '0.0.0';
