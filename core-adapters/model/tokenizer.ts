// Hugging Face tokenizers (tokenizer.json + tokenizer_config.json) and their chat templates, plus a
// builder for small task vocabularies so tiny models are real HF directories too.
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import fs from 'node:fs';
import path from 'node:path';
import { InputError } from '../errors.js';

export interface ChatMessage {
  role: string;
  content: string;
  /** An assistant turn's calls, as chat templates read them (arguments an object). */
  tool_calls?: { type: 'function'; function: { name: string; arguments: Record<string, unknown> } }[];
}

type Json = Record<string, unknown>;

function readJson(file: string, what: string): Json {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    throw new InputError(`${file}: file not found (${what})`);
  }
  try {
    const value = JSON.parse(text);
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error('not an object');
    return value as Json;
  } catch (e) {
    throw new InputError(`${file}: not valid JSON (${(e as Error).message})`);
  }
}

/** tokenizer_config.json holds special tokens as strings or as {content: ...} objects. */
function tokenText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value && typeof value === 'object' && typeof (value as Json).content === 'string') return (value as Json).content as string;
  return undefined;
}

/** Token ids in a tokenizer.json must be whole numbers >= 0 (the library trusts them and fails later). */
function checkTokenIds(json: Json, file: string): void {
  const isId = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v >= 0;
  const model = json.model as Json;
  const vocab = model.vocab;
  if (vocab && typeof vocab === 'object' && !Array.isArray(vocab)) {
    for (const [token, id] of Object.entries(vocab)) if (!isId(id)) throw new InputError(`${file}: key 'model.vocab' maps ${JSON.stringify(token).slice(0, 40)} to ${JSON.stringify(id)?.slice(0, 40)}; token ids are whole numbers >= 0`);
  }
  const added = json.added_tokens;
  if (added !== undefined && added !== null) {
    if (!Array.isArray(added)) throw new InputError(`${file}: key 'added_tokens' must be a list`);
    added.forEach((t, i) => {
      if (typeof t !== 'object' || t === null || !isId((t as Json).id) || typeof (t as Json).content !== 'string') throw new InputError(`${file}: added_tokens[${i}] needs a whole-number id >= 0 and a string content`);
    });
  }
}

/** Stop tokens of a model: its config's eos ids plus the tokenizer's eos token (one place for sampling, the CLI and rollouts). */
export function stopTokenIds(configEos: number[], tokenizer: { eosTokenId?: number }): number[] {
  const ids = new Set(configEos);
  if (tokenizer.eosTokenId !== undefined) ids.add(tokenizer.eosTokenId);
  return [...ids];
}

/** A Hugging Face tokenizer.json with its chat template and special tokens. */
export class TextTokenizer {
  private readonly tokenizer: Tokenizer;
  readonly chatTemplate?: string;
  private compiledTemplate?: Template;
  readonly eosToken?: string;
  readonly bosToken?: string;
  readonly padToken?: string;

  constructor(
    readonly tokenizerJson: Json,
    readonly tokenizerConfig: Json,
    chatTemplate?: string,
    source = 'tokenizer.json',
  ) {
    try {
      this.tokenizer = new Tokenizer(tokenizerJson, tokenizerConfig);
    } catch (e) {
      throw new InputError(`${source}: cannot build the tokenizer (${(e as Error).message})`);
    }
    const template = chatTemplate ?? tokenizerConfig.chat_template;
    this.chatTemplate = typeof template === 'string' ? template : undefined;
    this.eosToken = tokenText(tokenizerConfig.eos_token);
    this.bosToken = tokenText(tokenizerConfig.bos_token);
    this.padToken = tokenText(tokenizerConfig.pad_token);
  }

  /** Loads DIR/tokenizer.json, DIR/tokenizer_config.json (optional) and DIR/chat_template.jinja (optional). */
  static load(dir: string): TextTokenizer {
    const json = readJson(path.join(dir, 'tokenizer.json'), 'a Hugging Face tokenizer');
    if (typeof json.model !== 'object' || json.model === null) {
      throw new InputError(`${path.join(dir, 'tokenizer.json')}: key 'model' is missing; not a Hugging Face tokenizer.json`);
    }
    checkTokenIds(json, path.join(dir, 'tokenizer.json'));
    const configFile = path.join(dir, 'tokenizer_config.json');
    const config = fs.existsSync(configFile) ? readJson(configFile, 'tokenizer settings') : {};
    const templateFile = path.join(dir, 'chat_template.jinja');
    const template = fs.existsSync(templateFile) ? fs.readFileSync(templateFile, 'utf8') : undefined;
    return new TextTokenizer(json, config, template, path.join(dir, 'tokenizer.json'));
  }

  /** Token ids of raw text; special tokens written in the text are recognised, none are added. */
  encode(text: string, addSpecialTokens = false): number[] {
    return this.tokenizer.encode(text, { add_special_tokens: addSpecialTokens }).ids;
  }

  decode(ids: number[], skipSpecialTokens = false): string {
    if (ids.length === 0) return '';
    return this.tokenizer.decode(ids, { skip_special_tokens: skipSpecialTokens });
  }

  tokenId(token: string | undefined): number | undefined {
    return token === undefined ? undefined : this.tokenizer.token_to_id(token);
  }

  get eosTokenId(): number | undefined {
    return this.tokenId(this.eosToken);
  }

  get padTokenId(): number | undefined {
    return this.tokenId(this.padToken) ?? this.eosTokenId;
  }

  get vocabSize(): number {
    return this.tokenizer.get_vocab(true).size;
  }

  get hasChatTemplate(): boolean {
    return this.chatTemplate !== undefined;
  }

  /** Renders messages with the chat template (the caller checks hasChatTemplate); `tools`: function schemas, as transformers passes them. */
  applyChatTemplate(messages: ChatMessage[], addGenerationPrompt = true, tools?: object[], extra: Record<string, unknown> = {}): string {
    if (!this.chatTemplate) throw new Error('this tokenizer has no chat template');
    this.compiledTemplate ??= new Template(this.chatTemplate);
    return this.compiledTemplate.render({
      // A request's own variables (vLLM's chat_template_kwargs: enable_thinking), under the fixed ones.
      ...extra,
      messages,
      ...(tools?.length ? { tools } : {}),
      add_generation_prompt: addGenerationPrompt,
      bos_token: this.bosToken ?? '',
      eos_token: this.eosToken ?? '',
      pad_token: this.padToken ?? '',
    });
  }

  /** Writes tokenizer.json and tokenizer_config.json (with the chat template) into dir. */
  save(dir: string): void {
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(this.tokenizerJson) + '\n');
    const config = { ...this.tokenizerConfig, ...(this.chatTemplate ? { chat_template: this.chatTemplate } : {}) };
    fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(config, null, 2) + '\n');
  }
}

export interface VocabularySpec {
  /** Every character the tokenizer must spell; each becomes a token. */
  characters: string;
  /** Whole words that always encode as one token each. */
  words?: string[];
  /** Special tokens, in id order starting at 0; defaults to pad, bos, eos, unk. */
  specialTokens?: { pad: string; bos: string; eos: string; unk: string; extra?: string[] };
  chatTemplate?: string;
}

/**
 * A small character-level tokenizer.json for a task vocabulary: special tokens first, then one
 * token per character, then the listed words as whole-word added tokens (matched before the
 * character model, so a word is always one token).
 */
export function buildTokenizer(spec: VocabularySpec): TextTokenizer {
  const special = spec.specialTokens ?? { pad: '<pad>', bos: '<s>', eos: '</s>', unk: '<unk>' };
  const specials = [special.pad, special.bos, special.eos, special.unk, ...(special.extra ?? [])];
  const words = [...new Set(spec.words ?? [])];
  const vocab = new Map<string, number>();
  const add = (token: string) => {
    if (!vocab.has(token)) vocab.set(token, vocab.size);
  };
  specials.forEach(add);
  for (const ch of new Set([...spec.characters, ...words.join('')])) add(ch);
  words.forEach(add);
  const added = (content: string, isSpecial: boolean) => ({
    id: vocab.get(content)!,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: isSpecial,
  });
  const addedTokens = [...specials.map((t) => added(t, true)), ...words.filter((w) => [...w].length > 1).map((w) => added(w, false))];
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: null,
    pre_tokenizer: null,
    post_processor: null,
    decoder: { type: 'Fuse' },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: special.unk,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab: Object.fromEntries(vocab),
      merges: [],
    },
  };
  const tokenizerConfig: Json = {
    tokenizer_class: 'PreTrainedTokenizerFast',
    bos_token: special.bos,
    eos_token: special.eos,
    pad_token: special.pad,
    unk_token: special.unk,
    model_max_length: 1024,
    clean_up_tokenization_spaces: false,
    added_tokens_decoder: Object.fromEntries(
      addedTokens.map(({ id, ...rest }) => [String(id), { content: rest.content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: rest.special }]),
    ),
  };
  if (spec.chatTemplate) tokenizerConfig.chat_template = spec.chatTemplate;
  return new TextTokenizer(tokenizerJson, tokenizerConfig);
}
