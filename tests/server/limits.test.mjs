// Suite: limits with clear errors and HTTP details, end to end through `pagoda serve`'s flags:
// --max-connections (503 past it), --max-prompts-per-request and --max-sequences-per-request
// (400 naming the field), a request without Host (400), a compressed body (415), and /v1/ paths
// without a route answering 401 before 404 when an API key is set.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, it } from 'node:test';
import OpenAI from 'openai';
import { startServer, waitFor } from './lib/harness.mjs';

const KEY = 'limits-key';
let server;
let client;

before(async () => {
  server = await startServer(['--api-key', KEY, '--kv-cache-memory', '32M', '--max-connections', '16',
    '--max-prompts-per-request', '3', '--max-sequences-per-request', '6']);
  client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: KEY, maxRetries: 0 });
});

after(async () => {
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `SIGTERM exit\n${server.log().slice(-4000)}`);
});

/** Opens a raw connection, writes `bytes`, and resolves to everything read until the close. */
function raw(bytes) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(server.port, '127.0.0.1', () => socket.write(bytes));
    let text = '';
    socket.on('data', (d) => { text += d.toString(); });
    socket.on('end', () => { socket.end(); resolve(text); });
    socket.on('error', reject);
  });
}

/** Opens a kept-alive connection and sends one request on it: resolves to the socket and the
 * first bytes of the answer. */
function connection() {
  return new Promise((resolve, reject) => {
    const socket = net.connect(server.port, '127.0.0.1', () =>
      socket.write('GET /health HTTP/1.1\r\nHost: a\r\n\r\n'));
    socket.once('data', (d) => resolve({ socket, answer: d.toString() }));
    socket.on('error', reject);
  });
}

it('prompts and sequences per request are bounded, naming the field', async () => {
  const ok = await client.completions.create({
    model: server.model, prompt: ['a', 'b', 'c'], n: 2, max_tokens: 2,
  });
  assert.equal(ok.choices.length, 6);
  await assert.rejects(client.completions.create({
    model: server.model, prompt: ['a', 'b', 'c', 'd'], max_tokens: 2,
  }), (e) => e.status === 400 && e.param === 'prompt' && /4 prompts/.test(e.message));
  await assert.rejects(client.completions.create({
    model: server.model, prompt: ['a', 'b'], n: 4, max_tokens: 2,
  }), (e) => e.status === 400 && e.param === 'n' && /8 sequences/.test(e.message));
});

it('a request without Host is a 400, a compressed body a 415', async () => {
  const noHost = await raw('GET /health HTTP/1.1\r\n\r\n');
  assert.match(noHost, /^HTTP\/1.1 400 /);
  assert.match(noHost, /no Host header/);
  const r = await fetch(`${server.baseURL}/v1/completions`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json', 'Content-Encoding': 'gzip' },
    body: '{"prompt": "hi"}',
  });
  assert.equal(r.status, 415);
  assert.equal(r.headers.get('accept-encoding'), 'identity');
  assert.match((await r.json()).error.message, /Content-Encoding gzip/);
});

it('unknown /v1/ paths answer 401 before 404', async () => {
  assert.equal((await fetch(`${server.baseURL}/v1/nothing-here`)).status, 401);
  assert.equal((await fetch(`${server.baseURL}/v1/nothing-here`, {
    headers: { Authorization: `Bearer ${KEY}` },
  })).status, 404);
  assert.equal((await fetch(`${server.baseURL}/nothing-here`)).status, 404);
});

it('past --max-connections a new connection is answered 503, and served again after', async () => {
  // Open connections until one is refused (fetch's own idle connections count too).
  const held = [];
  try {
    for (;;) {
      const { socket, answer } = await connection();
      held.push(socket);
      if (answer.startsWith('HTTP/1.1 503')) {
        assert.match(answer, /Retry-After: 1/);
        assert.match(answer, /limit of 16 open connections/);
        break;
      }
      assert.match(answer, /^HTTP\/1.1 200/);
      assert.ok(held.length <= 16, 'the seventeenth connection is refused');
    }
  } finally {
    for (const s of held) s.destroy();
  }
  await waitFor(async () => (await raw('GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n'))
    .startsWith('HTTP/1.1 200'), { what: 'a connection served again' });
});
