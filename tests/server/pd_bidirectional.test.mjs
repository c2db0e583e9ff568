// Suite: bi-directional KV through `pagoda router --prefill URL --decode URL --bidirectional-kv`
// (stories260K on the CPU, both engines kv_both, their KV transfer ports ephemeral on loopback).
// A two-turn conversation: turn 1's finished KV (prompt and generated tokens) flows back from the
// decode engine to the producer, whose prefill of turn 2 then finds it as prefix-cache hits
// (pagoda:prefix_cache_imported_hits_total apart), and both turns equal one engine's answers,
// whole and streamed; the hand-off rides on a stream's last chunk; a failed import (its source
// gone) is a 502 that costs turn 2 only a recompute; malformed imports are 400s naming the field.
// Every wait polls a condition.
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import OpenAI from 'openai';
import { parseMetrics, startPDRouter, startServer, waitFor } from './lib/harness.mjs';

const BOTH = JSON.stringify({ kv_connector: 'PagodaConnector', kv_role: 'kv_both' });

let reference;
let producer;
let consumer;
let router;

before(async () => {
  [reference, producer, consumer] = await Promise.all([
    startServer(['--kv-cache-memory', '64M']),
    startServer(['--kv-cache-memory', '64M', '--kv-transfer-config', BOTH]),
    startServer(['--kv-cache-memory', '64M', '--kv-transfer-config', BOTH]),
  ]);
  router = await startPDRouter([producer.baseURL], [consumer.baseURL], ['--bidirectional-kv']);
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
const imported = async () => value(await metrics(router), 'pagoda_router:kv_returns_total',
  { outcome: 'imported' });

async function send(base, path, body) {
  return fetch(`${base}${path}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
}
async function post(base, path, body) {
  const r = await send(base, path, body);
  const json = await r.json();
  assert.equal(r.status, 200, JSON.stringify(json));
  return json;
}

it('turn 2\'s prefill hits turn 1\'s blocks, generated tokens included, with the same answers', async () => {
  const p1 = promptOf(40, 1);
  const body = { model: reference.model, max_tokens: 30, temperature: 0, logprobs: 3,
    ignore_eos: true, return_token_ids: true };
  const want1 = await post(reference.baseURL, '/v1/completions', { ...body, prompt: p1 });
  const got1 = await post(router.baseURL, '/v1/completions', { ...body, prompt: p1 });
  assert.equal(got1.choices[0].text, want1.choices[0].text);
  assert.deepEqual(got1.choices[0].logprobs, want1.choices[0].logprobs);
  // The decode engine's answer names the kept blocks: (40 + 30 - 1) / 16 = 4.
  assert.equal(got1.kv_transfer_params.remote_block_ids.length, 4);
  assert.equal(got1.kv_transfer_params.do_remote_prefill, true);
  // The router has the producer import them once the client has the answer.
  await waitFor(async () => (await imported()) === 1, { what: 'the producer to import turn 1' });
  const p = await metrics(producer);
  assert.equal(value(p, 'pagoda:kv_transfer_imported_blocks_total'), 2);  // 0-1 were cached
  assert.equal(value(await metrics(consumer), 'pagoda:kv_transfer_returned_blocks_total'), 4);

  const p2 = [...p1, ...got1.choices[0].token_ids, ...promptOf(11, 99).slice(1)];  // 80 tokens
  const want2 = await post(reference.baseURL, '/v1/completions', { ...body, prompt: p2 });
  const got2 = await post(router.baseURL, '/v1/completions', { ...body, prompt: p2 });
  assert.equal(got2.choices[0].text, want2.choices[0].text);
  assert.deepEqual(got2.choices[0].logprobs, want2.choices[0].logprobs);
  const q = await metrics(producer);
  assert.equal(value(q, 'pagoda:prefix_cache_hits_total') -
    value(p, 'pagoda:prefix_cache_hits_total'), 64);
  assert.equal(value(q, 'pagoda:prefix_cache_imported_hits_total') -
    value(p, 'pagoda:prefix_cache_imported_hits_total'), 32);
  assert.equal(value(q, 'pagoda:prompt_tokens_total') - value(p, 'pagoda:prompt_tokens_total'),
    80 - 64);
  await waitFor(async () => (await imported()) === 2, { what: 'the producer to import turn 2' });
});

it('a streamed turn carries its hand-off on its last chunk', async () => {
  const client = new OpenAI({ baseURL: `${router.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
  const body = { model: reference.model, prompt: promptOf(50, 2), max_tokens: 20, temperature: 0,
    ignore_eos: true };
  const before = await imported();
  let text = '';
  let last = null;
  for await (const chunk of await client.completions.create({ ...body, stream: true })) {
    text += chunk.choices[0]?.text ?? '';
    if (chunk.kv_transfer_params) last = chunk;
  }
  const want = await post(reference.baseURL, '/v1/completions', body);
  assert.equal(text, want.choices[0].text);
  assert.ok(last, 'no chunk carried kv_transfer_params');
  assert.equal(last.choices[0].finish_reason, 'length');
  assert.equal(last.kv_transfer_params.remote_block_ids.length, Math.floor((50 + 20 - 1) / 16));
  await waitFor(async () => (await imported()) === before + 1,
    { what: 'the producer to import the streamed turn' });
  // A streamed chat's turn too.
  const chat = { model: reference.model, messages: [{ role: 'user', content: 'Tell me a story' }],
    max_tokens: 24, temperature: 0, ignore_eos: true };
  let content = '';
  for await (const chunk of await client.chat.completions.create({ ...chat, stream: true })) {
    content += chunk.choices[0]?.delta?.content ?? '';
  }
  const wantChat = await post(reference.baseURL, '/v1/chat/completions', chat);
  assert.equal(content, wantChat.choices[0].message.content);
  await waitFor(async () => (await imported()) === before + 2,
    { what: 'the producer to import the streamed chat turn' });
});

it('a failed import is a 502 and costs the next turn only a recompute; bad imports are 400s', async () => {
  // A hand-off whose source is gone: a transfer port nothing listens on.
  const gone = { do_remote_prefill: true, do_remote_decode: false, remote_engine_id: 'gone',
    remote_host: '127.0.0.1', remote_port: 9, remote_block_ids: [1, 2], remote_request_id: 'x' };
  const before = await metrics(producer);
  const r = await send(producer.baseURL, '/v1/kv_transfer/import', { kv_transfer_params: gone });
  assert.equal(r.status, 502);
  assert.match((await r.json()).error.message, /importing the KV failed/);
  const after = await metrics(producer);
  assert.equal(value(after, 'pagoda:kv_transfer_import_failures_total') -
    value(before, 'pagoda:kv_transfer_import_failures_total'), 1);
  assert.equal(value(after, 'pagoda:kv_transfer_imported_blocks_total'),
    value(before, 'pagoda:kv_transfer_imported_blocks_total'));
  // Malformed imports name their field.
  for (const [body, field] of [
    [{}, 'kv_transfer_params'],
    [{ kv_transfer_params: { ...gone, remote_port: 'x' } }, 'kv_transfer_params.remote_port'],
    [{ kv_transfer_params: { do_remote_decode: true } }, 'kv_transfer_params.do_remote_prefill'],
    [{ kv_transfer_params: gone, cache_salt: '' }, 'cache_salt'],
    [{ kv_transfer_params: gone, extra: 1 }, 'extra'],
  ]) {
    const bad = await send(producer.baseURL, '/v1/kv_transfer/import', body);
    assert.equal(bad.status, 400, JSON.stringify(body));
    assert.equal((await bad.json()).error.param, field);
  }
  // return_kv on an engine without a transfer port is refused by name.
  const plain = await send(reference.baseURL, '/v1/completions', { model: reference.model,
    prompt: 'Hi', max_tokens: 2, kv_transfer_params: { return_kv: true } });
  assert.equal(plain.status, 400);
  assert.match((await plain.json()).error.message, /return_kv/);
  // The conversation goes on: the same answer as one engine.
  const body = { model: reference.model, prompt: promptOf(60, 3), max_tokens: 8, temperature: 0 };
  const want = await post(reference.baseURL, '/v1/completions', body);
  const got = await post(router.baseURL, '/v1/completions', body);
  assert.equal(got.choices[0].text, want.choices[0].text);
  await waitFor(async () => {
    const [p, c] = [await metrics(producer), await metrics(consumer)];
    return value(p, 'pagoda:kv_cache_usage_perc') === 0 && value(c, 'pagoda:kv_cache_usage_perc') === 0;
  }, { what: 'both engines to hold no KV block' });
});
