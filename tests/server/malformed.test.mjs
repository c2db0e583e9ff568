// Suite 4: replays tests/server/malformed_requests.json (owned by the protocol layer) against the
// live server: each request gets its listed status (and param / message when listed), and the
// server stays healthy throughout. New cases go into the JSON file, not here.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, it } from 'node:test';
import { startServer, waitForIdle } from './lib/harness.mjs';

const corpus = JSON.parse(readFileSync(new URL('./malformed_requests.json', import.meta.url), 'utf8'));
let server;

before(async () => {
  // Some cases bring their own chat template, which needs --trust-request-chat-template.
  server = await startServer(['--kv-cache-memory', '64M', '--trust-request-chat-template']);
});

after(async () => {
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `SIGTERM exit\n${server.log().slice(-4000)}`);
});

it('the corpus has at least 50 cases', () => {
  assert.ok(corpus.length >= 50, `${corpus.length} cases`);
});

for (const c of corpus) {
  it(`${c.name} -> ${c.status}`, async () => {
    const body = c.body_base64 !== undefined ? Buffer.from(c.body_base64, 'base64') : c.body;
    const r = await fetch(`${server.baseURL}${c.path}`, {
      method: c.method,
      headers: { 'Content-Type': 'application/json' },
      body: c.method === 'GET' ? undefined : body,
    });
    const text = await r.text();
    assert.equal(r.status, c.status, `${c.name}: body ${text.slice(0, 300)}`);
    let json;
    assert.doesNotThrow(() => { json = JSON.parse(text); }, `${c.name}: error body is JSON`);
    assert.equal(typeof json.error?.message, 'string', `${c.name}: error.message`);
    assert.equal(json.error.code, c.status, `${c.name}: error.code`);
    if (c.param !== undefined && c.param !== null) {
      assert.equal(json.error.param, c.param, `${c.name}: error.param (${json.error.message})`);
    }
    if (c.message_contains) {
      assert.ok(json.error.message.includes(c.message_contains),
        `${c.name}: message ${JSON.stringify(json.error.message)} lacks ${JSON.stringify(c.message_contains)}`);
    }
  });
}

it('stays healthy and answers a good request after the corpus', async () => {
  assert.equal((await fetch(`${server.baseURL}/health`)).status, 200);
  const r = await fetch(`${server.baseURL}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 4, ignore_eos: true }),
  });
  assert.equal(r.status, 200);
  assert.equal((await r.json()).usage.completion_tokens, 4);
  await waitForIdle(server.baseURL);
});
