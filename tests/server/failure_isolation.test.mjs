// Suite: one request's trouble stays its own. n = 2 with one token to generate (max_tokens 1 on
// completions; max_tokens and max_completion_tokens 1 on chat) once failed with a 500 and aborted
// every request in flight. Here such requests arrive while 30 streamed chats are mid-way: each gets
// its two choices, and every stream still finishes with its full text and usage, no abort counted.
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import OpenAI from 'openai';
import { metric, readMetrics, startServer, waitForFinished } from './lib/harness.mjs';

const NUM_STREAMS = 30;
const STREAM_TOKENS = 48;
let server;
let client;

before(async () => {
  server = await startServer(['--kv-cache-memory', '64M']);
  client = new OpenAI({
    baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000,
  });
});

after(async () => {
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `SIGTERM exit\n${server.log().slice(-4000)}`);
});

/** Starts a streamed chat; resolves `started` at its first content chunk, `done` at its end. */
function startStream(i) {
  let markStarted;
  const started = new Promise((resolve) => { markStarted = resolve; });
  const done = (async () => {
    try {
      return await readStream(i, markStarted);
    } finally {
      markStarted();
    }
  })();
  return { started, done };
}

async function readStream(i, markStarted) {
  const stream = await client.chat.completions.create({
    model: server.model,
    messages: [{ role: 'user', content: `Tell story ${i}.` }],
    max_tokens: STREAM_TOKENS, ignore_eos: true, temperature: 0.7, seed: i,
    stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.content) {
        text += c.delta.content;
        markStarted();
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage };
}

function assertTwoOneTokenChoices(r, what) {
  assert.equal(r.choices.length, 2, `${what}: two choices`);
  assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1], `${what}: indices`);
  for (const c of r.choices) assert.equal(c.finish_reason, 'length', `${what}: finish_reason`);
  assert.equal(r.usage.completion_tokens, 2, `${what}: one token per choice`);
}

it('n=2 with one token answers two choices while streams in flight finish untouched', async () => {
  const before = await readMetrics(server.baseURL);
  const streams = Array.from({ length: NUM_STREAMS }, (_, i) => startStream(i));
  await Promise.all(streams.map((s) => s.started));

  const messages = [{ role: 'user', content: 'hi' }];
  const [completion, chat, chatMct] = await Promise.all([
    client.completions.create({ model: server.model, prompt: 'hi', n: 2, max_tokens: 1 }),
    client.chat.completions.create({ model: server.model, messages, n: 2, max_tokens: 1 }),
    client.chat.completions.create({
      model: server.model, messages, n: 2, max_completion_tokens: 1,
    }),
  ]);
  assertTwoOneTokenChoices(completion, 'completions');
  assertTwoOneTokenChoices(chat, 'chat max_tokens');
  assertTwoOneTokenChoices(chatMct, 'chat max_completion_tokens');

  const results = await Promise.all(streams.map((s) => s.done));
  for (const [i, r] of results.entries()) {
    assert.equal(r.finish, 'length', `stream ${i}: finish_reason`);
    assert.ok(r.usage, `stream ${i}: usage`);
    assert.equal(r.usage.completion_tokens, STREAM_TOKENS, `stream ${i}: completion_tokens`);
    assert.ok(r.text.length > 0, `stream ${i}: text`);
  }
  const idle = await waitForFinished(server.baseURL, before, NUM_STREAMS + 3);
  assert.equal(metric(idle, 'pagoda:request_success_total', { finished_reason: 'abort' }) -
    metric(before, 'pagoda:request_success_total', { finished_reason: 'abort' }), 0, 'no aborts');
  assert.equal(metric(idle, 'pagoda:kv_cache_usage_perc'), 0);
});
