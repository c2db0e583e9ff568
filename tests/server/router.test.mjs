// `pagoda router` in front of real engines (stories260K on CPU, each on its own free port): answers
// equal the engine's own (greedy), prefix-aware placement, a hot prefix spreading under load, an
// engine killed (retry, health), a backend coming back after failing /health, and a client
// leaving mid-stream aborting the engine's request. Every wait polls a condition (router or
// engine /metrics, a backend's counter), never time alone.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, it } from 'node:test';
import OpenAI from 'openai';
import {
  counts, metric, readMetrics, startRouter, startServer, waitFor,
} from './lib/harness.mjs';

let engines = [];   // e0, e1 stay up; e2 is killed by the failover case
let routers = [];
let fake;           // a backend whose /health the test controls
let fakeHealth = 503;
let fakeHits = 0;

before(async () => {
  engines = await Promise.all([0, 1, 2].map(() => startServer(['--kv-cache-memory', '64M'])));
  fake = http.createServer((req, res) => {
    if (req.url === '/health') {
      res.writeHead(fakeHealth);
      res.end();
      return;
    }
    req.resume();
    req.on('end', () => {
      fakeHits += 1;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({
        id: 'fake', object: 'text_completion', created: 0, model: 'fake',
        choices: [{ index: 0, text: 'from the fake', finish_reason: 'stop', logprobs: null }],
      }));
    });
  });
  await new Promise((resolve) => fake.listen(0, '127.0.0.1', resolve));
});

after(async () => {
  for (const r of routers) {
    assert.deepEqual(await r.stop(), { code: 0, signal: null }, `router exit\n${r.log().slice(-4000)}`);
  }
  for (const e of engines) await e.stop();
  await new Promise((resolve) => fake.close(resolve));
});

async function router(backends, args = []) {
  const r = await startRouter(backends, ['--prefix-block-chars', '64', ...args]);
  routers.push(r);
  return r;
}

function client(baseURL) {
  return new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
}

async function complete(baseURL, prompt, extra = {}) {
  const r = await fetch(`${baseURL}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: engines[0].model, prompt, max_tokens: 4, temperature: 0, ...extra }),
  });
  const body = await r.json();
  assert.equal(r.status, 200, JSON.stringify(body));
  return body;
}

/** The change of one router series between two /metrics readings. */
function delta(before, after, name, labels) {
  return metric(after, name, labels) - metric(before, name, labels);
}

/** A prompt of about 5 blocks of 64 characters that opens with `opening`. */
function longPrompt(opening) {
  return `${opening} Once upon a time, in a quiet village by the sea, there lived a little girl who ` +
    'loved to play in the sand with her dog. Every morning she ran to the water and looked for ' +
    'shells, and every evening she told her mother about the fish she had seen that day.';
}

it('completions and streamed chats through the router equal the engine\'s answers (openai client)', async () => {
  const r = await router([engines[0].baseURL, engines[1].baseURL]);
  const direct = client(engines[0].baseURL);
  const routed = client(r.baseURL);
  const model = engines[0].model;
  assert.deepEqual((await routed.models.list()).data.map((m) => m.id), [model]);
  for (const prompt of ['Once upon a time', 'The little dog', 'Lily and Tom went to the park']) {
    const body = { model, prompt, max_tokens: 24, temperature: 0 };
    const [want, got] = [await direct.completions.create(body), await routed.completions.create(body)];
    assert.equal(got.choices[0].text, want.choices[0].text);
    assert.equal(got.choices[0].finish_reason, want.choices[0].finish_reason);
    assert.deepEqual(counts(got.usage), counts(want.usage));
  }
  for (const content of ['Tell me a story', 'What did the cat do?']) {
    const body = { model, messages: [{ role: 'user', content }], max_tokens: 24, temperature: 0, stream: true };
    const text = async (c) => {
      let out = '';
      let finish = null;
      for await (const chunk of await c.chat.completions.create(body)) {
        out += chunk.choices[0]?.delta?.content ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      return { out, finish };
    };
    assert.deepEqual(await text(routed), await text(direct));
  }
  const tokenize = async (base) => (await fetch(`${base}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model, prompt: 'Once upon' }),
  })).json();
  assert.deepEqual(await tokenize(r.baseURL), await tokenize(engines[0].baseURL));
});

it('requests sharing a long prefix go to one engine, which hits its prefix cache; others spread', async () => {
  const r = await router([engines[0].baseURL, engines[1].baseURL]);
  const before = await readMetrics(r.baseURL);
  const enginesBefore = await Promise.all(engines.slice(0, 2).map((e) => readMetrics(e.baseURL)));
  for (let i = 0; i < 4; ++i) await complete(r.baseURL, `${longPrompt('Shared.')} Then ${i} birds sang.`);
  let mid = await readMetrics(r.baseURL);
  const served = engines.slice(0, 2).map((e) =>
    delta(before, mid, 'pagoda_router:requests_total', { backend: e.baseURL, outcome: 'success' }));
  assert.deepEqual([...served].sort(), [0, 4], `per engine: ${served}`);
  assert.equal(delta(before, mid, 'pagoda_router:routed_requests_total', { reason: 'prefix_hit' }), 3);
  const hot = served.indexOf(4);
  const engineAfter = await readMetrics(engines[hot].baseURL);
  assert.ok(delta(enginesBefore[hot], engineAfter, 'pagoda:prefix_cache_hits_total') > 0,
    'the engine that got them reused the prefix');

  const openings = ['Apples.', 'Bridges.', 'Clouds.', 'Dragons.'];
  for (const o of openings) await complete(r.baseURL, longPrompt(o));
  const end = await readMetrics(r.baseURL);
  const spread = engines.slice(0, 2).map((e) =>
    delta(mid, end, 'pagoda_router:requests_total', { backend: e.baseURL, outcome: 'success' }));
  assert.deepEqual(spread, [2, 2], 'unmatched prompts go to the least loaded, ties in turn');
  assert.equal(delta(mid, end, 'pagoda_router:routed_requests_total', { reason: 'least_loaded' }), 4);
});

it('a burst with one shared prefix spreads once the hot engine is past the load threshold', async () => {
  const r = await router([engines[0].baseURL, engines[1].baseURL],
    ['--balance-abs-threshold', '1', '--balance-rel-threshold', '1']);
  const before = await readMetrics(r.baseURL);
  const prompt = longPrompt('Burst.');
  // Each stream generates 400 tokens: the burst is in flight together at the router.
  await Promise.all(Array.from({ length: 12 }, () =>
    complete(r.baseURL, prompt, { max_tokens: 400, ignore_eos: true, logprobs: 5 })));
  const end = await readMetrics(r.baseURL);
  const served = engines.slice(0, 2).map((e) =>
    delta(before, end, 'pagoda_router:requests_total', { backend: e.baseURL, outcome: 'success' }));
  assert.equal(served[0] + served[1], 12);
  assert.ok(served[0] > 0 && served[1] > 0, `both engines served the hot prefix: ${served}`);
  assert.ok(delta(before, end, 'pagoda_router:routed_requests_total', { reason: 'load_balanced' }) >= 1);
});

it('a killed engine: requests are retried on the other, /health stays 200, it is marked unhealthy', async () => {
  const r = await router([engines[0].baseURL, engines[2].baseURL], ['--health-interval', '3600']);
  const before = await readMetrics(r.baseURL);
  const victim = engines[2];
  victim.proc.kill('SIGKILL');
  await victim.stop();
  const want = await complete(engines[0].baseURL, 'The sun was hot');
  // Unmatched prompts alternate between the two: the second of any two goes to the dead one.
  for (let i = 0; i < 4; ++i) {
    const got = await complete(r.baseURL, 'The sun was hot');
    assert.equal(got.choices[0].text, want.choices[0].text);
  }
  const end = await readMetrics(r.baseURL);
  assert.ok(delta(before, end, 'pagoda_router:retries_total', { backend: victim.baseURL }) >= 1);
  assert.equal(delta(before, end, 'pagoda_router:requests_total', { backend: engines[0].baseURL, outcome: 'success' }), 4);
  assert.equal(metric(end, 'pagoda_router:backend_healthy', { backend: victim.baseURL }), 0);
  assert.equal(metric(end, 'pagoda_router:backend_healthy', { backend: engines[0].baseURL }), 1);
  assert.equal((await fetch(`${r.baseURL}/health`)).status, 200);
});

it('a backend failing /health gets no requests, and gets them again once it answers 200', async () => {
  const fakeURL = `http://127.0.0.1:${fake.address().port}`;
  const r = await router([engines[0].baseURL, fakeURL], ['--health-interval', '0.05']);
  assert.equal(metric(await readMetrics(r.baseURL), 'pagoda_router:backend_healthy', { backend: fakeURL }), 0);
  for (let i = 0; i < 4; ++i) await complete(r.baseURL, `Ben ${i}`);
  assert.equal(fakeHits, 0);
  fakeHealth = 200;
  await waitFor(async () =>
    metric(await readMetrics(r.baseURL), 'pagoda_router:backend_healthy', { backend: fakeURL }) === 1,
  { what: 'the fake backend to be healthy again' });
  const texts = [];
  for (let i = 0; i < 4; ++i) texts.push((await complete(r.baseURL, `Sam ${i}`)).choices[0].text);
  assert.ok(fakeHits >= 1 && texts.includes('from the fake'), `the fake got ${fakeHits} requests`);
});

it('a client leaving mid-stream aborts the engine\'s request', async () => {
  const engine = engines[1];
  const r = await router([engine.baseURL]);
  const before = await readMetrics(engine.baseURL);
  const controller = new AbortController();
  // 16 sequences of 480 tokens with log-probabilities: seconds of work, stopped after one event.
  const res = await fetch(`${r.baseURL}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: engine.model, prompt: 'Once', max_tokens: 480, ignore_eos: true,
      n: 16, logprobs: 20, stream: true }),
    signal: controller.signal,
  });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  const { value } = await reader.read();
  assert.match(new TextDecoder().decode(value), /^data: \{/);
  controller.abort();
  const idle = await waitFor(async () => {
    const m = await readMetrics(engine.baseURL);
    return metric(m, 'pagoda:num_requests_running') === 0 &&
      delta(before, m, 'pagoda:request_success_total', { finished_reason: 'abort' }) >= 1 ? m : null;
  }, { what: 'the engine to abort the request' });
  const generated = delta(before, idle, 'pagoda:generation_tokens_total');
  assert.ok(generated < 16 * 480, `generation stopped early (${generated} tokens)`);
  await waitFor(async () => metric(await readMetrics(r.baseURL), 'pagoda_router:requests_total',
    { backend: engine.baseURL, outcome: 'cancelled' }) === 1, { what: 'the router to count it cancelled' });
});
