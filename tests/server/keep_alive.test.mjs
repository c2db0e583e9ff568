// Suite: kept-alive connections under a busy client. Node's fetch (undici, as the openai package
// uses it) retires an idle connection after 4 s on a coarse timer unless the server advertises
// its own idle timeout, and not at all while its event loop is busy (the load suite's client
// stalls for seconds while it builds 500 requests). A server that closed idle connections at 5 s,
// unannounced, raced it: the client sent its request on a connection that was already closed
// ("other side closed", the load suite's flake). Answers now say `Keep-Alive: timeout=N`, and the
// server keeps an idle connection a minute past N.
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { sleep, startServer } from './lib/harness.mjs';

const KEEP_ALIVE_S = 4;
const CONNECTIONS = 8;
let server;

before(async () => {
  server = await startServer(['--keep-alive-timeout', String(KEEP_ALIVE_S)]);
});

after(async () => {
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `SIGTERM exit\n${server.log().slice(-4000)}`);
});

/** Blocks the event loop (timers, sockets) for `ms`, as a client busy with other work does. */
function busy(ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) { /* spin */ }
}

it('a busy client never sends on an idle connection the server has closed', async () => {
  // Open several kept-alive connections at once.
  const first = await Promise.all(Array.from({ length: CONNECTIONS }, () =>
    fetch(`${server.baseURL}/health`)));
  for (const r of first) {
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('keep-alive'), `timeout=${KEEP_ALIVE_S}`);
    await r.arrayBuffer();
  }
  // Idle until shortly before N (the client's own 4 s default timer has not fired yet), then
  // stall across it: a server that closed idle connections at N has closed them when the
  // requests go out on them.
  await sleep(KEEP_ALIVE_S * 1000 - 200);
  busy(1500);
  const second = await Promise.allSettled(Array.from({ length: CONNECTIONS }, () =>
    fetch(`${server.baseURL}/v1/models`).then(async (r) => {
      await r.arrayBuffer();
      return r.status;
    })));
  const failures = second.filter((s) => s.status !== 'fulfilled' || s.value !== 200)
    .map((s) => (s.status === 'fulfilled' ? `HTTP ${s.value}` : s.reason?.cause?.message ?? String(s.reason)));
  assert.deepEqual(failures, [], 'every request is answered');
});
