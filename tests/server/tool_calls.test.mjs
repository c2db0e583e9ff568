// Suite: tool calling flags (`--enable-auto-tool-choice --tool-call-parser NAME`, vLLM's names)
// with the official `openai` npm package. stories260K cannot write a tool call, so requests with
// tools and tool_choice "auto" come back as content here (forced calls are constrained:
// structured_outputs.test.mjs); the parsing itself is covered by the C++ unit tests
// (tests/unit/server/openai/tool_parser_test.cc, chat_tool_calls_test.cc). To add a case, add an
// it() using `client`, or a flag combination to the start-up table.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { MODEL_DIR, PAGODA_BIN, startServer } from './lib/harness.mjs';

const TOOLS = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const MESSAGES = [{ role: 'user', content: 'Once upon a time, what was the weather?' }];

/** Runs `pagoda serve MODEL_DIR ...args` to its exit; resolves to { code, output }. */
function serveToExit(args, timeoutMs = 30000) {
  return new Promise((resolve) => {
    const proc = spawn(PAGODA_BIN, ['serve', MODEL_DIR, '--host', '127.0.0.1', '--port', '0',
                                    '--device', 'cpu', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    proc.stdout.on('data', (c) => { output += c; });
    proc.stderr.on('data', (c) => { output += c; });
    const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
    proc.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, output });
    });
  });
}

describe('start-up flags', () => {
  it('--enable-auto-tool-choice without a parser is an error naming the flag', async () => {
    const r = await serveToExit(['--enable-auto-tool-choice']);
    assert.equal(r.code, 2, r.output);
    assert.match(r.output, /--enable-auto-tool-choice requires --tool-call-parser/);
  });

  it('an unknown parser is an error listing the known ones', async () => {
    const r = await serveToExit(['--enable-auto-tool-choice', '--tool-call-parser', 'nope']);
    assert.equal(r.code, 2, r.output);
    assert.match(r.output, /invalid tool call parser: 'nope'/);
    assert.match(r.output, /hermes, llama3_json, mistral/);
  });
});

describe('--enable-auto-tool-choice --tool-call-parser hermes', () => {
  let server;
  let client;

  before(async () => {
    server = await startServer(['--kv-cache-memory', '64M', '--enable-auto-tool-choice',
                                '--tool-call-parser', 'hermes']);
    client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    const status = await server.stop();
    assert.deepEqual(status, { code: 0, signal: null }, `SIGTERM exit\n${server.log().slice(-4000)}`);
  });

  it('answers a request with tools, whole and streamed alike', async () => {
    const params = {
      model: server.model, messages: MESSAGES, tools: TOOLS, tool_choice: 'auto',
      max_tokens: 24, temperature: 0,
    };
    const r = await client.chat.completions.create(params);
    const choice = r.choices[0];
    assert.equal(choice.message.role, 'assistant');
    assert.equal(typeof choice.message.content, 'string');
    assert.ok(choice.message.content.length > 0);
    // The tiny model writes no <tool_call> block: no calls, a normal finish.
    assert.equal(choice.message.tool_calls ?? undefined, undefined);
    assert.ok(['stop', 'length'].includes(choice.finish_reason), choice.finish_reason);

    const chunks = [];
    for await (const chunk of await client.chat.completions.create({ ...params, stream: true })) {
      chunks.push(chunk);
    }
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    assert.equal(text, choice.message.content);
    assert.ok(chunks.every((c) => !c.choices[0]?.delta?.tool_calls));
    assert.equal(chunks.at(-1).choices[0].finish_reason, choice.finish_reason);
  });

  it('accepts tool_choice none, required and a named function', async () => {
    // "required" and a named function constrain the output to the calls' JSON
    // (structured_outputs.test.mjs); cut by max_tokens, that JSON's start stays content.
    const starts = { none: /./, required: /^\[/, get_weather: /^\{/ };
    for (const toolChoice of ['none', 'required', { type: 'function', function: { name: 'get_weather' } }]) {
      const r = await client.chat.completions.create({
        model: server.model, messages: MESSAGES, tools: TOOLS, tool_choice: toolChoice,
        max_tokens: 8, temperature: 0,
      });
      const content = r.choices[0].message.content;
      assert.equal(typeof content, 'string', JSON.stringify(toolChoice));
      assert.match(content, starts[toolChoice.function?.name ?? toolChoice], JSON.stringify(toolChoice));
    }
  });

  it('still answers requests without tools', async () => {
    const r = await client.chat.completions.create({
      model: server.model, messages: MESSAGES, max_tokens: 8, temperature: 0,
    });
    assert.ok(r.choices[0].message.content.length > 0);
  });
});
