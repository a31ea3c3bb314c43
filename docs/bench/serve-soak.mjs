// `serve` under a steady mixed load for a while, watched from outside: the server's resident memory,
// open files and threads every 10 s, and every request's outcome (docs/benchmarks.md, 2026-12-01).
// Copy beside node_modules/openai (build/default/tests/node) and run
//   node serve-soak.mjs PORT PID MINUTES CLIENTS [KEY]
// against `mosaic-cli serve` over the sample family (PID is the server's process). Each client loops:
// streamed chat (40 %), whole completion (25 %), a stream abandoned after its second chunk (10 %),
// a bad parameter that must be a 400 (10 %), a body over the limit that must be a 413 (5 %),
// GET /v1/models and /metrics on fresh connections (10 %). Anything else counts as unexpected.
import OpenAI from 'openai';
import fs from 'node:fs';

const [port, pid, minutes, clients, key = 'none'] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 120_000 });
const models = ['bible', 'fortunes', 'jargon', 'c-headers', 'esft-bible'];
const end = Date.now() + minutes * 60_000;
let rng = 12345;
const rand = () => ((rng = (rng * 1103515245 + 12345) % 2147483648) / 2147483648);
const pick = (a) => a[Math.floor(rand() * a.length)];

const window = { done: 0, latencies: [], counts: {} };
const total = { done: 0, counts: {}, unexpected: [] };
const count = (what) => {
  window.counts[what] = (window.counts[what] ?? 0) + 1;
  total.counts[what] = (total.counts[what] ?? 0) + 1;
};
const unexpected = (what, e) => {
  count('unexpected');
  if (total.unexpected.length < 20) total.unexpected.push(`${what}: ${e?.constructor?.name} ${e?.status ?? ''} ${String(e?.message).slice(0, 160)}`);
};

async function once() {
  const r = rand();
  const model = pick(models);
  const t0 = performance.now();
  if (r < 0.40) {
    const s = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 8 + Math.floor(rand() * 56), stream: true });
    let chunks = 0;
    for await (const c of s) chunks += c.choices.length;
    if (chunks === 0) throw new Error('an empty stream');
    count('stream');
  } else if (r < 0.65) {
    const c = await client.completions.create({ model, prompt: 'And God said', max_tokens: 8 + Math.floor(rand() * 56) });
    if (!c.choices[0].finish_reason) throw new Error('no finish_reason');
    count('whole');
  } else if (r < 0.75) {
    const ac = new AbortController();
    const s = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Go on' }], max_tokens: 64, stream: true }, { signal: ac.signal });
    let chunks = 0;
    try {
      for await (const c of s) if (++chunks === 2) ac.abort();
    } catch (e) {
      if (e.name !== 'AbortError' && !(e instanceof OpenAI.APIUserAbortError)) throw e;
    }
    count('abandoned');
  } else if (r < 0.85) {
    try {
      await client.completions.create({ model, prompt: 'x', temperature: 7 });
      throw new Error('a temperature of 7 was served');
    } catch (e) {
      if (!(e instanceof OpenAI.BadRequestError)) throw e;
    }
    count('400');
  } else if (r < 0.90) {
    try {
      await client.completions.create({ model, prompt: 'a'.repeat(2 << 20) });
      throw new Error('a 2 MiB body was served');
    } catch (e) {
      if (e.status !== 413) throw e;
    }
    count('413');
  } else {
    const path = rand() < 0.5 ? '/v1/models' : '/metrics';
    const res = await fetch(base + path, { headers: { Authorization: `Bearer ${key}`, Connection: 'close' } });
    await res.text();
    if (res.status !== 200) throw new Error(`${path}: ${res.status}`);
    count('light');
  }
  window.latencies.push(performance.now() - t0);
  window.done++;
  total.done++;
}

async function loop() {
  while (Date.now() < end) {
    try {
      await once();
    } catch (e) {
      unexpected('request', e);
    }
  }
}

function sample() {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name) => +(status.match(new RegExp(`^${name}:\\s+(\\d+)`, 'm'))?.[1] ?? NaN);
  return { rss_mib: field('VmRSS') / 1024, hwm_mib: field('VmHWM') / 1024, threads: field('Threads'), fds: fs.readdirSync(`/proc/${pid}/fd`).length };
}

const t0 = Date.now();
const rows = [];
const report = () => {
  const l = window.latencies.sort((a, b) => a - b);
  const q = (p) => (l.length ? l[Math.min(l.length - 1, Math.floor(p * l.length))].toFixed(0) : '-');
  const row = { min: ((Date.now() - t0) / 60_000).toFixed(1), ...sample(), done: window.done, p50_ms: q(0.5), p99_ms: q(0.99), ...window.counts };
  rows.push(row);
  console.log(JSON.stringify(row));
  window.done = 0;
  window.latencies = [];
  window.counts = {};
};
console.log(JSON.stringify({ start: sample() }));
const timer = setInterval(report, 10_000);
await Promise.all(Array.from({ length: +clients }, loop));
clearInterval(timer);
report();
await new Promise((r) => setTimeout(r, 8_000)); // idle: connections close (idle timeout 5 s)
console.log(JSON.stringify({ idle: sample(), total }));
