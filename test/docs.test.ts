// The documentation: a landing README a newcomer can read, every relative link in every Markdown
// file resolving (files and #headings), and the CLI page naming every command the CLI has.
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { main } from '../core-adapters/cli/commands.js';
import { keySpecs } from '../core-adapters/config/defaults.js';
import { CONFIG_DOC, configReference } from '../scripts/config-reference.js';
import { ROOT } from './helpers.js';

interface LinkChecker {
  markdownFiles(dir?: string): string[];
  brokenLinks(file: string): string[];
  anchors(text: string): Set<string>;
}

describe('documentation', () => {
  let links: LinkChecker;
  before(async () => {
    links = (await import(new URL('../scripts/markdown-links.mjs', import.meta.url).href)) as LinkChecker;
  });

  it('README.md is a landing page of at most 200 lines that links every page under docs/', () => {
    const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    expect(readme.split('\n').length).to.be.at.most(200);
    for (const page of fs.readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md'))) expect(readme, page).to.include(`(docs/${page})`);
  });

  it('every relative link in every Markdown file names a file that exists, and a heading that exists', () => {
    const files = links.markdownFiles();
    expect(files.map((f) => path.relative(ROOT, f))).to.include.members(['README.md', 'docs/plugins.md', 'examples/countdown/README.md']);
    expect(files.flatMap((f) => links.brokenLinks(f))).to.deep.equal([]);
  });

  it('the link checker catches a missing file, a missing heading and a link outside the repository', () => {
    const dir = fs.mkdtempSync(path.join(ROOT, '.tmp-docs-'));
    try {
      const file = path.join(dir, 'page.md');
      fs.writeFileSync(path.join(dir, 'other.md'), '# Other page\n\n## A `code` heading, with punctuation!\n');
      fs.writeFileSync(file, ['# Page', '[ok](other.md#a-code-heading-with-punctuation) [self](#page) [web](https://example.com)', '[gone](nope.md) [bad](other.md#nothing) [out](../../../../etc/passwd)', '`[not a link](nope.md)`'].join('\n'));
      const broken = links.brokenLinks(file).map((b) => b.replace(/^.*?: /, ''));
      expect(broken).to.deep.equal(['nope.md (no such file)', 'other.md#nothing (no heading #nothing)', '../../../../etc/passwd (outside the repository)']);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('docs/cli.md names every command `flowrl --help` lists', async () => {
    const printed: string[] = [];
    const log = console.log;
    console.log = (...args: unknown[]) => printed.push(args.join(' '));
    try {
      expect(await main(['--help'])).to.equal(0);
    } finally {
      console.log = log;
    }
    const commands = [...printed.join('\n').matchAll(/^ {2}flowrl ([a-z-]+)/gm)].map((m) => m[1]);
    expect(commands).to.include.members(['train', 'serve', 'plugins']);
    const cli = fs.readFileSync(path.join(ROOT, 'docs', 'cli.md'), 'utf8');
    for (const command of commands) expect(cli, command).to.include(`npx flowrl ${command} `);
  });

  it('docs/config.md is what scripts/config-reference.ts generates: every key, its default, what it accepts and a meaning', () => {
    const committed = fs.readFileSync(CONFIG_DOC, 'utf8');
    expect(committed === configReference(), 'docs/config.md is stale: run `node --import tsx scripts/config-reference.ts --write`').to.equal(true);
    // Cells hold escaped pipes (\\|) in choice lists.
    const rows = [...committed.matchAll(/^\| `([a-z_.]+)` \| ((?:\\\||[^|])*) \| ((?:\\\||[^|])*) \| ((?:\\\||[^|])*) \|$/gm)];
    expect(rows.map((r) => r[1])).to.include.members(['data.train_batch_size', 'actor_rollout_ref.rollout.server.api_key', 'engine.workers', 'trainer.val_matching']);
    expect(rows.filter((r) => !r[4].trim()).map((r) => r[1]), 'keys without a doc comment in defaults.ts').to.deep.equal([]);
    expect(committed).to.include('| `actor_rollout_ref.actor.loss_agg_mode` | `"token-mean"` | token-mean');
    expect(committed).to.include('| `flowrl.beta` | `15` | a number > 0 | Reward scale');
    expect(committed).to.include('| `reward.flow.context_mode` | `"token_post"` | token_post \\| token_pre \\| identity |');
  });

  it('CORE_SPEC describes each key whole: a doc, and a type for every key whose default is null', () => {
    const specs = [...keySpecs()];
    expect(specs.length).to.be.above(120);
    expect(specs.filter(([, s]) => !s.doc.trim()).map(([k]) => k)).to.deep.equal([]);
    expect(specs.filter(([, s]) => s.default === null && !s.nullable && !s.positiveOrNull).map(([k]) => k), 'null defaults without a type').to.deep.equal([]);
    expect(specs.filter(([, s]) => s.choices && !(s.default === null && s.nullable) && !s.choices.includes(s.default as string)).map(([k]) => k), 'defaults outside their choices').to.deep.equal([]);
  });

});
