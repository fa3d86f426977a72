// `flowrl export --format gguf` (issue 37 item 5): the file read back by a reader written here from
// GGUF's layout (gguf-py's gguf_writer.py, llama.cpp as node-llama-cpp 3.21.1 bundles it), and the
// file decoded by llama.cpp itself (node-llama-cpp's prebuilt CPU build, installed on first use)
// to the same greedy tokens as flowrl.
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { frozenBaseAvailable, toBfloat16 } from '../core-adapters/engine/frozen.js';
import { loadModel } from '../core-adapters/model/checkpoint.js';
import { generate } from '../core-adapters/model/generate.js';
import { writeGguf, type GgufDtype } from '../core-adapters/model/gguf.js';
import { readTensors, writeSafetensors } from '../core-adapters/model/safetensors.js';
import { TextTokenizer } from '../core-adapters/model/tokenizer.js';
import { importNodeLlamaCpp, NODE_LLAMA_CPP_VERSION, nodeLlamaCppInstallAdvice } from '../core-adapters/cli/llama-cpp-bench.js';
import { fixture, flowrlInProcess, nodeLlamaCppForTests, ROOT, runBuiltFlowrl, tempDir } from './helpers.js';

const BASE = fixture('countdown', 'base-model');

/** The part of node-llama-cpp's API used here (an optional package, not a dependency). */
interface Llama {
  loadModel(options: { modelPath: string }): Promise<{
    createContext(options: { contextSize: number; threads: number }): Promise<{
      getSequence(): { evaluate(tokens: number[], options: { temperature: number }): AsyncIterable<number>; dispose(): void };
      dispose(): Promise<void>;
    }>;
    dispose(): Promise<void>;
  }>;
  dispose(): Promise<void>;
}

interface GgufFile {
  version: number;
  metadata: Map<string, unknown>;
  tensors: { name: string; dims: number[]; type: number; offset: number }[];
  dataStart: number;
  bytes: Buffer;
}

/** GGUF v3 read from its layout: header, typed key-values, tensor infos, aligned data. */
function readGguf(file: string): GgufFile {
  const bytes = fs.readFileSync(file);
  let at = 0;
  const u32 = () => ((at += 4), bytes.readUInt32LE(at - 4));
  const u64 = () => ((at += 8), Number(bytes.readBigUInt64LE(at - 8)));
  const string = () => {
    const n = u64();
    at += n;
    return bytes.toString('utf8', at - n, at);
  };
  const value = (type: number): unknown => {
    switch (type) {
      case 4:
        return u32();
      case 5:
        return (at += 4), bytes.readInt32LE(at - 4);
      case 6:
        return (at += 4), bytes.readFloatLE(at - 4);
      case 7:
        return bytes[at++] === 1;
      case 8:
        return string();
      case 9: {
        const itemType = u32();
        return Array.from({ length: u64() }, () => value(itemType));
      }
      default:
        throw new Error(`value type ${type} at byte ${at}`);
    }
  };
  expect(bytes.toString('latin1', 0, 4)).to.equal('GGUF');
  at = 4;
  const version = u32();
  const tensorCount = u64();
  const kvCount = u64();
  const metadata = new Map<string, unknown>();
  for (let i = 0; i < kvCount; i++) {
    const key = string();
    metadata.set(key, value(u32()));
  }
  const tensors = Array.from({ length: tensorCount }, () => {
    const name = string();
    const dims = Array.from({ length: u32() }, () => u64());
    return { name, dims, type: u32(), offset: u64() };
  });
  const alignment = (metadata.get('general.alignment') as number) ?? 32;
  return { version, metadata, tensors, dataStart: Math.ceil(at / alignment) * alignment, bytes };
}

function tensorData(gguf: GgufFile, name: string): Float32Array {
  const t = gguf.tensors.find((x) => x.name === name)!;
  const n = t.dims.reduce((a, b) => a * b, 1);
  const start = gguf.dataStart + t.offset;
  if (t.type === 0) return new Float32Array(gguf.bytes.buffer.slice(gguf.bytes.byteOffset + start, gguf.bytes.byteOffset + start + 4 * n));
  const out = new Float32Array(n);
  const bits = new Uint32Array(out.buffer);
  for (let i = 0; i < n; i++) bits[i] = gguf.bytes.readUInt16LE(start + 2 * i) << 16;
  return out;
}

describe('GGUF export (llama.cpp, Ollama, LM Studio)', function () {
  this.timeout(240_000);

  it('writes GGUF v3 with llama.cpp\'s keys and names: dims fastest first, data aligned, q and k rows in llama.cpp\'s rotary order, bfloat16 for matrices only', async () => {
    const dir = tempDir();
    for (const dtype of ['float32', 'bfloat16']) {
      const file = path.join(dir, `${dtype}.gguf`);
      const run = await runBuiltFlowrl(['export', BASE, file, '--format', 'gguf', '--dtype', dtype]);
      expect(run.status, run.stderr).to.equal(0);
      const config = JSON.parse(fs.readFileSync(path.join(BASE, 'config.json'), 'utf8'));
      // The embedding and final norm, then two norms and seven projections a layer (tied head).
      const count = 2 + 9 * config.num_hidden_layers;
      expect(run.stdout).to.include(`GGUF v3, llama, ${count} tensors, ${dtype}`);
      const gguf = readGguf(file);
      expect(gguf.tensors).to.have.length(count);
      const m = gguf.metadata;
      expect(gguf.version).to.equal(3);
      expect(m.get('general.architecture')).to.equal('llama');
      expect(m.get('general.name')).to.equal(path.basename(BASE));
      expect(m.get('general.file_type')).to.equal(dtype === 'float32' ? 0 : 32);
      expect(m.get('llama.block_count')).to.equal(config.num_hidden_layers);
      expect(m.get('llama.embedding_length')).to.equal(config.hidden_size);
      expect(m.get('llama.feed_forward_length')).to.equal(config.intermediate_size);
      expect(m.get('llama.attention.head_count')).to.equal(config.num_attention_heads);
      expect(m.get('llama.attention.head_count_kv')).to.equal(config.num_key_value_heads);
      expect(m.get('llama.attention.layer_norm_rms_epsilon')).to.be.closeTo(config.rms_norm_eps, 1e-12);
      expect(m.get('llama.rope.freq_base')).to.equal(config.rope_theta);
      const vocab = JSON.parse(fs.readFileSync(path.join(BASE, 'tokenizer.json'), 'utf8'));
      const tokens = m.get('tokenizer.ggml.tokens') as string[];
      expect(tokens).to.have.length(config.vocab_size);
      for (const [token, id] of Object.entries(vocab.model.vocab as Record<string, number>)) expect(tokens[id]).to.equal(token);
      // Special added tokens are control tokens (3), the rest normal (1).
      const types = m.get('tokenizer.ggml.token_type') as number[];
      for (const added of vocab.added_tokens) expect(types[added.id], added.content).to.equal(added.special ? 3 : 4);
      expect(m.get('tokenizer.ggml.model')).to.equal('gpt2');
      expect(m.get('tokenizer.ggml.eos_token_id')).to.equal(config.eos_token_id);
      expect(m.get('tokenizer.ggml.merges')).to.deep.equal([]);

      // Tied embeddings: no output.weight (llama.cpp falls back to token_embd).
      expect(gguf.tensors.map((t) => t.name)).to.include.members(['token_embd.weight', 'output_norm.weight', 'blk.0.attn_q.weight', 'blk.1.ffn_down.weight']);
      expect(gguf.tensors.map((t) => t.name)).not.to.include('output.weight');
      for (const t of gguf.tensors) {
        expect(t.offset % 32, t.name).to.equal(0);
        expect(t.type, t.name).to.equal(t.dims.length === 2 && dtype === 'bfloat16' ? 30 : 0);
      }
      expect(gguf.tensors.find((t) => t.name === 'token_embd.weight')!.dims).to.deep.equal([config.hidden_size, config.vocab_size]);
      expect(gguf.tensors.find((t) => t.name === 'blk.1.ffn_down.weight')!.dims).to.deep.equal([config.intermediate_size, config.hidden_size]);

      const hf = readTensors(path.join(BASE, 'model.safetensors'));
      const rounded = (x: Float32Array) => {
        if (dtype === 'float32') return x;
        const half = new Uint16Array(x.length);
        toBfloat16(x, half);
        return Float32Array.from(half, (h) => new Float32Array(new Uint32Array([h << 16]).buffer)[0]);
      };
      expect(Array.from(tensorData(gguf, 'token_embd.weight'))).to.deep.equal(Array.from(rounded(hf.get('model.embed_tokens.weight')!.data)));
      expect(Array.from(tensorData(gguf, 'blk.0.attn_norm.weight'))).to.deep.equal(Array.from(hf.get('model.layers.0.input_layernorm.weight')!.data));
      // Rotary: within each head, HF row r of the first half is GGUF row 2r, of the second half 2r + 1.
      const H = config.hidden_size;
      const headDim = H / config.num_attention_heads;
      for (const [proj, heads] of [['q', config.num_attention_heads], ['k', config.num_key_value_heads]] as const) {
        const hfRows = rounded(hf.get(`model.layers.1.self_attn.${proj}_proj.weight`)!.data);
        const ggRows = tensorData(gguf, `blk.1.attn_${proj}.weight`);
        for (let h = 0; h < heads; h++)
          for (let r = 0; r < headDim / 2; r++)
            for (const [from, to] of [[r, 2 * r], [headDim / 2 + r, 2 * r + 1]]) {
              const a = Array.from(hfRows.subarray((h * headDim + from) * H, (h * headDim + from + 1) * H));
              expect(Array.from(ggRows.subarray((h * headDim + to) * H, (h * headDim + to + 1) * H)), `${proj} head ${h} row ${from}`).to.deep.equal(a);
            }
      }
    }
  });

  it('a LoRA checkpoint is written merged (W + scale B A), as the Hugging Face export writes it; Qwen2 keeps its biases and its rotary order', async () => {
    const dir = tempDir();
    // The fixtures carry no tokenizer: the countdown one, its 24 tokens padded to the base's 128 rows.
    fs.cpSync(fixture('tiny-qwen2'), path.join(dir, 'tiny-qwen2'), { recursive: true });
    fs.copyFileSync(path.join(BASE, 'tokenizer.json'), path.join(dir, 'tiny-qwen2', 'tokenizer.json'));
    const lora = path.join(dir, 'lora-tiny-qwen2');
    fs.cpSync(fixture('lora-tiny-qwen2'), lora, { recursive: true });
    for (const args of [[path.join(dir, 'merged')], [path.join(dir, 'model.gguf'), '--format', 'gguf']]) {
      const run = await runBuiltFlowrl(['export', lora, ...args]);
      expect(run.status, run.stderr).to.equal(0);
    }
    const merged = readTensors(path.join(dir, 'merged', 'model.safetensors'));
    const gguf = readGguf(path.join(dir, 'model.gguf'));
    expect(gguf.metadata.get('general.architecture')).to.equal('qwen2');
    expect(gguf.metadata.get('tokenizer.ggml.pre')).to.equal('qwen2');
    const tokens = gguf.metadata.get('tokenizer.ggml.tokens') as string[];
    const types = gguf.metadata.get('tokenizer.ggml.token_type') as number[];
    expect([tokens.length, tokens[127], types[127]]).to.deep.equal([128, '[PAD127]', 5]);
    for (const [hf, gg] of [['model.layers.0.self_attn.q_proj.weight', 'blk.0.attn_q.weight'], ['model.layers.0.self_attn.k_proj.bias', 'blk.0.attn_k.bias'], ['model.layers.1.mlp.down_proj.weight', 'blk.1.ffn_down.weight']]) {
      expect(Array.from(tensorData(gguf, gg)), gg).to.deep.equal(Array.from(merged.get(hf)!.data));
    }
  });

  it('refuses what it cannot write with one message and exit 2, leaving no file', async () => {
    const dir = tempDir();
    const cases: [string[], string][] = [
      [['--format', 'onnx'], "--format must be hf or gguf; got 'onnx'"],
      [['--dtype', 'bfloat16'], '--dtype applies to --format gguf only'],
      [['--format', 'gguf', '--dtype', 'float16'], "--dtype must be one of float32, bfloat16; got 'float16'"],
      [['--format', 'gguf', '--adapter'], 'GGUF export writes the merged model'],
    ];
    for (const [flags, message] of cases) {
      const run = await flowrlInProcess(['export', BASE, path.join(dir, 'out.gguf'), ...flags]);
      expect(run.status, flags.join(' ')).to.equal(2);
      expect(run.stderr).to.include(message);
    }
    // No tokenizer.json: named by the directory the user gave, not the export's staging copy.
    const bare = await flowrlInProcess(['export', fixture('tiny-qwen2'), path.join(dir, 'bare.gguf'), '--format', 'gguf']);
    expect(bare.status).to.equal(2);
    expect(bare.stderr).to.include(`${fixture('tiny-qwen2')}: no tokenizer.json`);
    // An output that is a directory, and tokenizers that are not JSON or not a BPE vocabulary.
    fs.mkdirSync(path.join(dir, 'as-dir.gguf'));
    const asDir = await flowrlInProcess(['export', BASE, path.join(dir, 'as-dir.gguf'), '--format', 'gguf']);
    expect([asDir.status, asDir.stderr.includes('as-dir.gguf: a directory')]).to.deep.equal([2, true]);
    fs.rmdirSync(path.join(dir, 'as-dir.gguf'));
    for (const [content, message] of [
      ['{"model": ', 'tokenizer.json: not valid JSON'],
      [JSON.stringify({ model: { type: 'BPE', vocab: { a: 'one' } } }), 'model.vocab["a"] is "one"'],
      [JSON.stringify({ model: { type: 'BPE', vocab: { a: 0 }, merges: [['a']] } }), 'model.merges[0]'],
      [JSON.stringify({ model: { type: 'Unigram', vocab: [] } }), 'model.type is "Unigram"'],
      // Llama 2's kind: BPE over SentencePiece pieces, which llama.cpp reads as its "llama" type.
      [JSON.stringify({ model: { type: 'BPE', vocab: { a: 0 }, merges: [], byte_fallback: true } }), 'SentencePiece-style'],
      [JSON.stringify({ model: { type: 'BPE', vocab: { a: 0 }, merges: [] }, pre_tokenizer: { type: 'Metaspace', replacement: '\u2581' } }), 'SentencePiece-style'],
    ]) {
      const broken = path.join(dir, 'broken');
      fs.cpSync(BASE, broken, { recursive: true });
      fs.writeFileSync(path.join(broken, 'tokenizer.json'), content);
      const run = await flowrlInProcess(['export', broken, path.join(dir, 'broken.gguf'), '--format', 'gguf']);
      expect(run.status, content).to.equal(2);
      // Named as the user's file, not the export's staging copy.
      expect(run.stderr, content).to.include(`${path.join(broken, 'tokenizer.json')}: `);
      expect(run.stderr, content).to.include(message);
      fs.rmSync(broken, { recursive: true });
    }
    // Llama 3's rope scaling on a Qwen2: llama.cpp's qwen2 graph reads no rope_freqs tensor.
    const scaled = path.join(dir, 'scaled');
    const config = JSON.parse(fs.readFileSync(path.join(BASE, 'config.json'), 'utf8'));
    fs.writeFileSync(path.join(dir, 'scaled-config.json'), JSON.stringify({ ...config, model_type: 'qwen2', rope_scaling: { rope_type: 'llama3', factor: 8 } }));
    const init = await flowrlInProcess(['init-model', '--config', path.join(dir, 'scaled-config.json'), '--tokenizer', BASE, '--out', scaled, '--seed', '3']);
    expect(init.status, init.stderr).to.equal(0);
    const run = await flowrlInProcess(['export', scaled, path.join(dir, 'scaled.gguf'), '--format', 'gguf']);
    expect(run.status).to.equal(2);
    expect(run.stderr).to.include('rope_scaling llama3 on a Qwen2 model');
    expect(fs.readdirSync(dir).filter((f) => f.endsWith('.gguf') || f.startsWith('.flowrl-gguf-'))).to.deep.equal([]);
  });

  it("--compare-llama-cpp's install advice works where it is given: beside flowrl in a project that depends on it, apart and named by FLOWRL_NODE_LLAMA_CPP in a checkout (where npm 11.19.1 installs nothing: 'up to date')", async () => {
    expect(nodeLlamaCppInstallAdvice(path.join('/srv', 'app', 'node_modules', 'flowrl'))).to.equal(`install it beside flowrl: npm install node-llama-cpp@${NODE_LLAMA_CPP_VERSION}`);
    const apart = path.join(ROOT, '.llama-cpp');
    expect(nodeLlamaCppInstallAdvice(ROOT)).to.include(`npm install --prefix ${apart} node-llama-cpp@${NODE_LLAMA_CPP_VERSION} && export FLOWRL_NODE_LLAMA_CPP=${path.join(apart, 'node_modules', 'node-llama-cpp')}`);
    const saved = process.env.FLOWRL_NODE_LLAMA_CPP;
    process.env.FLOWRL_NODE_LLAMA_CPP = path.join(tempDir(), 'no-such-package');
    try {
      const missing = await importNodeLlamaCpp();
      expect(missing.module).to.equal(undefined);
      expect(missing.error).to.include(`FLOWRL_NODE_LLAMA_CPP=${process.env.FLOWRL_NODE_LLAMA_CPP} does not load`).and.include(nodeLlamaCppInstallAdvice());
    } finally {
      if (saved === undefined) delete process.env.FLOWRL_NODE_LLAMA_CPP;
      else process.env.FLOWRL_NODE_LLAMA_CPP = saved;
    }
  });

  describe(`decoded by llama.cpp (node-llama-cpp ${NODE_LLAMA_CPP_VERSION}, prebuilt CPU build)`, function () {
    let entry = '';

    before(function () {
      const found = nodeLlamaCppForTests();
      if (!found.dir) {
        console.warn(`    skipped, llama.cpp decoding: ${found.skip}`);
        return this.skip();
      }
      entry = path.join(found.dir, 'dist', 'index.js');
    });

    it('flowrl bench --compare-llama-cpp runs llama.cpp on the model bench\'s sampling job (the same shape, dtype and prompts) and reports both with their ratios; without node-llama-cpp it says how to install it', async () => {
      const args = ['bench', '--model-config', 'test/fixtures/tiny-qwen2/config.json', '--lora-rank', '4', ...(frozenBaseAvailable() ? ['--base-dtype', 'bfloat16'] : []), '--batch', '2', '--seq', '16', '--sample-prompts', '3', '--sample-tokens', '5', '--steps', '1', '--limits-mb', '8', '--matrix', '128', '--json', '--compare-llama-cpp'];
      // Its own temporary directory, so what the bench leaves there is what this run left.
      const tmp = tempDir();
      const run = await runBuiltFlowrl(args, 180_000, { FLOWRL_NODE_LLAMA_CPP: path.dirname(path.dirname(entry)), TMPDIR: tmp });
      expect(run.status, run.stderr).to.equal(0);
      const result = JSON.parse(run.stdout) as Record<string, unknown> & { llama_cpp: Record<string, unknown> };
      expect(result.llama_cpp_error).to.equal(undefined);
      expect(result.llama_cpp.node_llama_cpp).to.equal(NODE_LLAMA_CPP_VERSION);
      expect(result.llama_cpp.dtype).to.equal(result.base_dtype === 'heap' ? 'float32' : result.base_dtype);
      for (const key of ['prefill_s', 'decode_step_ms', 'sample_tokens_per_s', 'threads']) expect(result.llama_cpp[key], key).to.be.a('number').and.to.be.greaterThan(0);
      expect(result.prefill_ratio_vs_llama_cpp).to.be.closeTo((result.prefill_s as number) / (result.llama_cpp.prefill_s as number), 1e-3);
      expect(result.decode_ratio_vs_llama_cpp).to.be.closeTo((result.decode_step_ms as number) / (result.llama_cpp.decode_step_ms as number), 1e-3);
      // No temporary GGUF left behind.
      expect(fs.readdirSync(tmp).filter((f) => f.startsWith('flowrl-llama-cpp-bench-'))).to.deep.equal([]);

      const missing = await runBuiltFlowrl(args, 180_000, { FLOWRL_NODE_LLAMA_CPP: path.join(tempDir(), 'no-such-package') });
      expect(missing.status, missing.stderr).to.equal(0);
      const skipped = JSON.parse(missing.stdout) as Record<string, unknown>;
      expect(skipped.llama_cpp).to.equal(null);
      expect(skipped.llama_cpp_error).to.include(nodeLlamaCppInstallAdvice());
      // A shape llama.cpp cannot take as written is refused before either bench runs.
      const scaled = path.join(tempDir(), 'qwen2-llama3.json');
      fs.writeFileSync(scaled, JSON.stringify({ ...JSON.parse(fs.readFileSync(fixture('tiny-qwen2', 'config.json'), 'utf8')), rope_scaling: { rope_type: 'llama3', factor: 8 } }));
      const refused = await flowrlInProcess(['bench', '--model-config', scaled, '--compare-llama-cpp']);
      expect(refused.status).to.equal(2);
      expect(refused.stderr).to.include(`--compare-llama-cpp: ${scaled}: rope_scaling llama3 on a Qwen2 model`);
      const wrong = await runBuiltFlowrl(['bench', '--compare-llama-cpp', '--steps', '1']);
      expect(wrong.status).to.equal(2);
      expect(wrong.stderr).to.include('--compare-llama-cpp applies to the model bench');
    });

    it('greedy tokens of the exported float32 and bfloat16 files equal flowrl\'s for the same weights, prompt for prompt (Llama, and Qwen2 with its biases and rotary order)', async () => {
      const dir = tempDir();
      // A Qwen2 of the same sizes with random weights (q/k/v biases; llama.cpp's NEOX rotary, no permutation).
      const qwenConfig = path.join(dir, 'qwen2-config.json');
      const base = JSON.parse(fs.readFileSync(path.join(BASE, 'config.json'), 'utf8'));
      fs.writeFileSync(qwenConfig, JSON.stringify({ ...base, model_type: 'qwen2', architectures: ['Qwen2ForCausalLM'] }));
      const qwen = path.join(dir, 'qwen2');
      const init = await runBuiltFlowrl(['init-model', '--config', qwenConfig, '--tokenizer', BASE, '--out', qwen, '--seed', '5']);
      expect(init.status, init.stderr).to.equal(0);
      const tokenizer = TextTokenizer.load(BASE);
      const rows = fs.readFileSync(fixture('countdown', 'data', 'val.jsonl'), 'utf8').trim().split('\n').slice(0, 8);
      const prompts = rows.map((line) => [1, ...tokenizer.encode(JSON.parse(line).prompt[0].content)]);
      const config = JSON.parse(fs.readFileSync(path.join(BASE, 'config.json'), 'utf8'));
      const { getLlama } = (await import(entry)) as { getLlama(options: object): Promise<Llama> };
      const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' });
      // The same Llama with rotary scaling: linear (two keys) and Llama 3's (a rope_freqs tensor);
      // an original context of 16 puts every frequency of these 16-wide heads in the scaled or smoothed range.
      const scaledCopy = (name: string, ropeScaling: object) => {
        const out = path.join(dir, name);
        fs.cpSync(BASE, out, { recursive: true });
        fs.writeFileSync(path.join(out, 'config.json'), JSON.stringify({ ...base, rope_scaling: ropeScaling }));
        return out;
      };
      const linear = scaledCopy('llama-linear', { rope_type: 'linear', factor: 4 });
      const llama3 = scaledCopy('llama-llama3', { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 16 });
      for (const [arch, source, dtype] of [['llama', BASE, 'float32'], ['llama', BASE, 'bfloat16'], ['qwen2', qwen, 'float32'], ['llama', linear, 'float32'], ['llama', llama3, 'float32']]) {
        // flowrl's side holds the same weights: bfloat16-rounded matrices for the bfloat16 file.
        const ours = path.join(dir, `ours-${path.basename(source)}-${dtype}`);
        fs.cpSync(source, ours, { recursive: true });
        if (dtype === 'bfloat16') {
          const tensors = readTensors(path.join(source, 'model.safetensors'));
          for (const t of tensors.values()) {
            if (t.shape.length !== 2) continue;
            const half = new Uint16Array(t.data.length);
            toBfloat16(t.data, half);
            t.data.set(new Float32Array(Uint32Array.from(half, (h) => h << 16).buffer));
          }
          writeSafetensors(path.join(ours, 'model.safetensors'), tensors);
        }
        const model = loadModel(ours);
        const expected = (await generate(model, prompts, { maxNewTokens: 16, greedy: true, stopTokenIds: [config.eos_token_id] })).tokens;
        model.dispose();

        const file = path.join(dir, `${path.basename(source)}-${dtype}.gguf`);
        expect(writeGguf(source, file, dtype as GgufDtype).arch).to.equal(arch);
        const gguf = await llama.loadModel({ modelPath: file });
        // One thread: llama.cpp's threads spin at their barriers, and beside a busy core a tiny model's
        // few tokens then took seconds (measured: 4.2 s for 3 tokens on 2 threads, instant on 1).
        const context = await gguf.createContext({ contextSize: 64, threads: 1 });
        try {
          for (let i = 0; i < prompts.length; i++) {
            const sequence = context.getSequence();
            const got: number[] = [];
            // llama.cpp stops before an end-of-generation token; flowrl keeps the stop token.
            for await (const token of sequence.evaluate(prompts[i], { temperature: 0 })) {
              got.push(token);
              if (got.length === 16) break;
            }
            const want = expected[i].filter((t, j) => !(t === config.eos_token_id && j === expected[i].length - 1));
            expect(got, `${path.basename(source)} ${dtype} prompt ${i}`).to.deep.equal(want);
            sequence.dispose();
          }
        } finally {
          await context.dispose();
          await gguf.dispose();
        }
      }
      await llama.dispose();
    });
  });
});
