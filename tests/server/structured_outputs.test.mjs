// Suite: structured outputs with the official `openai` npm package against `pagoda serve` on
// stories260K (CPU): `chat.completions.parse` with zod schemas (response_format and forced tool
// calls), vLLM's structured_outputs / guided_* fields on both endpoints, streaming, n > 1,
// logprobs, and the 400s. stories260K writes whitespace forever where JSON allows any, so JSON
// requests ask for none (structured_outputs.disable_any_whitespace, vLLM's option); greedy
// decoding keeps the answers reproducible. To add a case, add an it() using `client`.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { zodFunction, zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { startServer } from './lib/harness.mjs';

const COMPACT = { structured_outputs: { disable_any_whitespace: true } };
const Person = z.object({
  name: z.string().max(8),
  age: z.number().int().min(0).max(120),
  pet: z.enum(['cat', 'dog']),
});
const MESSAGES = [{ role: 'user', content: 'Tell me about a person.' }];

describe('structured outputs', () => {
  let server;
  let client;

  before(async () => {
    server = await startServer(['--kv-cache-memory', '64M']);
    client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    const status = await server.stop();
    assert.equal(status.code, 0, server.log());
  });

  it('chat.completions.parse returns the zod-validated object', async () => {
    const completion = await client.chat.completions.parse({
      model: server.model,
      messages: MESSAGES,
      response_format: zodResponseFormat(Person, 'person'),
      temperature: 0,
      max_tokens: 120,
      ...COMPACT,
    });
    const choice = completion.choices[0];
    assert.equal(choice.finish_reason, 'stop');
    const parsed = choice.message.parsed;
    assert.ok(parsed, choice.message.content);
    assert.deepEqual(Person.parse(parsed), parsed);
    assert.deepEqual(JSON.parse(choice.message.content), parsed);
  });

  it('sampled answers with n > 1 and a seed all follow the schema when they stop', async () => {
    const completion = await client.chat.completions.create({
      model: server.model,
      messages: MESSAGES,
      response_format: zodResponseFormat(Person, 'person'),
      temperature: 1,
      seed: 7,
      n: 4,
      max_tokens: 150,
      logprobs: true,
      top_logprobs: 2,
      ...COMPACT,
    });
    assert.equal(completion.choices.length, 4);
    let stopped = 0;
    for (const choice of completion.choices) {
      assert.ok(choice.logprobs.content.length > 0);
      if (choice.finish_reason !== 'stop') continue;
      ++stopped;
      const result = Person.safeParse(JSON.parse(choice.message.content));
      assert.ok(result.success, choice.message.content);
    }
    assert.ok(stopped >= 1);
  });

  it('streamed and whole answers agree', async () => {
    const body = {
      model: server.model,
      messages: MESSAGES,
      response_format: zodResponseFormat(Person, 'person'),
      temperature: 0,
      max_tokens: 120,
      ...COMPACT,
    };
    const whole = await client.chat.completions.create(body);
    const stream = await client.chat.completions.create({ ...body, stream: true });
    let text = '';
    let finish = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(text, whole.choices[0].message.content);
    assert.equal(finish, 'stop');
    Person.parse(JSON.parse(text));
  });

  it('a named tool_choice returns a tool call parse() reads with the zod parameters', async () => {
    const completion = await client.chat.completions.parse({
      model: server.model,
      messages: [{ role: 'user', content: 'What is the weather?' }],
      tools: [zodFunction({ name: 'get_weather', parameters: z.object({ city: z.string().max(10) }) })],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      temperature: 0,
      max_tokens: 60,
      ...COMPACT,
    });
    const message = completion.choices[0].message;
    assert.equal(message.tool_calls.length, 1);
    assert.equal(message.tool_calls[0].function.name, 'get_weather');
    assert.equal(typeof message.tool_calls[0].function.parsed_arguments.city, 'string');
  });

  it('tool_choice required returns tool calls, whole and streamed', async () => {
    const body = {
      model: server.model,
      messages: [{ role: 'user', content: 'What is the weather?' }],
      tools: [{
        type: 'function',
        function: {
          name: 'get_weather',
          parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 10 } },
                        required: ['city'] },
        },
      }],
      tool_choice: 'required',
      parallel_tool_calls: false,
      temperature: 0,
      max_tokens: 80,
      ...COMPACT,
    };
    const whole = await client.chat.completions.create(body);
    const choice = whole.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    const args = JSON.parse(choice.message.tool_calls[0].function.arguments);
    assert.equal(typeof args.city, 'string');
    const stream = await client.chat.completions.create({ ...body, stream: true });
    const calls = [];
    let finish = null;
    for await (const chunk of stream) {
      calls.push(...(chunk.choices[0]?.delta?.tool_calls ?? []));
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].function.arguments, choice.message.tool_calls[0].function.arguments);
  });

  it('vLLM fields on /v1/completions: choice, regex, grammar, json_object', async () => {
    const cases = [
      [{ guided_choice: ['yes', 'no'] }, (t) => t === 'yes' || t === 'no'],
      [{ structured_outputs: { choice: ['red', 'green'] } }, (t) => t === 'red' || t === 'green'],
      [{ guided_regex: '[a-z]{2,5}@(example|test)\\.com' },
       (t) => /^[a-z]{2,5}@(example|test)\.com$/.test(t)],
      [{ structured_outputs: { grammar: 'root ::= [1-9] [0-9]? ("+" [1-9])?' } },
       (t) => /^[1-9][0-9]?(\+[1-9])?$/.test(t)],
      [{ guided_json: { type: 'object', properties: { ok: { type: 'boolean' },
                                                       n: { type: 'integer', minimum: 1, maximum: 9 } },
                        required: ['ok', 'n'] }, ...COMPACT },
       (t) => /^\{"ok": (true|false), "n": [1-9]\}$/.test(t)],
    ];
    for (const [fields, valid] of cases) {
      const r = await client.completions.create({
        model: server.model, prompt: 'Once upon a time', temperature: 0, max_tokens: 100, ...fields,
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'stop', `${JSON.stringify(fields)}: ${c.text}`);
      assert.ok(valid(c.text), `${JSON.stringify(fields)}: ${c.text}`);
    }
  });

  it('json_object gives a JSON object (or its beginning when max_tokens cuts it)', async () => {
    const r = await client.completions.create({
      model: server.model, prompt: 'Once upon a time', temperature: 0, max_tokens: 60,
      response_format: { type: 'json_object' }, ...COMPACT,
    });
    const c = r.choices[0];
    assert.ok(c.text.startsWith('{'), c.text);
    if (c.finish_reason === 'stop') assert.equal(typeof JSON.parse(c.text), 'object');
  });

  it('bad constraints are 400s naming the field and the position', async () => {
    const bad = async (body) => {
      const e = await client.chat.completions.create({
        model: server.model, messages: MESSAGES, max_tokens: 4, ...body,
      }).catch((err) => err);
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      return e;
    };
    let e = await bad({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {
      type: 'object', properties: { a: { type: 'string', format: 'hostname' } } } } } });
    assert.equal(e.param, 'response_format');
    assert.match(e.message, /at \/properties\/a\/format: unsupported string format 'hostname'/);
    e = await bad({ guided_grammar: 'root ::= x' });
    assert.equal(e.param, 'guided_grammar');
    assert.match(e.message, /line 1, column 10: undefined rule 'x'/);
    e = await bad({ guided_regex: 'a', guided_choice: ['b'] });
    assert.equal(e.param, 'guided_choice');
  });
});
