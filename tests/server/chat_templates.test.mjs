// Suite: chat templates are code, so the server guards them. A request's own chat_template is a
// 400 unless the server trusts them (--trust-request-chat-template); a render that does too much
// work (--chat-template-max-steps) or writes too much (--chat-template-max-output) is a 400 naming
// the limit; and renders run off the HTTP io threads, so /health answers while costly renders are
// queued. /tokenize, which renders chats too, needs the API key.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { startServer } from './lib/harness.mjs';

const KEY = 'templates-key';
const MESSAGES = [{ role: 'user', content: 'Hello' }];
// Under the default limits (1 million loop iterations, counting range's size; 10 million steps):
// about 8 steps per iteration, 1.6 million in all.
const SLOW = '{% for i in range(200000) %}{% set x = i * 2 + i * 3 %}{% endfor %}' +
  '{{ messages[0].content }}';

async function post(server, path, body, key = KEY) {
  const r = await fetch(`${server.baseURL}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` },
    body: JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

describe('untrusted (the default)', () => {
  let server;
  before(async () => { server = await startServer(['--api-key', KEY, '--kv-cache-memory', '16M']); });
  after(async () => { assert.deepEqual(await server.stop(), { code: 0, signal: null }); });

  it('refuses a request template on chat, in chat_template_kwargs and on /tokenize', async () => {
    const client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: KEY, maxRetries: 0 });
    await assert.rejects(
      client.chat.completions.create({
        model: server.model, messages: MESSAGES, max_tokens: 2, chat_template: '{{ "x" }}',
      }),
      (e) => e.status === 400 && e.param === 'chat_template' &&
        /--trust-request-chat-template/.test(e.message));
    await assert.rejects(
      client.chat.completions.create({
        model: server.model, messages: MESSAGES, max_tokens: 2,
        chat_template_kwargs: { chat_template: '{{ "x" }}' },
      }),
      (e) => e.status === 400 && e.param === 'chat_template_kwargs');
    const t = await post(server, '/tokenize', { messages: MESSAGES, chat_template: '{{ "x" }}' });
    assert.equal(t.status, 400);
    assert.equal(t.body.error.param, 'chat_template');
    // Without the key /tokenize runs no template at all.
    assert.equal((await post(server, '/tokenize', { messages: MESSAGES }, 'wrong')).status, 401);
    assert.equal((await post(server, '/tokenize', { messages: MESSAGES })).status, 200);
  });
});

describe('trusted, with bounds', () => {
  let server;
  let client;
  before(async () => {
    server = await startServer(['--api-key', KEY, '--kv-cache-memory', '16M',
      '--trust-request-chat-template', '--chat-template-max-output', '64K']);
    client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: KEY, maxRetries: 0 });
  });
  after(async () => { assert.deepEqual(await server.stop(), { code: 0, signal: null }); });

  it('renders a request template', async () => {
    const t = await post(server, '/tokenize', {
      messages: MESSAGES, chat_template: '{{ messages[0].content }} world', add_special_tokens: false,
    });
    assert.equal(t.status, 200);
    const d = await post(server, '/detokenize', { tokens: t.body.tokens });
    assert.equal(d.body.prompt, 'Hello world');
  });

  it('a render past the step limit is a 400 naming it', async () => {
    // 450000 iterations (under the loop limit) of about 100 steps each.
    const busy = `{% for i in range(450000) %}${'{{ "" }}'.repeat(50)}{% endfor %}`;
    await assert.rejects(
      client.chat.completions.create({
        model: server.model, messages: MESSAGES, max_tokens: 2, chat_template: busy,
      }),
      (e) => e.status === 400 && /10000000 evaluation steps/.test(e.message));
  });

  it('a render past the output limit is a 400 naming it', async () => {
    await assert.rejects(
      client.chat.completions.create({
        model: server.model, messages: MESSAGES, max_tokens: 2,
        chat_template: '{% for i in range(100000) %}0123456789{% endfor %}',
      }),
      (e) => e.status === 400 && /65536 bytes/.test(e.message));
  });

  it('/health answers while costly renders wait for the work queue', async () => {
    // More slow renders than request threads: /health answers before the first is done.
    const order = [];
    const renders = Array.from({ length: 4 }, (_, i) =>
      post(server, '/tokenize', { messages: MESSAGES, chat_template: SLOW }).then((r) => {
        assert.equal(r.status, 200, JSON.stringify(r.body));
        order.push(`render ${i}`);
      }));
    const health = await fetch(`${server.baseURL}/health`);
    assert.equal(health.status, 200);
    order.push('health');
    await Promise.all(renders);
    assert.equal(order[0], 'health', order.join(', '));
  });
});
