// Suite: beam search through the openai npm client (use_beam_search, length_penalty and
// early_stopping pass through the SDK as extra body fields) on both endpoints: n choices best
// first, equal to what the offline engine gives (`pagoda generate --use-beam-search --json`), stop
// strings with include_stop_str_in_output, streaming (every choice comes whole, at the end, as in
// vLLM), the 400s naming the field, and the KV cache empty afterwards (/metrics).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, it } from 'node:test';
import OpenAI from 'openai';
import { MODEL_DIR, PAGODA_BIN, metric, startServer, waitForIdle } from './lib/harness.mjs';

const PROMPT = 'Once upon a time';
let server;
let client;

before(async () => {
  server = await startServer(['--kv-cache-memory', '32M']);
  client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `SIGTERM exit\n${server.log().slice(-4000)}`);
});

async function post(path, body) {
  const r = await fetch(`${server.baseURL}${path}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

it('completions: n beams come back as n choices, best first, as the offline engine gives them', async () => {
  const r = await client.completions.create({
    model: server.model, prompt: PROMPT, n: 3, max_tokens: 10, use_beam_search: true,
    length_penalty: 1.0, early_stopping: false, return_token_ids: true,
  });
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  const texts = new Set(r.choices.map((c) => c.text));
  assert.equal(texts.size, 3, JSON.stringify(r.choices));
  // The same request through `pagoda generate` (the engine without the server).
  const out = execFileSync(PAGODA_BIN, [
    'generate', '--model', MODEL_DIR, '--prompt', PROMPT, '--max-tokens', '10',
    '--use-beam-search', '--beam-width', '3', '--json',
  ], { encoding: 'utf8' });
  const offline = JSON.parse(out.trim()).outputs;
  assert.equal(offline.length, 3);
  for (let i = 0; i < 3; ++i) {
    assert.deepEqual(r.choices[i].token_ids, offline[i].token_ids, `choice ${i}`);
    assert.equal(r.choices[i].text, offline[i].text);
  }
  for (let i = 1; i < 3; ++i) assert.ok(offline[i - 1].beam_score >= offline[i].beam_score);
  assert.equal(r.usage.completion_tokens,
               r.choices.reduce((s, c) => s + c.token_ids.length, 0));
});

it('chat: beams with a stop string, cut or kept by include_stop_str_in_output', async () => {
  const body = {
    model: server.model, messages: [{ role: 'user', content: 'Tell a story.' }], n: 2,
    max_tokens: 24, use_beam_search: true, stop: ['.'], length_penalty: 0.5,
    early_stopping: 'never',
  };
  const cut = await client.chat.completions.create(body);
  assert.equal(cut.choices.length, 2);
  const kept = await client.chat.completions.create({ ...body, include_stop_str_in_output: true });
  for (let i = 0; i < 2; ++i) {
    const a = cut.choices[i], b = kept.choices[i];
    assert.equal(a.message.role, 'assistant');
    assert.ok(!a.message.content.includes('.'), a.message.content);
    if (a.finish_reason === 'stop') {
      assert.equal(a.stop_reason, '.');
      assert.equal(b.message.content, `${a.message.content}.`);
    }
  }
});

it('streamed: each choice arrives whole with its finish_reason, then [DONE]', async () => {
  const stream = await client.completions.create({
    model: server.model, prompt: PROMPT, n: 2, max_tokens: 8, use_beam_search: true, stream: true,
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  const whole = await client.completions.create({
    model: server.model, prompt: PROMPT, n: 2, max_tokens: 8, use_beam_search: true,
  });
  const texts = ['', ''];
  for (const chunk of chunks) {
    for (const c of chunk.choices) {
      assert.ok(c.finish_reason, 'a beam choice comes in one chunk with its finish_reason');
      texts[c.index] += c.text;
    }
  }
  assert.deepEqual(texts, whole.choices.map((c) => c.text));
});

it('400s name the field: a sampling field beam search ignores, logprobs, a bad early_stopping, n', async () => {
  const cases = [
    [{ prompt: PROMPT, use_beam_search: true, top_p: 0.5 }, 'top_p'],
    [{ prompt: PROMPT, use_beam_search: true, logprobs: 2 }, 'logprobs'],
    [{ prompt: PROMPT, use_beam_search: true, early_stopping: 'sometimes' }, 'early_stopping'],
    [{ prompt: PROMPT, use_beam_search: true, length_penalty: 'long' }, 'length_penalty'],
    [{ prompt: PROMPT, use_beam_search: true, n: 0 }, 'n'],
    [{ prompt: PROMPT, use_beam_search: true, n: 1000 }, 'n'],
  ];
  for (const [body, param] of cases) {
    const r = await post('/v1/completions', { model: server.model, ...body });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.error.param, param, JSON.stringify(r.body));
  }
  const chat = await post('/v1/chat/completions', {
    model: server.model, messages: [{ role: 'user', content: 'Hi' }], use_beam_search: true,
    logprobs: true, top_logprobs: 2,
  });
  assert.equal(chat.status, 400);
  assert.equal(chat.body.error.param, 'logprobs');
  // Temperature is ignored, as in vLLM: the search is deterministic.
  const hot = await post('/v1/completions', {
    model: server.model, prompt: PROMPT, n: 2, max_tokens: 6, use_beam_search: true,
    temperature: 1.5,
  });
  const cold = await post('/v1/completions', {
    model: server.model, prompt: PROMPT, n: 2, max_tokens: 6, use_beam_search: true,
  });
  assert.deepEqual(hot.body.choices.map((c) => c.text), cold.body.choices.map((c) => c.text));
});

it('beam requests next to sampled ones all finish, and the KV cache is empty afterwards', async () => {
  const jobs = [];
  for (let i = 0; i < 8; ++i) {
    jobs.push(client.completions.create({
      model: server.model, prompt: `${PROMPT} ${i}`, n: 1 + (i % 4), max_tokens: 16,
      use_beam_search: true,
    }));
    jobs.push(client.completions.create({
      model: server.model, prompt: `${PROMPT} ${i}`, max_tokens: 16, temperature: 1,
    }));
  }
  const results = await Promise.all(jobs);
  for (let i = 0; i < 8; ++i) assert.equal(results[2 * i].choices.length, 1 + (i % 4));
  const m = await waitForIdle(server.baseURL);
  assert.equal(metric(m, 'pagoda:kv_cache_usage_perc'), 0);
});
