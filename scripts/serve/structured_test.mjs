// Structured output, logprobs and penalties through the official openai client on the bundled
// model (chatml): every schema of the JSON workload as response_format json_schema answers JSON
// that validates (ajv) or ends with finish_reason "length", byte-identical with speculation on,
// with a prediction and streamed; logprobs, penalties and n equal their own plain decoding
// (speculation off) bit for bit. (Logprobs against `rewind generate --logprobs`:
// tests/test_serve_logprobs.cpp.)
// Usage: node structured_test.mjs --rewind BUILD/bin/rewind --model MODEL.gguf --shared SHARED_DIR   (exit 77: skipped)
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadOpenAI, loadAjv, parseArgs, startServer, rewindPath, here } from './lib.mjs';

const OpenAI = await loadOpenAI();
const ajv = await loadAjv();
const args = parseArgs(process.argv.slice(2), { rewind: rewindPath(), model: '', shared: join(here, '..', '..', '..', 'shared') });
const workload = join(args.shared, 'workloads', 'json.jsonl');
if (!existsSync(workload)) { console.log(`SKIP: ${workload} is absent`); process.exit(77); }
const items = readFileSync(workload, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
const server = await startServer(args.rewind, ['-m', args.model, '--chat-template', 'chatml', '--parallel', '4', '-t', '1']);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
let failures = 0;
async function check(name, fn) {
  const t0 = Date.now();
  try { await fn(); console.log(`ok   ${name} (${Date.now() - t0} ms)`); }
  catch (e) { ++failures; console.log(`FAIL ${name}: ${e.stack ?? e}`); }
}
const chat = (req) => client.chat.completions.create(req);
const off = { speculation: { source: 'none' } };
const on = { speculation: { source: 'ngram' } };
function schemaRequest(item) {
  return {
    model: 'm', messages: [{ role: 'user', content: item.prompt.slice(0, 600) }], max_tokens: item.max_tokens, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'item', strict: true, schema: item.json_schema } },
  };
}

try {
  await check('every schema of the JSON workload: valid answers, the same bytes with speculation, a prediction, streamed', async () => {
    let valid = 0;
    await Promise.all([0, 1, 2, 3].map(async (lane) => {
      for (let i = lane; i < items.length; i += 4) {
        const item = items[i];
        const req = schemaRequest(item);
        const plain = (await chat({ ...req, ...off })).choices[0];
        const text = plain.message.content;
        if (plain.finish_reason === 'stop') {
          const validate = ajv.compile(item.json_schema);
          assert.ok(validate(JSON.parse(text)), `${item.id}: ${text}: ${JSON.stringify(validate.errors)}`);
          ++valid;
        } else {
          assert.equal(plain.finish_reason, 'length', item.id);
        }
        assert.equal((await chat({ ...req, ...on })).choices[0].message.content, text, `${item.id} ngram`);
        const predicted = await chat({ ...req, ...on, prediction: { type: 'content', content: text } });
        assert.equal(predicted.choices[0].message.content, text, `${item.id} prediction`);
        let streamed = '';
        for await (const c of await chat({ ...req, ...on, stream: true })) streamed += c.choices[0]?.delta?.content ?? '';
        assert.equal(streamed, text, `${item.id} streamed`);
      }
    }));
    assert.ok(valid >= items.length / 2, `only ${valid} of ${items.length} answers ended before max_tokens`);
  });

  await check('json_object answers an object; an unsupported keyword is a 400 naming the schema', async () => {
    const a = (await chat({ model: 'm', messages: [{ role: 'user', content: 'def f():' }], max_tokens: 80, temperature: 0,
      response_format: { type: 'json_object' } })).choices[0];
    if (a.finish_reason === 'stop') assert.equal(typeof JSON.parse(a.message.content), 'object');
    await assert.rejects(chat({ model: 'm', messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'string', format: 'uri-template' } } } }),
    (e) => e.status === 400 && e.error?.param === 'response_format.json_schema.schema' && /format/.test(e.message));
  });

  await check('logprobs equal plain decoding bit for bit, whole and streamed, chat and completions', async () => {
    const msgs = [{ role: 'user', content: 'def add(a, b):\n    return a + b\n\ndef add(' }];
    for (const temperature of [0, 0.9]) {
      const req = { model: 'm', messages: msgs, max_tokens: 32, temperature, seed: 4, logprobs: true, top_logprobs: 4 };
      const plain = (await chat({ ...req, ...off })).choices[0].logprobs.content;
      assert.equal(plain.length, 32);
      assert.deepEqual((await chat({ ...req, ...on })).choices[0].logprobs.content, plain);
      const streamed = [];
      for await (const c of await chat({ ...req, ...on, stream: true })) streamed.push(...(c.choices[0]?.logprobs?.content ?? []));
      assert.deepEqual(streamed, plain);
    }
    const creq = { model: 'm', prompt: 'def add(a, b):\n    return a + b\n\ndef add(', max_tokens: 24, temperature: 0, logprobs: 3 };
    const cplain = (await client.completions.create({ ...creq, ...off })).choices[0].logprobs;
    assert.equal(cplain.tokens.length, 24);
    assert.deepEqual((await client.completions.create({ ...creq, ...on })).choices[0].logprobs, cplain);
  });

  await check('penalties, logit_bias and n equal their own plain decoding under speculation', async () => {
    const base = { model: 'm', prompt: 'def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef', max_tokens: 48 };
    for (const extra of [{ frequency_penalty: 1.1 }, { presence_penalty: -0.8 }, { frequency_penalty: 0.4, presence_penalty: 0.6, logit_bias: { 11: -5, 25: 3 } }]) {
      for (const temperature of [0, 0.8]) {
        const req = { ...base, ...extra, temperature, seed: 9 };
        const plain = (await client.completions.create({ ...req, ...off })).choices[0].text;
        assert.equal((await client.completions.create({ ...req, ...on })).choices[0].text, plain, JSON.stringify(extra));
      }
    }
    const req = { ...base, temperature: 0.8, frequency_penalty: 0.5, seed: 20, n: 3, ...on };
    const choices = (await client.completions.create(req)).choices;
    for (let i = 0; i < 3; ++i) {
      const own = (await client.completions.create({ ...req, n: 1, seed: 20 + i, ...off })).choices[0].text;
      assert.equal(choices[i].text, own, `choice ${i}`);
    }
  });
} finally {
  server.proc.kill('SIGTERM');
  await server.exited;
}
console.log(failures ? `${failures} FAILED` : 'all passed');
process.exit(failures ? 1 : 0);
