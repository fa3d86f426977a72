// Every relative link in the repository's Markdown files: the file it names must exist, and a
// #fragment must be one of that file's headings (GitHub's anchors). Prints what does not resolve.
//   node scripts/markdown-links.mjs        (exit 1 when a link is broken)
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
// .llama-cpp: where bench --compare-llama-cpp's install advice puts node-llama-cpp in a checkout.
const SKIP = new Set(['node_modules', 'dist', 'runs', '.git', 'native/build', '.llama-cpp']);

/** Markdown files under `dir`, skipping dependencies and outputs. */
export function markdownFiles(dir = ROOT) {
  const out = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (SKIP.has(path.relative(ROOT, full))) continue;
    if (entry.isDirectory()) out.push(...markdownFiles(full));
    else if (entry.name.endsWith('.md')) out.push(full);
  }
  return out.sort();
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
export function slug(heading) {
  return heading
    .trim()
    .toLowerCase()
    .replace(/`/g, '')
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** The anchors of a Markdown file's headings (outside code fences; repeats get -1, -2, ...). */
export function anchors(text) {
  const seen = new Map();
  const out = new Set();
  let fenced = false;
  for (const line of text.split('\n')) {
    if (/^\s*```/.test(line)) fenced = !fenced;
    const m = !fenced && /^#{1,6}\s+(.*)$/.exec(line);
    if (!m) continue;
    const base = slug(m[1]);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n ? `${base}-${n}` : base);
  }
  return out;
}

/** Relative links of a Markdown file (outside code fences and inline code) that do not resolve. */
export function brokenLinks(file) {
  const text = fs.readFileSync(file, 'utf8');
  const broken = [];
  let fenced = false;
  text.split('\n').forEach((line, i) => {
    if (/^\s*```/.test(line)) fenced = !fenced;
    if (fenced) return;
    for (const [, target] of line.replace(/`[^`]*`/g, '').matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
      const [filePart, fragment] = target.split('#');
      const resolved = filePart ? path.resolve(path.dirname(file), decodeURIComponent(filePart)) : file;
      const where = `${path.relative(ROOT, file)}:${i + 1}: ${target}`;
      if (!resolved.startsWith(ROOT + path.sep) && resolved !== ROOT) broken.push(`${where} (outside the repository)`);
      else if (!fs.existsSync(resolved)) broken.push(`${where} (no such file)`);
      else if (fragment && resolved.endsWith('.md') && !anchors(fs.readFileSync(resolved, 'utf8')).has(fragment)) broken.push(`${where} (no heading #${fragment})`);
    }
  });
  return broken;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const broken = markdownFiles().flatMap(brokenLinks);
  for (const b of broken) console.log(b);
  process.exitCode = broken.length ? 1 : 0;
}
