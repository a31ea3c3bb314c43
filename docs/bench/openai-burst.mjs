// A burst of N completions at once through the official openai client, every setting at its default
// (docs/benchmarks.md, 2026-12-01). Copy beside node_modules/openai (build/default/tests/node) and run
// `node openai-burst.mjs PORT N` against `mosaic-cli serve --variants bible fortunes …`.
import OpenAI from 'openai';
const port = process.argv[2]; const N = +process.argv[3];
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'none' }); // all defaults
const t0 = Date.now();
const res = await Promise.allSettled(Array.from({ length: N }, (_, i) => client.completions.create({ model: ['bible', 'fortunes'][i % 2], prompt: 'And God said', max_tokens: 100, temperature: 0 })));
const why = {}; for (const r of res) if (r.status === 'rejected') why[r.reason?.constructor?.name] = (why[r.reason?.constructor?.name] ?? 0) + 1;
console.log(`N=${N}: ${res.filter(r => r.status === 'fulfilled').length} served, rejected ${JSON.stringify(why)}, all settled in ${Date.now() - t0} ms`);
