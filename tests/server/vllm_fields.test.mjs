// Suite: the vLLM request fields that change what comes back, through the openai npm client (the
// SDK passes unknown body fields through): prompt_logprobs in vLLM's shape, return_token_ids,
// return_tokens_as_token_ids, request_id (body and X-Request-Id), echo on chat, reasoning_effort
// reaching the chat template, and priority refused under fcfs. Each field is honoured or a 400
// naming it; src/server/openai/README.md lists them.
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import OpenAI from 'openai';
import { startServer } from './lib/harness.mjs';

const PROMPT = 'Once upon a time, there was a little girl';
let server;
let client;

before(async () => {
  server = await startServer(['--kv-cache-memory', '32M', '--trust-request-chat-template']);
  client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `SIGTERM exit\n${server.log().slice(-4000)}`);
});

async function detokenize(tokens) {
  const r = await fetch(`${server.baseURL}/detokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ tokens }),
  });
  return (await r.json()).prompt;
}

it('prompt_logprobs come back per choice: null first, then {id: {logprob, rank, decoded_token}}', async () => {
  const r = await client.completions.create({
    model: server.model, prompt: PROMPT, max_tokens: 2, temperature: 0, prompt_logprobs: 2,
    return_token_ids: true,
  });
  const choice = r.choices[0];
  const ids = choice.prompt_token_ids;
  assert.equal(ids.length, r.usage.prompt_tokens);
  const lps = choice.prompt_logprobs;
  assert.equal(lps.length, ids.length);
  assert.equal(lps[0], null);
  for (let i = 1; i < ids.length; ++i) {
    const entry = lps[i][String(ids[i])];
    assert.ok(entry, `prompt token ${ids[i]} at ${i}: ${JSON.stringify(lps[i])}`);
    assert.ok(entry.logprob <= 0 && entry.rank >= 1, JSON.stringify(entry));
    assert.equal(typeof entry.decoded_token, 'string');
    // The prompt token and up to 2 alternatives (fewer when the token is among them).
    const n = Object.keys(lps[i]).length;
    assert.ok(n >= 2 && n <= 3, JSON.stringify(lps[i]));
  }
  assert.equal(choice.token_ids.length, r.usage.completion_tokens);
  // Alone, the completion's first word loses its space (the tokenizer's prefix space).
  assert.equal(await detokenize(choice.token_ids), choice.text.trimStart());
});

it('return_token_ids on a streamed chat: the chunks add up to the whole answer', async () => {
  const body = { model: server.model, messages: [{ role: 'user', content: 'Tell a story.' }],
                 max_tokens: 12, temperature: 0, return_token_ids: true };
  const whole = await client.chat.completions.create(body);
  assert.equal(whole.choices[0].token_ids.length, whole.usage.completion_tokens);
  assert.equal(whole.prompt_token_ids.length, whole.usage.prompt_tokens);
  const stream = await client.chat.completions.create({ ...body, stream: true });
  const ids = [];
  let promptIds = null;
  for await (const chunk of stream) {
    if (chunk.prompt_token_ids) promptIds = chunk.prompt_token_ids;
    for (const c of chunk.choices) ids.push(...(c.token_ids ?? []));
  }
  assert.deepEqual(ids, whole.choices[0].token_ids);
  assert.deepEqual(promptIds, whole.prompt_token_ids);
});

it('return_tokens_as_token_ids spells logprob tokens token_id:<id>', async () => {
  const r = await client.chat.completions.create({
    model: server.model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4,
    temperature: 0, logprobs: true, top_logprobs: 2, return_tokens_as_token_ids: true,
    return_token_ids: true,
  });
  const content = r.choices[0].logprobs.content;
  assert.deepEqual(content.map((e) => e.token), r.choices[0].token_ids.map((id) => `token_id:${id}`));
  for (const e of content) for (const alt of e.top_logprobs) assert.match(alt.token, /^token_id:\d+$/);
});

it('request_id names the response; X-Request-Id wins over it', async () => {
  const r = await client.completions.create({
    model: server.model, prompt: PROMPT, max_tokens: 1, request_id: 'my-id-1',
  });
  assert.equal(r.id, 'cmpl-my-id-1');
  const c = await client.chat.completions.create(
    { model: server.model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 1,
      request_id: 'body-id' },
    { headers: { 'X-Request-Id': 'header-id' } });
  assert.equal(c.id, 'chatcmpl-header-id');
  // Two requests in flight may share a client's id.
  const same = await Promise.all([1, 2].map(() => client.completions.create({
    model: server.model, prompt: PROMPT, max_tokens: 4, request_id: 'shared' })));
  assert.deepEqual(same.map((x) => x.id), ['cmpl-shared', 'cmpl-shared']);
});

it('echo on chat repeats the last message when the answer continues it', async () => {
  const messages = [{ role: 'user', content: 'Tell a story.' },
                    { role: 'assistant', content: 'Once upon a time' }];
  const r = await client.chat.completions.create({
    model: server.model, messages, max_tokens: 6, temperature: 0, echo: true,
    add_generation_prompt: false, continue_final_message: true,
  });
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.startsWith('Once upon a time'), r.choices[0].message.content);
  const plain = await client.chat.completions.create({
    model: server.model, messages, max_tokens: 6, temperature: 0,
    add_generation_prompt: false, continue_final_message: true,
  });
  assert.equal(r.choices[0].message.content, `Once upon a time${plain.choices[0].message.content}`);
});

it('reasoning_effort reaches the chat template', async () => {
  const r = await client.chat.completions.create({
    model: server.model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 1,
    reasoning_effort: 'high', return_token_ids: true,
    chat_template: 'effort={{ reasoning_effort }} thinking={{ enable_thinking }}',
  });
  assert.equal(await detokenize(r.prompt_token_ids), 'effort=high thinking=True');
  await assert.rejects(
    client.chat.completions.create({
      model: server.model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 1,
      reasoning_effort: 'extreme',
    }),
    (e) => e.status === 400 && e.param === 'reasoning_effort');
});

it('priority needs --scheduling-policy priority; prompt_embeds are refused', async () => {
  await assert.rejects(
    client.completions.create({ model: server.model, prompt: PROMPT, max_tokens: 1, priority: 3 }),
    (e) => e.status === 400 && e.param === 'priority');
  const ok = await client.completions.create({
    model: server.model, prompt: PROMPT, max_tokens: 1, priority: 0 });
  assert.equal(ok.usage.completion_tokens, 1);
  await assert.rejects(
    client.completions.create({ model: server.model, prompt: PROMPT, max_tokens: 1,
                                prompt_embeds: 'AAAA' }),
    (e) => e.status === 400 && e.param === 'prompt_embeds');
});
