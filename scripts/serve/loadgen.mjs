// Load generator for `rewind serve` on the official openai client: replays a workload (JSON
// lines {id, prompt, max_tokens, references?}) at the chosen concurrencies, with and without
// Predicted Outputs, streaming, and prints tokens/s, time to first token and time per output
// token (p50/p99) and the accepted prediction tokens. For the edit workload the prediction is the
// code the prompt asks to revise (the text before "# A revised copy of the code above:").
// Usage: node loadgen.mjs --url http://127.0.0.1:8080 --workload ../shared/workloads/edit.jsonl
//          [--concurrency 1,4] [--prediction both|on|off] [--items N] [--max-tokens N]
//          [--api-key KEY] [--label TEXT] [--json FILE] [--predict-with workload|answers]
//          [--schema on|off] [--spec SOURCE] [--match-lengths FILE]
// --schema on: each item's json_schema constrains its answer (llama.cpp's json_schema field, the
// completions form of response_format json_schema). --spec: every request's speculation.source
// (none: plain decoding); default: the server's.
// --match-lengths FILE: each item's max_tokens is its completion_tokens in FILE (a previous run's
// --json output, first row): "the same requests" of the same lengths, so that the ratio of two runs
// measures the cost per token, not the answers' lengths. An answer that stops before its length (an
// end-of-generation token) is counted: `short` items, whose missing tokens are printed, and the
// time per output token (decode only) is comparable either way.
// --predict-with answers: each request's prediction is its own answer from the run without one
// (needs --prediction both): the best case, a client that already holds the text it asks for.
import { readFileSync, writeFileSync } from 'node:fs';
import { loadOpenAI, parseArgs, percentile } from './lib.mjs';

const OpenAI = await loadOpenAI();
const a = parseArgs(process.argv.slice(2), { url: 'http://127.0.0.1:8080', concurrency: '1', prediction: 'both',
  items: '0', 'max-tokens': '0', 'api-key': 'none', label: '', 'predict-with': 'workload', schema: 'off', spec: '', 'match-lengths': '' });
const answers = new Map(); // id -> the answer without a prediction (--predict-with answers)
if (!a.workload) { console.error('loadgen: --workload FILE is required'); process.exit(2); }
let items = readFileSync(a.workload, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
if (Number(a.items) > 0) items = items.slice(0, Number(a.items));
const client = new OpenAI({ baseURL: `${a.url}/v1`, apiKey: a['api-key'], maxRetries: 0, timeout: 600000 });
// id -> max_tokens from --match-lengths (a previous run's per-item completion tokens).
const lengths = new Map();
if (a['match-lengths']) {
  const row = JSON.parse(readFileSync(a['match-lengths'], 'utf8')).find((r) => r.completion_tokens);
  if (!row) { console.error(`loadgen: ${a['match-lengths']} has no per-item completion_tokens`); process.exit(2); }
  for (const [id, n] of Object.entries(row.completion_tokens)) lengths.set(id, Math.max(1, n));
  const missing = items.filter((it) => !lengths.has(it.id)).map((it) => it.id);
  if (missing.length) { console.error(`loadgen: ${a['match-lengths']} lacks ${missing.join(', ')}`); process.exit(2); }
}
const MARK = '# A revised copy of the code above:\n';

// What the client expects most of the answer to repeat.
function predictionOf(item) {
  const i = item.prompt.lastIndexOf(MARK);
  if (i >= 0) {
    const code = item.prompt.slice(0, i).replace(/\s+$/, '\n');
    const started = item.prompt.slice(i + MARK.length); // the copy's first line, already in the prompt
    return code.startsWith(started) ? code.slice(started.length) : code;
  }
  return item.references && item.references.length ? item.references.join('\n') : null;
}

async function one(item, predicted) {
  const body = { model: 'rewind', prompt: item.prompt, temperature: 0, stream: true, stream_options: { include_usage: true },
    max_tokens: lengths.get(item.id) ?? (Number(a['max-tokens']) || item.max_tokens || 128) };
  const pred = !predicted ? null : a['predict-with'] === 'answers' ? answers.get(item.id) : predictionOf(item);
  if (pred) body.prediction = { type: 'content', content: pred };
  if (a.schema === 'on' && item.json_schema) body.json_schema = item.json_schema;
  if (a.spec) body.speculation = { source: a.spec };
  const t0 = performance.now();
  let first = null, usage = null, text = '', finish = null;
  for await (const c of await client.completions.create(body)) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.text && first === null) first = performance.now();
      text += ch.text ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  const end = performance.now();
  const n = usage ? usage.completion_tokens : 0;
  return { id: item.id, text, tokens: n, wanted: body.max_tokens, finish, ttft: (first ?? end) - t0, tpot: n > 1 && first !== null ? (end - first) / (n - 1) : null,
    accepted: usage?.completion_tokens_details?.accepted_prediction_tokens ?? 0,
    rejected: usage?.completion_tokens_details?.rejected_prediction_tokens ?? 0 };
}

async function run(concurrency, predicted) {
  let next = 0;
  const out = [];
  const t0 = performance.now();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < items.length) { const it = items[next++]; out.push(await one(it, predicted)); }
  }));
  const wall = (performance.now() - t0) / 1000;
  const tokens = out.reduce((s, r) => s + r.tokens, 0);
  const tpots = out.map((r) => r.tpot).filter((x) => x !== null);
  return { label: a.label, concurrency, prediction: predicted, requests: out.length, tokens, seconds: wall,
    tokens_per_second: tokens / wall, ttft_p50_ms: percentile(out.map((r) => r.ttft), 50), ttft_p99_ms: percentile(out.map((r) => r.ttft), 99),
    tpot_p50_ms: percentile(tpots, 50), tpot_p99_ms: percentile(tpots, 99),
    accepted_prediction_tokens: out.reduce((s, r) => s + r.accepted, 0), rejected_prediction_tokens: out.reduce((s, r) => s + r.rejected, 0),
    // Items that ended before their max_tokens (stop), and how many tokens they left ungenerated.
    stopped_early: out.filter((r) => r.tokens < r.wanted).length, tokens_short: out.reduce((s, r) => s + Math.max(0, r.wanted - r.tokens), 0),
    completion_tokens: Object.fromEntries(out.map((r) => [r.id, r.tokens])),
    texts: Object.fromEntries(out.map((r) => [r.id, r.text])) };
}

const modes = a.prediction === 'both' ? [false, true] : [a.prediction === 'on'];
const rows = [];
console.log('label        conc  pred  reqs  tokens   tok/s   ttft p50/p99 ms   tpot p50/p99 ms  pred acc/rej  early/short');
for (const c of String(a.concurrency).split(',').map(Number)) {
  for (const p of modes) {
    const r = await run(c, p);
    if (!p) for (const [id, t] of Object.entries(r.texts)) answers.set(id, t);
    rows.push(r);
    console.log(`${(a.label || '-').padEnd(12)} ${String(c).padStart(4)}  ${p ? 'yes' : 'no '}  ${String(r.requests).padStart(4)}  ` +
      `${String(r.tokens).padStart(6)}  ${r.tokens_per_second.toFixed(1).padStart(6)}   ${r.ttft_p50_ms.toFixed(1)}/${r.ttft_p99_ms.toFixed(1)}` +
      `   ${r.tpot_p50_ms.toFixed(2)}/${r.tpot_p99_ms.toFixed(2)}   ${r.accepted_prediction_tokens}/${r.rejected_prediction_tokens}` +
      `          ${r.stopped_early}/${r.tokens_short}`);
  }
}
// With and without a prediction the answers must be the same text (greedy).
for (let i = 0; i + 1 < rows.length; i += modes.length) {
  if (modes.length === 2) for (const id of Object.keys(rows[i].texts))
    if (rows[i].texts[id] !== rows[i + 1].texts[id]) { console.error(`loadgen: ${id} differs with a prediction`); process.exitCode = 1; }
}
if (a.json) writeFileSync(a.json, JSON.stringify(rows.map(({ texts, ...r }) => r), null, 2));
