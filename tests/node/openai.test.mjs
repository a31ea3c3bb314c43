// `mosaic-cli serve` as users' programs meet it: the official openai client (pinned in
// package-lock.json) against a real server on 127.0.0.1, serving the sample family's variants and an
// ESFT adapter. Run by CTest (tst_openai_client) with MOSAIC_CLI, MOSAIC_SOURCE_DIR and MOSAIC_WORK_DIR.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';

const cli = process.env.MOSAIC_CLI;
const family = join(process.env.MOSAIC_SOURCE_DIR, 'resources', 'sample-family');
const work = mkdtempSync(join(process.env.MOSAIC_WORK_DIR ?? '/tmp', 'openai-'));
const db = join(work, 'served.sqlite');
const variants = ['base', 'bible', 'fortunes', 'esft-bible'].map((v) => join(family, v));
const serving = ['--variants', ...variants, '--capacity', '16'];
const env = { ...process.env, MOSAIC_CACHE_DIR: join(work, 'cache') };
const key = 'sk-mosaic-test';

let server;
let exited;
let client;

before(async () => {
  server = spawn(cli, ['serve', ...serving, '--port', '0', '--api-key', key, '--db', db, '--allow-model-changes'], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  exited = new Promise((resolve) => server.on('exit', (code, signal) => resolve({ code, signal })));
  const baseURL = await new Promise((resolve, reject) => {
    let out = '';
    server.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/serving on (http:\/\/\S+\/v1)/);
      if (m) resolve(m[1]);
    });
    server.on('exit', (code) => reject(new Error(`mosaic-cli serve exited (${code}) before serving: ${out}`)));
  });
  client = new OpenAI({ baseURL, apiKey: key, maxRetries: 0, timeout: 60_000 });
});

after(async () => {
  server.kill('SIGTERM');
  const { code } = await exited;
  assert.equal(code, 0, 'SIGTERM drains and exits 0');
  // What was served is in the record, intact.
  assert.equal(execFileSync('sqlite3', [db, 'PRAGMA integrity_check']).toString().trim(), 'ok');
  assert.equal(execFileSync('sqlite3', [db, "SELECT status FROM runs WHERE strategy = 'serve'"]).toString().trim(), 'finished');
});

const prompt = 'In the beginning';
const complete = (model, extra = {}) => client.completions.create({ model, prompt, max_tokens: 12, temperature: 0, ...extra });

async function streamedText(stream, pick) {
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;  // the usage chunk
    text += pick(choice) ?? '';
    finish = choice.finish_reason ?? finish;
  }
  return { text, finish };
}

test('lists every variant and the adapter, with its base', async () => {
  const ids = [];
  const parents = {};
  for await (const m of client.models.list()) {
    ids.push(m.id);
    parents[m.id] = m.parent;
    // When its folder was written: a Unix time in seconds, not 0 and not in the future.
    assert.ok(m.created > 1.5e9 && m.created <= Date.now() / 1000 + 1, `${m.id} created ${m.created}`);
  }
  assert.deepEqual(ids.sort(), ['base', 'bible', 'esft-bible', 'fortunes']);
  assert.equal(parents['esft-bible'], 'base');
  assert.equal(parents.bible, null);
});

for (const model of ['bible', 'fortunes', 'esft-bible']) {
  test(`completes on ${model}, whole and streamed alike`, async () => {
    const whole = await complete(model);
    assert.equal(whole.object, 'text_completion');
    assert.equal(whole.model, model);
    assert.ok(whole.choices[0].text.length > 0);
    assert.equal(whole.usage.prompt_tokens > 0, true);
    assert.equal(whole.usage.completion_tokens <= 12, true);
    const streamed = await streamedText(await complete(model, { stream: true }), (c) => c.text);
    assert.equal(streamed.text, whole.choices[0].text);
    assert.equal(streamed.finish, whole.choices[0].finish_reason);
  });

  test(`chats with ${model}, whole and streamed alike`, async () => {
    const messages = [{ role: 'user', content: 'And God said' }];
    const whole = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0 });
    assert.equal(whole.object, 'chat.completion');
    assert.equal(whole.choices[0].message.role, 'assistant');
    assert.ok(whole.choices[0].message.content.length > 0);
    const stream = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true } });
    let usage = null;
    let text = '';
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      text += chunk.choices[0]?.delta?.content ?? '';
    }
    assert.equal(text, whole.choices[0].message.content);
    assert.deepEqual(usage, whole.usage);
  });
}

test('greedy text equals mosaic-cli generate on the same layout', async () => {
  for (const model of ['bible', 'esft-bible']) {
    const served = await complete(model, { max_tokens: 16 });
    const printed = execFileSync(cli, ['generate', ...serving, '--target', model, '--prompt', prompt, '--max-new', '16', '--stop-at-eos'], {
      env,
      stdio: ['ignore', 'pipe', 'ignore'],
    }).toString();
    assert.equal(prompt + served.choices[0].text + '\n', printed, model);
  }
});

test('a stop string ends the text before it', async () => {
  const whole = (await complete('bible')).choices[0].text;
  const stop = whole.slice(4, 7);
  const stopped = await complete('bible', { stop: [stop] });
  assert.equal(stopped.choices[0].text, whole.slice(0, whole.indexOf(stop)));
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  const streamed = await streamedText(await complete('bible', { stop, stream: true }), (c) => c.text);
  assert.equal(streamed.text, stopped.choices[0].text);
  assert.equal(streamed.finish, 'stop');
});

test('errors surface as the client library\'s typed exceptions', async () => {
  await assert.rejects(complete('no-such-model'), (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && /no-such-model/.test(e.message));
  await assert.rejects(complete('bible', { temperature: 5 }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
  await assert.rejects(complete('bible', { max_tokens: 1000000 }), (e) => e instanceof OpenAI.BadRequestError && /context/.test(e.message));
  await assert.rejects(complete('bible', { n: 2 }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
  // A body ten times the limit: the 413 reaches the client (a server that closed while the body was
  // still coming reset the connection, and the client saw only a connection error).
  await assert.rejects(complete('bible', { prompt: 'a'.repeat(10 << 20) }), (e) => e instanceof OpenAI.APIError && e.status === 413);
  const stranger = new OpenAI({ baseURL: client.baseURL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(stranger.completions.create({ model: 'bible', prompt }), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  await assert.rejects(
    client.chat.completions.create({ model: 'bible', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }),
    (e) => e instanceof OpenAI.BadRequestError && /only text/.test(e.message),
  );
});

// A program's burst through the client as it comes (retries on): past --max-requests the server
// answers 429 with Retry-After, which the client waits out, so every request settles, served. (A
// burst past the per-address connection cap had left requests hanging: closed without an answer.)
test('a burst of 100 requests at once all settle, served', async () => {
  const patient = new OpenAI({ baseURL: client.baseURL, apiKey: key, maxRetries: 6, timeout: 60_000 });
  const started = Date.now();
  const all = await Promise.allSettled(
    Array.from({ length: 100 }, (_, i) => patient.completions.create({ model: ['bible', 'fortunes'][i % 2], prompt, max_tokens: 4, temperature: 0 })),
  );
  const failed = all.filter((r) => r.status === 'rejected').map((r) => `${r.reason?.status ?? ''} ${r.reason?.message}`);
  assert.deepEqual(failed, [], 'every request of the burst is served');
  assert.ok(Date.now() - started < 50_000, `the burst took ${Date.now() - started} ms`);
});

test('sampling without a seed draws anew; a seed repeats', async () => {
  const draw = (extra) => complete('bible', { temperature: 1, max_tokens: 24, ...extra }).then((r) => r.choices[0].text);
  const unseeded = new Set(await Promise.all([draw({}), draw({}), draw({})]));
  assert.ok(unseeded.size > 1, 'three unseeded draws at temperature 1 were all the same');
  assert.equal(await draw({ seed: 5 }), await draw({ seed: 5 }));
  await assert.rejects(complete('bible', { logprobs: 1 }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'logprobs');
});

// Model management (--allow-model-changes) is not in the OpenAI API: plain HTTP adds and removes,
// and the client sees the change.
test('a model added while another streams is served, then 404 once removed', async () => {
  const headers = { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' };
  const until = async (id, want) => {
    for (let i = 0; i < 600; i++) {
      const m = await client.models.retrieve(id).catch((e) => ({ status: `http ${e.status}` }));
      if (m.status === want || m.status === 'failed') return m.status;
      await new Promise((r) => setTimeout(r, 50));
    }
    return 'timed out';
  };
  const alone = await streamedText(await complete('bible', { max_tokens: 200, stream: true }), (c) => c.text);
  const during = streamedText(await complete('bible', { max_tokens: 200, stream: true }), (c) => c.text);
  const body = JSON.stringify({ id: 'jargon', path: join(family, 'jargon') });
  assert.equal((await fetch(`${client.baseURL}/models`, { method: 'POST', body })).status, 401, 'behind the API key');
  const added = await fetch(`${client.baseURL}/models`, { method: 'POST', headers, body });
  assert.equal(added.status, 202);
  assert.equal(await until('jargon', 'ready'), 'ready');
  const used = await complete('jargon');
  assert.equal(used.model, 'jargon');
  assert.ok(used.choices[0].text.length > 0);
  const removed = await fetch(`${client.baseURL}/models/jargon`, { method: 'DELETE', headers });
  assert.equal(removed.status, 202);
  assert.equal(await until('jargon', 'removed'), 'removed');
  await assert.rejects(complete('jargon'), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  // It ran across both changes to its end. Its text may differ from `alone`'s: under consolidated
  // hits a re-plan changes which copies serve bible (tst_serve_faults checks exact tokens under strict hits).
  const across = await during;
  assert.equal(across.finish, alone.finish);
  assert.ok(across.text.length > 0);
});
