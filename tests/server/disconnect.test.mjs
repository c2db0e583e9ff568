// Suite 3: 100 clients drop their streams mid-way (AbortController). The server stays healthy,
// aborts the requests and frees every KV block, which /metrics shows; it still answers afterwards.
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import {
  finishedRequests, metric, readMetrics, sleep, startServer, waitForFinished, waitForIdle,
} from './lib/harness.mjs';

const NUM_CLIENTS = 100;
let server;

before(async () => {
  server = await startServer(['--kv-cache-memory', '128M']);
});

after(async () => {
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `SIGTERM exit\n${server.log().slice(-4000)}`);
});

/** Streams a long completion, reads `chunksBeforeDrop` SSE chunks, then drops the connection. */
async function dropMidStream(i, chunksBeforeDrop) {
  const controller = new AbortController();
  const r = await fetch(`${server.baseURL}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      model: server.model, prompt: `Once upon a time ${i}`, max_tokens: 400, ignore_eos: true,
      stream: true, seed: i,
    }),
    signal: controller.signal,
  });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let seen = 0;
  let text = '';
  while (seen < chunksBeforeDrop) {
    const { value, done } = await reader.read();
    assert.ok(!done, `client ${i}: the stream ended before the drop`);
    text += decoder.decode(value, { stream: true });
    seen = text.split('\n\n').filter((e) => e.startsWith('data: {')).length;
  }
  controller.abort();
  return seen;
}

it(`${NUM_CLIENTS} clients drop mid-stream and every block is freed`, async () => {
  const before = await readMetrics(server.baseURL);
  const seen = await Promise.all(Array.from({ length: NUM_CLIENTS }, (_, i) => dropMidStream(i, 2 + (i % 4))));
  assert.equal(seen.length, NUM_CLIENTS);

  // Right after the drops the engine may still hold them; it must let go of all of them.
  assert.equal(metric(await waitForIdle(server.baseURL), 'pagoda:kv_cache_usage_perc'), 0);
  const idle = await waitForFinished(server.baseURL, before, NUM_CLIENTS);
  assert.equal(finishedRequests(idle) - finishedRequests(before), NUM_CLIENTS, 'no request is recorded twice');
  const finished = (reason) => metric(idle, 'pagoda:request_success_total', { finished_reason: reason }) -
    metric(before, 'pagoda:request_success_total', { finished_reason: reason });
  // CI once counted 99 aborts of 100 on a 2-core machine (not reproduced here in 115 runs on 2 cores). Two
  // causes fit, and both are correct behaviour: the counter was read before the HTTP thread had
  // recorded the last end (waitForFinished now waits for it), or a client whose event loop
  // stalled dropped its stream only after the server had generated and written all 400 tokens
  // (they fit in the socket buffers), which rightly ends "length". Every request must end one way
  // or the other, and the drops must abort nearly all of them.
  const aborted = finished('abort');
  assert.equal(aborted + finished('length'), NUM_CLIENTS, 'each request ends "abort" or "length"');
  assert.ok(aborted >= NUM_CLIENTS * 0.9, `dropped streams are aborted (${aborted} of ${NUM_CLIENTS})`);
  // 400 tokens each were asked for; had the engine kept generating for the dropped clients the
  // counter would be near 100 * 400.
  const generated = metric(idle, 'pagoda:generation_tokens_total') -
    metric(before, 'pagoda:generation_tokens_total');
  assert.ok(generated < NUM_CLIENTS * 400 / 2, `generation stopped early (${generated} tokens)`);

  const health = await fetch(`${server.baseURL}/health`);
  assert.equal(health.status, 200);
  const r = await fetch(`${server.baseURL}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: server.model, prompt: 'Once upon a time', max_tokens: 8, ignore_eos: true }),
  });
  assert.equal(r.status, 200);
  assert.equal((await r.json()).usage.completion_tokens, 8);
  await sleep(50);
  await waitForIdle(server.baseURL);
});
