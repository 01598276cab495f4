// End-to-end test of `rewind serve` through the official openai client: chat and text
// completions (plain and streamed), stop sequences, seeds, `n` choices, the sampling fields (repeat_penalty,
// repeat_last_n, top_k, min_p) with speculation on and off, Predicted Outputs, the prefix cache
// on a second chat turn, and the 401/400/413 errors; every answer compared with `rewind generate`.
// Usage: node e2e_test.mjs --rewind BUILD/bin/rewind --model MODEL.gguf   (exit 77: skipped)
import assert from 'node:assert/strict';
import { loadOpenAI, parseArgs, startServer, generate, cutAtStop, generateFlags, rewindPath } from './lib.mjs';

const OpenAI = await loadOpenAI();
const args = parseArgs(process.argv.slice(2), { rewind: rewindPath(), model: '' });
const KEY = 'e2e-secret-key';
const server = await startServer(args.rewind, ['-m', args.model, '--api-key', KEY, '--chat-template', 'chatml',
  '--max-body', '65536', '--parallel', '4', '-t', '1']);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
const gen = (flags) => generate(args.rewind, args.model, flags);
const esc = (s) => s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/\t/g, '\\t');
let failures = 0;
async function check(name, fn) {
  const t0 = Date.now();
  try { await fn(); console.log(`ok   ${name} (${Date.now() - t0} ms)`); }
  catch (e) { ++failures; console.log(`FAIL ${name}: ${e.stack ?? e}`); }
}
async function streamText(stream) {
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const c of stream) {
    ++chunks;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text += ch.delta ? (ch.delta.content ?? '') : (ch.text ?? '');
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { text, finish, usage, chunks };
}

const CODE = 'def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):';

try {
  await check('models.list names the model', async () => {
    const models = await client.models.list();
    assert.equal(models.data.length, 1);
    assert.match(models.data[0].id, /\.gguf$/);
  });

  await check('completions, greedy, equal to rewind generate', async () => {
    const req = { model: 'm', prompt: CODE, max_tokens: 40, temperature: 0 };
    const r = await client.completions.create(req);
    const want = gen(['-p', CODE, ...generateFlags(req)]);
    assert.equal(r.choices[0].text, want.text);
    assert.equal(r.usage.completion_tokens, want.ids.length);
    assert.equal(r.choices[0].finish_reason, want.stop === 'max_tokens' ? 'length' : 'stop');
  });

  await check('completions streamed, seeded sampling, equal to rewind generate', async () => {
    const req = { model: 'm', prompt: CODE, max_tokens: 40, temperature: 0.9, top_p: 0.95, seed: 1234 };
    const s = await streamText(await client.completions.create({ ...req, stream: true }));
    const want = gen(['-p', CODE, ...generateFlags(req)]);
    assert.equal(s.text, want.text);
    assert.ok(s.chunks > 2, 'streamed in several chunks');
  });

  await check('chat, greedy and seeded, plain and streamed, equal to rewind generate --chat', async () => {
    for (const extra of [{ temperature: 0 }, { temperature: 0.8, seed: 7 }]) {
      const req = { model: 'm', messages: [{ role: 'system', content: 'You write Python.' }, { role: 'user', content: 'def fib(n):' }],
        max_tokens: 24, ...extra };
      const want = gen(['--chat', '--chat-template', 'chatml', '--system', 'You write Python.', '-p', 'def fib(n):', ...generateFlags(req)]);
      const r = await client.chat.completions.create(req);
      assert.equal(r.choices[0].message.content, want.text);
      assert.equal(r.choices[0].message.role, 'assistant');
      const s = await streamText(await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } }));
      assert.equal(s.text, want.text);
      assert.ok(s.usage && s.usage.completion_tokens === want.ids.length, 'usage chunk');
    }
  });

  await check('n choices: choice i equals rewind generate with seed + i, plain and streamed', async () => {
    const req = { model: 'm', messages: [{ role: 'user', content: CODE }], max_tokens: 24, temperature: 0.9, seed: 40, n: 3 };
    const r = await client.chat.completions.create(req);
    assert.equal(r.choices.length, 3);
    const texts = [];
    for (let i = 0; i < 3; ++i) {
      const want = gen(['--chat', '--chat-template', 'chatml', '-p', CODE, ...generateFlags({ ...req, seed: 40 + i })]);
      const one = await client.chat.completions.create({ ...req, n: 1, seed: 40 + i });
      assert.equal(r.choices[i].index, i);
      assert.equal(r.choices[i].message.content, want.text, `choice ${i}`);
      assert.equal(one.choices[0].message.content, want.text);
      texts.push(want.text);
    }
    const streamed = ['', '', ''];
    for await (const c of await client.chat.completions.create({ ...req, stream: true })) {
      for (const ch of c.choices) streamed[ch.index] += ch.delta.content ?? '';
    }
    assert.deepEqual(streamed, texts);
    await assert.rejects(client.chat.completions.create({ ...req, n: 17 }), (e) => e.status === 400 && e.param === 'n');
  });

  await check('repeat_penalty, repeat_last_n, top_k, min_p: equal to rewind generate, speculation on and off', async () => {
    const sampling = [{ temperature: 0, repeat_penalty: 1.3, repeat_last_n: 32 },
      { temperature: 0.8, seed: 5, top_k: 20, min_p: 0.05, repeat_penalty: 1.15, repeat_last_n: 64 }];
    for (const extra of sampling) {
      const req = { model: 'm', messages: [{ role: 'user', content: CODE }], max_tokens: 40, ...extra };
      const want = gen(['--chat', '--chat-template', 'chatml', '-p', CODE, ...generateFlags(req)]);
      for (const speculation of [{ source: 'none' }, { source: 'ngram' }, { source: 'suffix' }]) {
        const r = await client.chat.completions.create({ ...req, speculation });
        assert.equal(r.choices[0].message.content, want.text, JSON.stringify({ extra, speculation }));
      }
      const pred = await client.chat.completions.create({ ...req, prediction: { type: 'content', content: want.text } });
      assert.equal(pred.choices[0].message.content, want.text);
      const creq = { model: 'm', prompt: CODE, max_tokens: 40, ...extra };
      const s = await streamText(await client.completions.create({ ...creq, stream: true }));
      assert.equal(s.text, gen(['-p', CODE, ...generateFlags(creq)]).text);
    }
    const plain = gen(['--chat', '--chat-template', 'chatml', '-p', CODE, '-n', '40', '--temp', '0']).text;
    const penalised = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: CODE }], max_tokens: 40,
      temperature: 0, repeat_penalty: 1.3 });
    assert.notEqual(penalised.choices[0].message.content, plain, 'repeat_penalty is honoured, not ignored');
    await assert.rejects(client.completions.create({ model: 'm', prompt: 'x', repeat_penalty: 0 }),
      (e) => e.status === 400 && e.param === 'repeat_penalty');
  });

  await check('stop sequences cut the text as OpenAI does, plain and streamed', async () => {
    const base = { model: 'm', prompt: CODE, max_tokens: 60, temperature: 0 };
    const full = gen(['-p', CODE, ...generateFlags(base)]).text;
    const stops = ['\n\n', 'return'].filter((s) => full.includes(s));
    assert.ok(stops.length > 0, 'the greedy answer holds a stop string');
    const req = { ...base, stop: stops };
    const want = cutAtStop(gen(['-p', CODE, ...generateFlags(base), ...stops.flatMap((s) => ['--stop', esc(s)])]).text, stops);
    const r = await client.completions.create(req);
    assert.equal(r.choices[0].text, want);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const s = await streamText(await client.completions.create({ ...req, stream: true }));
    assert.equal(s.text, want);
    assert.equal(s.finish, 'stop');
  });

  await check('Predicted Outputs: tokens accepted, the answer unchanged (greedy and seeded)', async () => {
    for (const extra of [{ temperature: 0 }, { temperature: 0.7, seed: 99 }]) {
      const req = { model: 'm', messages: [{ role: 'user', content: CODE }], max_tokens: 48, ...extra };
      const plain = await client.chat.completions.create(req);
      const text = plain.choices[0].message.content;
      // The expected answer with its tail changed: most of it still predicts the answer.
      const prediction = text.slice(0, Math.floor(text.length * 0.7)) + '\n    pass  # edited\n';
      const r = await client.chat.completions.create({ ...req, prediction: { type: 'content', content: prediction } });
      assert.equal(r.choices[0].message.content, text);
      const d = r.usage.completion_tokens_details;
      assert.ok(d.accepted_prediction_tokens > 0, `accepted ${d.accepted_prediction_tokens}`);
      assert.ok(d.rejected_prediction_tokens >= 0);
      const want = gen(['--chat', '--chat-template', 'chatml', '-p', CODE, ...generateFlags(req)]);
      assert.equal(text, want.text);
      const s = await streamText(await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true },
        prediction: { type: 'content', content: prediction } }));
      assert.equal(s.text, text);
      assert.ok(s.usage.completion_tokens_details.accepted_prediction_tokens > 0);
    }
    // The extension on /v1/completions.
    const req = { model: 'm', prompt: CODE, max_tokens: 40, temperature: 0 };
    const want = gen(['-p', CODE, ...generateFlags(req)]).text;
    const r = await client.completions.create({ ...req, prediction: { type: 'content', content: want } });
    assert.equal(r.choices[0].text, want);
    assert.ok(r.usage.completion_tokens_details.accepted_prediction_tokens > 0);
  });

  await check('a second chat turn reuses the first turn\'s KV (cached_tokens > 0), answer as rewind generate', async () => {
    const turn1 = [{ role: 'user', content: 'def square(x):' }];
    const r1 = await client.chat.completions.create({ model: 'm', messages: turn1, max_tokens: 16, temperature: 0 });
    const messages = [...turn1, { role: 'assistant', content: r1.choices[0].message.content }, { role: 'user', content: 'def cube(x):' }];
    const r2 = await client.chat.completions.create({ model: 'm', messages, max_tokens: 16, temperature: 0 });
    assert.ok(r2.usage.prompt_tokens_details.cached_tokens > 0, `cached ${r2.usage.prompt_tokens_details.cached_tokens}`);
    // The same conversation as one prompt: /apply-template's text run by rewind generate.
    const t = await (await fetch(`${server.url}/apply-template`, { method: 'POST', headers: { Authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ messages }) })).json();
    const tok = await (await fetch(`${server.url}/tokenize`, { method: 'POST', headers: { Authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ content: t.prompt, add_special: true }) })).json();
    assert.equal(tok.tokens.length, r2.usage.prompt_tokens);
    const want = gen(['-p', t.prompt, '-n', '16', '--temp', '0']);
    assert.equal(r2.choices[0].message.content, want.text);
  });

  await check('401 without the key, 400 naming the field, 413 for a body over the limit', async () => {
    const bad = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.completions.create({ model: 'm', prompt: 'x', max_tokens: 1 }), (e) => e.status === 401);
    await assert.rejects(client.completions.create({ model: 'm', prompt: 'x', max_tokens: 1, n: 17 }),
      (e) => e.status === 400 && e.param === 'n');
    await assert.rejects(client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function', function: { name: 'f' } }] }),
      (e) => e.status === 400 && e.param === 'tools');
    await assert.rejects(client.completions.create({ model: 'm', prompt: 'x', max_tokens: 100000 }),
      (e) => e.status === 400 && /100000/.test(e.message) && /512/.test(e.message));
    await assert.rejects(client.completions.create({ model: 'm', prompt: 'x', temperature: 'hot' }),
      (e) => e.status === 400 && e.param === 'temperature');
    await assert.rejects(client.completions.create({ model: 'm', prompt: 'x'.repeat(70000), max_tokens: 1 }),
      (e) => e.status === 413 && e.error && e.error.type === 'invalid_request_error');
    const h = await fetch(`${server.url}/health`);
    assert.equal(h.status, 200, '/health needs no key');
    const m = await fetch(`${server.url}/metrics`);
    assert.equal(m.status, 401, '/metrics needs the key');
  });

  await check('/metrics counts requests, tokens, cached tokens and predictions', async () => {
    const m = await (await fetch(`${server.url}/metrics`, { headers: { Authorization: `Bearer ${KEY}` } })).text();
    for (const name of ['rewind_http_requests_total{path="/v1/completions",status="200"}', 'rewind_generated_tokens_total',
      'rewind_cached_prompt_tokens_total', 'rewind_prediction_tokens_accepted_total', 'rewind_time_to_first_token_seconds_bucket',
      'rewind_kv_bytes_used', 'rewind_queue_depth', 'rewind_guesses_accepted_total{source="ngram"}']) {
      assert.ok(m.includes(name), `metrics lack ${name}`);
    }
    const v = (n) => Number(m.split('\n').find((l) => l.startsWith(n + ' ')).split(' ')[1]);
    assert.ok(v('rewind_cached_prompt_tokens_total') > 0);
    assert.ok(v('rewind_prediction_tokens_accepted_total') > 0);
  });
} finally {
  server.proc.kill('SIGTERM');
  const code = await server.exited;
  if (code !== 0) { ++failures; console.log(`FAIL the server exited ${code} on SIGTERM:\n${server.stderr()}`); }
}
console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
