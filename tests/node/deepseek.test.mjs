// The DeepSeek fixture families served from text as their releases are: `mosaic-cli serve` over
// tests/data/hf-tiny/deepseek_v2 and _v3 (base, a fine-tune and esft-released, an ESFT adapter as
// DeepSeek releases it: no base_model and no tokenizer of its own), each with DeepSeek's
// pre-tokenizer chain and chat template (make_tokenizers.py), met through the official openai
// client; the prompts' token counts against HF tokenizers' own encoding. Run by CTest
// (tst_openai_client) with MOSAIC_CLI, MOSAIC_SOURCE_DIR and MOSAIC_WORK_DIR.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import tokenizers from 'tokenizers';

const cli = process.env.MOSAIC_CLI;
const fixtures = join(process.env.MOSAIC_SOURCE_DIR, 'tests', 'data', 'hf-tiny');
const work = mkdtempSync(join(process.env.MOSAIC_WORK_DIR ?? '/tmp', 'deepseek-'));
const env = { ...process.env, MOSAIC_CACHE_DIR: join(work, 'cache') };
const BOS = '<｜begin▁of▁sentence｜>';

async function serve(variants) {
  const server = spawn(cli, ['serve', '--variants', ...variants, '--capacity', '8', '--port', '0'], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((resolve) => server.on('exit', (code) => resolve(code)));
  const baseURL = await new Promise((resolve, reject) => {
    let out = '';
    server.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/serving on (http:\/\/\S+\/v1)/);
      if (m) resolve(m[1]);
    });
    server.on('exit', (code) => reject(new Error(`mosaic-cli serve exited (${code}) before serving: ${out}`)));
  });
  return { client: new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0, timeout: 60_000 }), stop: () => {
    server.kill('SIGTERM');
    return exited;
  } };
}

async function streamed(stream, pick) {
  let text = '';
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    text += chunk.choices[0] ? pick(chunk.choices[0]) ?? '' : '';
  }
  return { text, usage };
}

for (const family of ['deepseek_v2', 'deepseek_v3']) {
  test(`${family}: a base, a fine-tune and a released ESFT adapter answer from text, counted as HF tokenizes`, async () => {
    const dir = join(fixtures, family);
    // A released adapter's base is the full checkpoint listed before it.
    const { client, stop } = await serve([join(dir, 'base'), join(dir, 'esft-released'), join(dir, 'ft1')]);
    try {
      const hf = tokenizers.Tokenizer.fromFile(join(dir, 'base', 'tokenizer.json'));
      const ids = async (text, specials) => (await hf.encode(text, null, { addSpecialTokens: specials })).getIds();
      const ids_of = [];
      for await (const m of client.models.list()) ids_of.push(m.id);
      assert.deepEqual(ids_of.sort(), ['base', 'esft-released', 'ft1']);
      const content = 'In the beginning, 2026 words — café 你好';
      for (const model of ['base', 'ft1', 'esft-released']) {
        const ask = { model, messages: [{ role: 'user', content }], max_tokens: 6, temperature: 0 };
        const whole = await client.chat.completions.create(ask);
        // DeepSeek-V2-Chat's template: BOS, "User: …\n\n", "Assistant:"; HF encodes it to these ids.
        const rendered = `${BOS}User: ${content}\n\nAssistant:`;
        assert.equal(whole.usage.prompt_tokens, (await ids(rendered, false)).length, `${model}: chat prompt tokens`);
        assert.ok(whole.usage.completion_tokens > 0 && whole.usage.completion_tokens <= 6);
        const s = await streamed(await client.chat.completions.create({ ...ask, stream: true, stream_options: { include_usage: true } }), (c) => c.delta?.content);
        assert.equal(s.text, whole.choices[0].message.content, `${model}: streamed and whole alike`);
        assert.deepEqual(s.usage, whole.usage);
        const completion = await client.completions.create({ model, prompt: content, max_tokens: 4, temperature: 0 });
        assert.equal(completion.usage.prompt_tokens, (await ids(content, true)).length, `${model}: completion prompt tokens (with BOS)`);
      }
    } finally {
      await stop();
    }
  });
}
