// `pagoda serve --data-parallel-size 2`: two engine replicas in one process behind the router's
// balancer on the one port. Greedy answers equal a single engine's, distinct prompts spread over
// both replicas (each its own KV pool), and the flag's refusals name it. Waits poll /health.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, it } from 'node:test';
import { MODEL_DIR, PAGODA_BIN, readMetrics, startServer } from './lib/harness.mjs';

let single;
let replicas;

before(async () => {
  single = await startServer(['--kv-cache-memory', '32M']);
  replicas = await startServer(['--kv-cache-memory', '32M', '--data-parallel-size', '2']);
});

after(async () => {
  assert.deepEqual(await replicas.stop(), { code: 0, signal: null }, replicas.log().slice(-4000));
  await single.stop();
});

async function complete(baseURL, prompt) {
  const r = await fetch(`${baseURL}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: single.model, prompt, max_tokens: 16, temperature: 0 }),
  });
  const body = await r.json();
  assert.equal(r.status, 200, JSON.stringify(body));
  return body.choices[0].text;
}

it('two replicas answer as one engine does, and distinct prompts use both', async () => {
  assert.match(replicas.log(), /data-parallel replica 1 of 2: http:\/\/127\.0\.0\.1:\d+/);
  assert.match(replicas.log(), /over 2 replicas/);
  const prompts = ['Once upon a time', 'The little dog', 'Lily and Tom went', 'A big red ball'];
  for (const p of prompts) assert.equal(await complete(replicas.baseURL, p), await complete(single.baseURL, p), p);
  const m = await readMetrics(replicas.baseURL);
  const perBackend = new Map();
  for (const s of m.get('pagoda_router:requests_total') ?? []) {
    if (s.labels.outcome === 'success') perBackend.set(s.labels.backend, (perBackend.get(s.labels.backend) ?? 0) + s.value);
  }
  assert.equal(perBackend.size, 2, JSON.stringify([...perBackend]));
  // The four completions spread two and two (unmatched prompts go to the least loaded, in turn);
  // the harness's GET /v1/models at start went to one of them.
  const served = [...perBackend.values()].sort();
  assert.deepEqual(served, [2, 3], `per replica: ${served}`);
  const healthy = (m.get('pagoda_router:backend_healthy') ?? []).filter((s) => s.value === 1);
  assert.equal(healthy.length, 2);
});

it('refuses what it cannot do, naming the flag', () => {
  const serve = (args) => spawnSync(PAGODA_BIN, ['serve', MODEL_DIR, '--port', '1', '--device', 'cpu', ...args],
    { encoding: 'utf8' });
  assert.match(serve(['--data-parallel-size', '0']).stderr, /--data-parallel-size 0: must be at least 1/);
  assert.match(serve(['--data-parallel-size', '2', '-tp', '2']).stderr,
    /--data-parallel-size 2 with --tensor-parallel-size 2: not yet/);
  const generate = spawnSync(PAGODA_BIN, ['generate', '--model', MODEL_DIR, '--prompt', 'x', '--data-parallel-size', '2'],
    { encoding: 'utf8' });
  assert.match(generate.stderr, /--data-parallel-size 2: engine replicas are `pagoda serve`'s/);
});
