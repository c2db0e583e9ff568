// Suite 1: the official `openai` npm package against `pagoda serve` (stories260K on CPU):
// completions and chat, streaming and not, n=2, stop strings, logprobs, usage, stream_options,
// token-id prompts, and the errors as the SDK surfaces them. To add a case, add an it() that uses
// `client` (the server is shared) and compare against a non-streamed or greedy reference.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { counts, startServer, waitForIdle } from './lib/harness.mjs';

const PROMPT = 'Once upon a time, there was a little girl';
let server;
let client;

before(async () => {
  server = await startServer(['--kv-cache-memory', '64M']);
  client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `SIGTERM exit\n${server.log().slice(-4000)}`);
});

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

describe('models', () => {
  it('lists the served model', async () => {
    const models = await client.models.list();
    const ids = models.data.map((m) => m.id);
    assert.ok(ids.includes(server.model), `${server.model} in ${ids}`);
    assert.equal(models.data[0].object, 'model');
  });

  it('retrieves the served model by its id (a path with a slash), and 404s another', async () => {
    // The served name is the model directory, so it holds slashes: the SDK percent-encodes them.
    assert.ok(server.model.includes('/'), server.model);
    const model = await client.models.retrieve(server.model);
    assert.equal(model.id, server.model);
    assert.equal(model.object, 'model');
    await assert.rejects(client.models.retrieve('no-such-model'), (e) => e.status === 404);
  });

  it('answers /ping (GET and POST) as /health', async () => {
    for (const method of ['GET', 'POST']) {
      assert.equal((await fetch(`${server.baseURL}/ping`, { method })).status, 200, method);
    }
  });
});

describe('completions', () => {
  it('honours vLLM\'s allowed_token_ids (an extra body field)', async () => {
    const r = await client.completions.create({
      model: server.model, prompt: [1, 400, 401], max_tokens: 8, temperature: 1, seed: 5,
      allowed_token_ids: [300, 301], logprobs: 0, ignore_eos: true,
    });
    assert.equal(r.usage.completion_tokens, 8);
    // The tokens' text, through /detokenize, is made of the two allowed ids only.
    const one = async (ids) => (await (await fetch(`${server.baseURL}/detokenize`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ tokens: ids }),
    })).json()).prompt;
    // (A lone token decodes without the leading space it has inside a text.)
    const pieces = [(await one([300])).trim(), (await one([301])).trim()];
    for (const t of r.choices[0].logprobs.tokens) {
      assert.ok(pieces.includes(t.trim()), `${JSON.stringify(t)} not in ${JSON.stringify(pieces)}`);
    }
  });

  it('honours vLLM\'s bad_words (an extra body field)', async () => {
    const args = { model: server.model, prompt: PROMPT, max_tokens: 32, temperature: 0 };
    const plain = (await client.completions.create(args)).choices[0].text;
    const word = plain.trim().split(/\s+/)[0];
    const banned = (await client.completions.create({ ...args, bad_words: [word] })).choices[0].text;
    assert.ok(!banned.includes(word), `${JSON.stringify(word)} in ${JSON.stringify(banned)}`);
  });

  it('answers a text prompt with usage', async () => {
    const r = await client.completions.create({
      model: server.model, prompt: PROMPT, max_tokens: 16, temperature: 0, ignore_eos: true,
    });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.model, server.model);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].index, 0);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.ok(r.choices[0].text.length > 0);
    assert.equal(r.usage.completion_tokens, 16);
    assert.ok(r.usage.prompt_tokens > 5);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  });

  it('streams the same text as the non-streamed answer, usage last', async () => {
    const params = { model: server.model, prompt: PROMPT, max_tokens: 24, temperature: 0 };
    const whole = await client.completions.create(params);
    const chunks = await collect(await client.completions.create({
      ...params, stream: true, stream_options: { include_usage: true },
    }));
    const withChoices = chunks.filter((c) => c.choices.length > 0);
    assert.equal(withChoices.map((c) => c.choices[0].text).join(''), whole.choices[0].text);
    assert.equal(withChoices.at(-1).choices[0].finish_reason, whole.choices[0].finish_reason);
    for (const c of withChoices.slice(0, -1)) assert.equal(c.choices[0].finish_reason, null);
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.deepEqual(counts(last.usage), counts(whole.usage));
    for (const c of chunks.slice(0, -1)) assert.ok(!c.usage, 'usage only on the last chunk');
    assert.ok(chunks.every((c) => c.id === chunks[0].id), 'one id for the stream');
  });

  it('streams without usage when stream_options does not ask for it', async () => {
    const chunks = await collect(await client.completions.create({
      model: server.model, prompt: PROMPT, max_tokens: 4, stream: true,
    }));
    assert.ok(chunks.length >= 1);
    assert.ok(chunks.every((c) => !c.usage), 'no usage without include_usage');
  });

  it('puts usage in every chunk with continuous_usage_stats (vLLM extension)', async () => {
    const base = { model: server.model, max_tokens: 6, ignore_eos: true, temperature: 0 };
    const completion = await collect(await client.completions.create({
      ...base, prompt: PROMPT, stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
    }));
    const chat = await collect(await client.chat.completions.create({
      ...base, messages: [{ role: 'user', content: PROMPT }], stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
    }));
    for (const chunks of [completion, chat]) {
      assert.ok(chunks.every((c) => c.usage), 'usage in every chunk');
      const seen = chunks.map((c) => c.usage.completion_tokens);
      assert.deepEqual(seen, [...seen].sort((a, b) => a - b), 'completion_tokens never decreases');
      assert.equal(chunks.at(-1).usage.completion_tokens, 6);
      assert.ok(chunks.every((c) => c.usage.prompt_tokens === chunks.at(-1).usage.prompt_tokens));
    }
    // Without include_usage the extension asks for nothing.
    const plain = await collect(await client.completions.create({
      ...base, prompt: PROMPT, stream: true, stream_options: { continuous_usage_stats: true },
    }));
    assert.ok(plain.every((c) => !c.usage));
  });

  it('takes token ids as the prompt', async () => {
    const ids = [1, 400, 261, 352, 267, 265, 300];
    const r = await client.completions.create({
      model: server.model, prompt: ids, max_tokens: 8, temperature: 0, ignore_eos: true,
    });
    assert.equal(r.usage.prompt_tokens, ids.length);
    assert.equal(r.usage.completion_tokens, 8);
    const batch = await client.completions.create({
      model: server.model, prompt: [ids, ids.slice(0, 3)], max_tokens: 4, temperature: 0,
      ignore_eos: true,
    });
    assert.deepEqual(batch.choices.map((c) => c.index), [0, 1]);
    assert.ok(r.choices[0].text.startsWith(batch.choices[0].text), 'greedy: 4 tokens prefix 8');
    assert.equal(batch.usage.prompt_tokens, ids.length + 3);
    assert.equal(batch.usage.completion_tokens, 8);
  });

  it('returns n=2 completions, streamed or not', async () => {
    const params = {
      model: server.model, prompt: PROMPT, max_tokens: 8, n: 2, temperature: 1, seed: 7,
      ignore_eos: true, logprobs: 0,
    };
    const r = await client.completions.create(params);
    assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1]);
    for (const c of r.choices) assert.equal(c.logprobs.tokens.length, 8);
    assert.equal(r.usage.completion_tokens, 16);
    const chunks = await collect(await client.completions.create({
      ...params, stream: true, stream_options: { include_usage: true },
    }));
    const texts = ['', ''];
    const finished = [null, null];
    for (const c of chunks) {
      for (const ch of c.choices) {
        texts[ch.index] += ch.text;
        if (ch.finish_reason) finished[ch.index] = ch.finish_reason;
      }
    }
    assert.deepEqual(finished, ['length', 'length']);
    const byIndex = Object.fromEntries(r.choices.map((c) => [c.index, c.text]));
    assert.deepEqual(texts, [byIndex[0], byIndex[1]], 'same seed, same texts');
    assert.equal(chunks.at(-1).usage.completion_tokens, 16);
  });

  it('stops at a stop string, streamed or not', async () => {
    const base = { model: server.model, prompt: PROMPT, max_tokens: 48, temperature: 0 };
    const free = (await client.completions.create({ ...base, ignore_eos: true })).choices[0].text;
    // A stop string taken from the middle of the greedy text: the answer ends just before it.
    const words = free.split(' ').filter((w) => w.length >= 3);
    assert.ok(words.length >= 3, `greedy text has words: ${JSON.stringify(free)}`);
    const stop = words[Math.floor(words.length / 2)];
    const expected = free.slice(0, free.indexOf(stop));
    const r = await client.completions.create({ ...base, ignore_eos: true, stop: [stop, 'zzzzzz'] });
    assert.equal(r.choices[0].text, expected);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const chunks = await collect(await client.completions.create({
      ...base, ignore_eos: true, stop, stream: true,
    }));
    assert.equal(chunks.map((c) => c.choices[0]?.text ?? '').join(''), expected);
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop');
  });

  it('reports logprobs of the sampled and top tokens', async () => {
    const r = await client.completions.create({
      model: server.model, prompt: PROMPT, max_tokens: 6, temperature: 0, logprobs: 3,
      ignore_eos: true,
    });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 6);
    assert.equal(lp.token_logprobs.length, 6);
    assert.equal(lp.top_logprobs.length, 6);
    assert.equal(lp.text_offset.length, 6);
    assert.equal(lp.tokens.join(''), r.choices[0].text);
    for (let i = 0; i < 6; ++i) {
      assert.ok(lp.token_logprobs[i] <= 0);
      const top = Object.values(lp.top_logprobs[i]);
      assert.ok(top.length >= 3 && top.length <= 4, `top ${top.length}`);
      // Greedy: the sampled token is the most likely one.
      assert.ok(Math.abs(Math.max(...top) - lp.token_logprobs[i]) < 1e-4);
    }
  });
});

describe('chat', () => {
  const messages = [{ role: 'user', content: 'Tell me a story about a cat.' }];

  it('answers and streams the same message', async () => {
    const params = { model: server.model, messages, max_tokens: 20, temperature: 0 };
    const r = await client.chat.completions.create(params);
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    const chunks = await collect(await client.chat.completions.create({
      ...params, stream: true, stream_options: { include_usage: true },
    }));
    assert.equal(chunks[0].object, 'chat.completion.chunk');
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    assert.equal(text, r.choices[0].message.content);
    assert.deepEqual(counts(chunks.at(-1).usage), counts(r.usage));
  });

  it('returns n=2 choices with the tokens counted', async () => {
    const r = await client.chat.completions.create({
      model: server.model, messages, max_tokens: 6, n: 2, seed: 3, temperature: 1,
      ignore_eos: true,
    });
    assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1]);
    assert.equal(r.usage.completion_tokens, 12);
  });

  it('reports logprobs with top_logprobs', async () => {
    const r = await client.chat.completions.create({
      model: server.model, messages, max_tokens: 5, temperature: 0, logprobs: true,
      top_logprobs: 2, ignore_eos: true,
    });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 5);
    assert.equal(content.map((t) => t.token).join(''), r.choices[0].message.content);
    for (const t of content) {
      assert.ok(t.logprob <= 0);
      assert.ok(Array.isArray(t.bytes));
      assert.equal(t.top_logprobs.length, 2);
      assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
    }
  });

  it('stops at a stop string', async () => {
    const base = { model: server.model, messages, max_tokens: 40, temperature: 0, ignore_eos: true };
    const free = (await client.chat.completions.create(base)).choices[0].message.content;
    const words = free.split(' ').filter((w) => w.length >= 3);
    assert.ok(words.length >= 3, `greedy text has words: ${JSON.stringify(free)}`);
    const stop = words[Math.floor(words.length / 2)];
    const r = await client.chat.completions.create({ ...base, stop });
    assert.equal(r.choices[0].message.content, free.slice(0, free.indexOf(stop)));
    assert.equal(r.choices[0].finish_reason, 'stop');
  });
});

describe('errors as the SDK surfaces them', () => {
  it('400 BadRequestError for an invalid parameter, with its param', async () => {
    await assert.rejects(
      client.completions.create({ model: server.model, prompt: PROMPT, temperature: -1 }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature');
    await assert.rejects(
      client.chat.completions.create({ model: server.model, messages: [], max_tokens: 4 }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
  });

  it('400 before any stream starts', async () => {
    await assert.rejects(
      client.completions.create({ model: server.model, prompt: PROMPT, n: 0, stream: true }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
  });

  it('400 past the context length', async () => {
    await assert.rejects(
      client.completions.create({ model: server.model, prompt: PROMPT, max_tokens: 100000 }),
      (e) => e instanceof OpenAI.BadRequestError && /maximum context length/.test(e.message));
  });

  it('404 NotFoundError for an unknown model', async () => {
    await assert.rejects(
      client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] }),
      (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.param === 'model');
  });

  it('leaves the engine idle', async () => {
    await waitForIdle(server.baseURL);
  });
});

describe('authentication', () => {
  it('401 AuthenticationError without the key, answers with it', async () => {
    const guarded = await startServer(['--api-key', 'sekret', '--kv-cache-memory', '16M']);
    try {
      const wrong = new OpenAI({ baseURL: `${guarded.baseURL}/v1`, apiKey: 'nope', maxRetries: 0 });
      await assert.rejects(
        wrong.completions.create({ model: guarded.model, prompt: 'a', max_tokens: 1 }),
        (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
      const right = new OpenAI({ baseURL: `${guarded.baseURL}/v1`, apiKey: 'sekret', maxRetries: 0 });
      const r = await right.completions.create({ model: guarded.model, prompt: 'a', max_tokens: 2 });
      assert.ok(r.usage.completion_tokens >= 1);
    } finally {
      assert.deepEqual(await guarded.stop(), { code: 0, signal: null });
    }
  });
});
