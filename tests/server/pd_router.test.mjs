// Suite: prefill/decode disaggregation through `pagoda router --prefill URL --decode URL`
// (stories260K on the CPU; the engines' KV transfer ports ephemeral on loopback). Completions and
// chats, streamed and not, equal one engine's answers (greedy, text and log-probabilities); the
// decode engine computes only the prompt's tail (its kv_transfer_received_tokens and
// prompt_tokens counters); the producer holds no block once pulled; the hand-off is vLLM's
// kv_transfer_params; and with the producer gone the router falls back to a prefill on the
// decode engine, with the same answers. Every wait polls a condition, never time alone.
// The KV moves over TCP, or over UCX (its tcp transport) when PAGODA_PD_TRANSPORT is ucx (ctest's
// server_pd_router_ucx).
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, it } from 'node:test';
import OpenAI from 'openai';
import { parseMetrics, startPDRouter, startServer, waitFor } from './lib/harness.mjs';

const TRANSPORT = process.env.PAGODA_PD_TRANSPORT ?? 'tcp';
const EXTRA = TRANSPORT === 'ucx'
  ? { kv_connector_extra_config: { transport: 'ucx', ucx_tls: 'tcp' } } : {};
const PRODUCER = JSON.stringify({ kv_connector: 'PagodaConnector', kv_role: 'kv_producer', ...EXTRA });
const CONSUMER = JSON.stringify({ kv_connector: 'PagodaConnector', kv_role: 'kv_consumer', ...EXTRA });

let reference;
let producer;
let consumer;
let router;

before(async () => {
  [reference, producer, consumer] = await Promise.all([
    startServer(['--kv-cache-memory', '64M']),
    startServer(['--kv-cache-memory', '64M', '--kv-transfer-config', PRODUCER]),
    startServer(['--kv-cache-memory', '64M', '--kv-transfer-config', CONSUMER]),
  ]);
  // Both engines run the transport asked for (logged at start: "KV transfer (..., ucx)").
  for (const e of [producer, consumer]) assert.match(e.log(), new RegExp(`KV transfer \\(PagodaConnector, kv_\\w+, ${TRANSPORT}\\)`));
  router = await startPDRouter([producer.baseURL], [consumer.baseURL]);
  await waitFor(async () => (await fetch(`${router.baseURL}/health`)).status === 200,
    { what: 'the router\'s decode engine to be healthy' });
});

after(async () => {
  assert.deepEqual(await router.stop(), { code: 0, signal: null }, router.log().slice(-4000));
  for (const e of [reference, producer, consumer]) await e.stop();
});

function promptOf(n, seed) {
  const p = [1];
  for (let i = 1; i < n; ++i) p.push(3 + ((seed * 131 + i * 17) % 500));
  return p;
}

async function metrics(server) {
  return parseMetrics(await (await fetch(`${server.baseURL}/metrics`)).text());
}
function value(m, name, labels = {}) {
  const series = (m.get(name) ?? []).find((s) =>
    Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  assert.ok(series, `no ${name} ${JSON.stringify(labels)} on /metrics`);
  return series.value;
}

async function post(base, path, body) {
  const r = await fetch(`${base}${path}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  const json = await r.json();
  assert.equal(r.status, 200, JSON.stringify(json));
  return json;
}

function client(baseURL) {
  return new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
}

async function streamedChat(base, body) {
  let out = '';
  let finish = null;
  for await (const chunk of await client(base).chat.completions.create({ ...body, stream: true })) {
    out += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  return { out, finish };
}

it('a producer answers a do_remote_decode request with vLLM\'s kv_transfer_params', async () => {
  const body = { model: producer.model, prompt: promptOf(70, 1), max_tokens: 8, temperature: 0,
    kv_transfer_params: { do_remote_decode: true } };
  const r = await post(producer.baseURL, '/v1/completions', body);
  assert.equal(r.usage.completion_tokens, 1);  // a prefill: one token whatever max_tokens says
  const p = r.kv_transfer_params;
  assert.equal(p.do_remote_prefill, true);
  assert.equal(p.do_remote_decode, false);
  assert.equal(p.remote_host, '127.0.0.1');
  assert.ok(p.remote_port > 0);
  assert.equal(p.remote_block_ids.length, 4);  // (70 - 1) / 16 full blocks
  assert.equal(typeof p.remote_engine_id, 'string');
  assert.equal(typeof p.remote_request_id, 'string');
  // Bad hand-offs are refused by field.
  const bad = await fetch(`${consumer.baseURL}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...body, kv_transfer_params: { do_remote_prefill: true, remote_host: 'h' } }),
  });
  assert.equal(bad.status, 400);
  assert.match((await bad.json()).error.message, /kv_transfer_params\.remote_engine_id/);
  const wrongRole = await fetch(`${consumer.baseURL}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  assert.equal(wrongRole.status, 400);
  assert.match((await wrongRole.json()).error.message, /kv_producer or kv_both/);
  // The consumer pulls it (the next test's counters start after this one).
  const got = await post(consumer.baseURL, '/v1/completions',
    { ...body, kv_transfer_params: p });
  const want = await post(reference.baseURL, '/v1/completions',
    { ...body, kv_transfer_params: undefined });
  assert.equal(got.choices[0].text, want.choices[0].text);
  assert.equal(got.usage.prompt_tokens_details?.cached_tokens, 64);
});

it('completions through the router equal one engine\'s, the decode engine computing only the tail', async () => {
  for (const [n, seed] of [[70, 2], [100, 3], [33, 4], [10, 5]]) {
    const prompt = promptOf(n, seed);
    const body = { model: reference.model, prompt, max_tokens: 12, temperature: 0, logprobs: 3,
      ignore_eos: true };
    const before = await metrics(consumer);
    const want = await post(reference.baseURL, '/v1/completions', body);
    const got = await post(router.baseURL, '/v1/completions', body);
    assert.equal(got.choices[0].text, want.choices[0].text);
    assert.deepEqual(got.choices[0].logprobs, want.choices[0].logprobs);
    assert.equal(got.usage.completion_tokens, 12);
    const after = await metrics(consumer);
    const received = Math.floor((n - 1) / 16) * 16;
    assert.equal(value(after, 'pagoda:kv_transfer_received_tokens_total') -
      value(before, 'pagoda:kv_transfer_received_tokens_total'), received);
    assert.equal(value(after, 'pagoda:prompt_tokens_total') -
      value(before, 'pagoda:prompt_tokens_total'), n - received);
  }
  // Streamed: the same text.
  const body = { model: reference.model, prompt: 'Once upon a time, there was a little girl named Lily.',
    max_tokens: 16, temperature: 0 };
  const want = await post(reference.baseURL, '/v1/completions', body);
  let text = '';
  for await (const chunk of await client(router.baseURL).completions.create({ ...body, stream: true })) {
    text += chunk.choices[0]?.text ?? '';
  }
  assert.equal(text, want.choices[0].text);
});

it('streamed chats through the router equal one engine\'s', async () => {
  for (const content of ['Tell me a story about a cat and a dog who went to the park together',
    'What did the little bird see?']) {
    const body = { model: reference.model, messages: [{ role: 'user', content }], max_tokens: 24,
      temperature: 0 };
    const before = await metrics(consumer);
    const got = await streamedChat(router.baseURL, body);
    assert.deepEqual(got, await streamedChat(reference.baseURL, body));
    const whole = await post(reference.baseURL, '/v1/chat/completions', body);
    const after = await metrics(consumer);
    const n = whole.usage.prompt_tokens;
    const received = Math.floor((n - 1) / 16) * 16;
    assert.equal(value(after, 'pagoda:kv_transfer_received_tokens_total') -
      value(before, 'pagoda:kv_transfer_received_tokens_total'), received);
    assert.equal(value(after, 'pagoda:prompt_tokens_total') -
      value(before, 'pagoda:prompt_tokens_total'), n - received);
    // Not streamed either.
    const routed = await post(router.baseURL, '/v1/chat/completions', body);
    assert.equal(routed.choices[0].message.content, whole.choices[0].message.content);
  }
});

it('no block is left on either side, and the router counts its hand-offs', async () => {
  await waitFor(async () => {
    const [p, c] = [await metrics(producer), await metrics(consumer)];
    return value(p, 'pagoda:kv_transfer_pending_blocks') === 0 &&
      value(p, 'pagoda:kv_cache_usage_perc') === 0 && value(c, 'pagoda:kv_cache_usage_perc') === 0;
  }, { what: 'both engines to hold no KV block' });
  const p = await metrics(producer);
  assert.ok(value(p, 'pagoda:kv_transfer_blocks_sent_total') > 0);
  assert.equal(value(p, 'pagoda:kv_transfer_blocks_freed_timeout_total'), 0);
  const c = await metrics(consumer);
  assert.equal(value(c, 'pagoda:kv_transfer_failures_total'), 0);
  assert.ok(value(c, 'pagoda:kv_transfer_received_bytes_total') > 0);
  assert.ok(value(c, 'pagoda:kv_transfer_latency_seconds_count') > 0);
  const r = await metrics(router);
  assert.ok(value(r, 'pagoda_router:pd_prefills_total', { outcome: 'handed_off' }) >= 9);
  assert.equal(value(r, 'pagoda_router:pd_prefills_total', { outcome: 'fallback' }), 0);
  const models = await (await fetch(`${router.baseURL}/v1/models`)).json();
  assert.deepEqual(models.data.map((m) => m.id), [reference.model]);
});

it('a producer that never answers is given up after --prefill-timeout', async () => {
  // Healthy, but it never answers a prefill.
  const held = [];
  const silent = http.createServer((req, res) => {
    if (req.url === '/health') {
      res.writeHead(200);
      res.end();
      return;
    }
    held.push(res);
  });
  await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const r2 = await startPDRouter([`http://127.0.0.1:${silent.address().port}`], [consumer.baseURL],
    ['--prefill-timeout', '0.5']);
  try {
    const body = { model: reference.model, prompt: promptOf(50, 7), max_tokens: 8, temperature: 0 };
    const got = await post(r2.baseURL, '/v1/completions', body);
    const want = await post(reference.baseURL, '/v1/completions', body);
    assert.equal(got.choices[0].text, want.choices[0].text);
    assert.equal(held.length, 1);
    assert.equal(value(await metrics(r2), 'pagoda_router:pd_prefills_total', { outcome: 'fallback' }), 1);
    assert.match(r2.log(), /prefill failed \(.*no answer within --prefill-timeout/);
  } finally {
    assert.deepEqual(await r2.stop(), { code: 0, signal: null });
    for (const res of held) res.destroy();
    await new Promise((resolve) => silent.close(resolve));
  }
});

it('with the producer gone the decode engine prefills, with the same answers', async () => {
  assert.deepEqual(await producer.stop(), { code: 0, signal: null });
  const prompt = promptOf(70, 6);
  const body = { model: reference.model, prompt, max_tokens: 12, temperature: 0, logprobs: 3 };
  const before = await metrics(consumer);
  const want = await post(reference.baseURL, '/v1/completions', body);
  const got = await post(router.baseURL, '/v1/completions', body);
  assert.equal(got.choices[0].text, want.choices[0].text);
  assert.deepEqual(got.choices[0].logprobs, want.choices[0].logprobs);
  const after = await metrics(consumer);
  assert.equal(value(after, 'pagoda:prompt_tokens_total') -
    value(before, 'pagoda:prompt_tokens_total'), 70);
  const r = await metrics(router);
  assert.ok(value(r, 'pagoda_router:pd_prefills_total', { outcome: 'fallback' }) >= 1);
  const chat = { model: reference.model, messages: [{ role: 'user', content: 'Hello there' }],
    max_tokens: 16, temperature: 0 };
  assert.deepEqual(await streamedChat(router.baseURL, chat), await streamedChat(reference.baseURL, chat));
  assert.equal((await fetch(`${router.baseURL}/health`)).status, 200);  // the decoders answer
});
