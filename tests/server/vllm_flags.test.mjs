// Suite 7: a vLLM launch command runs unchanged. `pagoda serve` takes the flags vLLM users' scripts
// carry: with their effect (--enforce-eager, --seed, --generation-config vllm, --disable-log-stats),
// accepted where they mean nothing here (-tp 1, --trust-remote-code, --swap-space: a warning), and
// refused with the flag named where pagoda cannot do what they ask (-tp 2, --kv-cache-dtype fp8_inc).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { MODEL_DIR, PAGODA_BIN, sleep, startServer } from './lib/harness.mjs';

async function complete(server, body) {
  const r = await fetch(`${server.baseURL}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: server.model, prompt: 'Once upon a time', ...body }),
  });
  assert.equal(r.status, 200);
  return r.json();
}

describe('accepted', () => {
  it('serves with a typical vLLM command line and logs the stats line', async () => {
    process.env.PAGODA_LOG_STATS_INTERVAL = '0.2';
    const server = await startServer([
      '--served-model-name', 'llama', '-tp', '1', '--pipeline-parallel-size', '1',
      '--trust-remote-code', '--disable-log-requests', '--enforce-eager', '--seed', '7',
      '--kv-cache-dtype', 'auto', '--enable-chunked-prefill', '--swap-space', '4',
      '--tokenizer-mode', 'auto', '--generation-config', 'auto', '--dtype', 'auto',
      '--max-model-len', '512', '--gpu-memory-utilization', '0.9',
      // Harmless flags: accepted, and the log says they change nothing here.
      '--uvicorn-log-level', 'warning', '--async-scheduling', '--max-log-len', '100',
      '--disable-fastapi-docs', '--enable-prompt-tokens-details', '--disable-uvicorn-access-log',
    ]);
    delete process.env.PAGODA_LOG_STATS_INTERVAL;
    try {
      assert.equal(server.model, 'llama');
      const out = await complete(server, { max_tokens: 16, temperature: 1.0 });
      assert.equal(out.usage.completion_tokens, 16);
      await sleep(600);
      assert.match(server.log(), /--swap-space is ignored/);
      for (const flag of ['--uvicorn-log-level', '--async-scheduling', '--max-log-len',
                          '--disable-fastapi-docs', '--enable-prompt-tokens-details']) {
        assert.match(server.log(), new RegExp(`${flag} is accepted and has no effect here`));
      }
      assert.match(server.log(), /Avg prompt throughput: [0-9.]+ tokens\/s, Avg generation throughput/);
    } finally {
      assert.deepEqual(await server.stop(), { code: 0, signal: null });
    }
  });

  it('--seed seeds the requests that set none: two servers with one seed sample alike', async () => {
    const texts = [];
    for (const seed of ['11', '11', '12']) {
      const server = await startServer(['--seed', seed, '--disable-log-stats']);
      try {
        texts.push((await complete(server, { max_tokens: 24, temperature: 1.0 })).choices[0].text);
        assert.doesNotMatch(server.log(), /Avg prompt throughput/);
      } finally {
        await server.stop();
      }
    }
    assert.equal(texts[0], texts[1]);
    assert.notEqual(texts[0], texts[2]);
  });

  it('--generation-config DIR takes the sampling defaults from DIR, vllm from nowhere', async () => {
    // stories260K's generation_config.json sets no sampling field: temperature 1 unless told.
    const dir = mkdtempSync(join(tmpdir(), 'pagoda-genconfig-'));
    writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({ temperature: 0.0 }));
    try {
      for (const [choice, greedy] of [[dir, true], ['vllm', false]]) {
        const server = await startServer(['--generation-config', choice, '--disable-log-stats']);
        try {
          const texts = [];
          for (const seed of [1, 2]) {
            texts.push((await complete(server, { max_tokens: 24, seed })).choices[0].text);
          }
          const reference = (await complete(server, { max_tokens: 24, temperature: 0 }))
            .choices[0].text;
          if (greedy) {
            assert.deepEqual(texts, [reference, reference], 'temperature 0 from the directory');
          } else {
            assert.notEqual(texts[0], texts[1], 'temperature 1: different seeds sample apart');
          }
        } finally {
          await server.stop();
        }
      }
    } finally {
      rmSync(dir, { recursive: true });
    }
  });

  it('--reasoning-parser adds reasoning_content (null: stories260K writes no <think>)', async () => {
    const server = await startServer(['--reasoning-parser', 'qwen3', '--enable-reasoning',
      '--disable-log-stats']);
    try {
      const r = await fetch(`${server.baseURL}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8 }),
      });
      assert.equal(r.status, 200);
      const message = (await r.json()).choices[0].message;
      assert.ok('reasoning_content' in message);
      assert.equal(message.reasoning_content, null);
      assert.ok(message.content.length > 0);
    } finally {
      await server.stop();
    }
  });

  it('--chat-template as the template itself, and VLLM_API_KEY', async () => {
    process.env.VLLM_API_KEY = 'sekret';
    const server = await startServer(['--chat-template',
      '{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}>', '--disable-log-stats']);
    delete process.env.VLLM_API_KEY;
    try {
      const ask = (headers) => fetch(`${server.baseURL}/tokenize`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...headers },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }],
          add_generation_prompt: false }),
      });
      // /tokenize renders the chat template: it needs the key too.
      assert.equal((await ask({})).status, 401);
      const { tokens } = await (await ask({ Authorization: 'Bearer sekret' })).json();
      const { prompt } = await (await fetch(`${server.baseURL}/detokenize`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: 'Bearer sekret' },
        body: JSON.stringify({ tokens }),
      })).json();
      assert.match(prompt, /\[user\] Hi\n>/);
      const unauthorized = await fetch(`${server.baseURL}/v1/models`);
      assert.equal(unauthorized.status, 401);
      const authorized = await fetch(`${server.baseURL}/v1/models`,
        { headers: { Authorization: 'Bearer sekret' } });
      assert.equal(authorized.status, 200);
    } finally {
      await server.stop();
    }
  });

  it('--model DIR in place of the positional directory', async () => {
    const r = spawnSync(PAGODA_BIN, ['serve', '--model', MODEL_DIR, '--port', '1', '-tp', '3'],
      { encoding: 'utf8' });
    // Parsed as far as the flag checks: the directory was taken from --model.
    assert.match(r.stderr, /--tensor-parallel-size 3/);
  });
});

describe('refused with the flag named', () => {
  const cases = [
    [['-tp', '3'], /error: --tensor-parallel-size 3: num_attention_heads 8 is not divisible by it/],
    [['-tp', '4', '-dcp', '3'], /error: --decode-context-parallel-size 3: must divide --tensor-parallel-size 4/],
    [['--kv-cache-dtype', 'fp8_inc'], /error: --kv-cache-dtype fp8_inc: not supported by pagoda/],
    [['--kv-cache-dtype', 'fp4'], /error: --kv-cache-dtype 'fp4' must be auto, fp8, fp8_e4m3/],
    [['--calculate-kv-scales'], /error: --calculate-kv-scales: the KV cache is float32/],
    [['--quantization', 'awq'], /error: --quantization awq: .*has no quantization_config/],
    [['--quantization', 'bitsandbytes'], /error: --quantization bitsandbytes: not supported/],
    [['--tokenizer-mode', 'mistral'], /error: --tokenizer-mode mistral/],
    [['--reasoning-parser', 'granite'], /error: --reasoning-parser: unknown reasoning parser 'granite' \(known: deepseek_r1, qwen3\)/],
    [['--generation-config', '/nonexistent'], /error: --generation-config: \/nonexistent/],
    [['--model', MODEL_DIR], /error: give the model directory once/],
    // vLLM's flags pagoda cannot honour: our message, not CLI11's "not expected" (exit 109).
    [['--enable-lora'], /error: --enable-lora is not supported by pagoda: LoRA adapters/],
    [['--lora-modules', 'a=/x'], /error: --lora-modules is not supported by pagoda: LoRA/],
    [['--ssl-keyfile', '/k.pem'], /error: --ssl-keyfile is not supported by pagoda: .*TLS/],
    [['--root-path', '/api'], /error: --root-path is not supported by pagoda/],
    [['--speculative-config', '{"method": "medusa", "model": "/e", "num_speculative_tokens": 2}'],
      /error: --speculative-config: method 'medusa' \(model \/e\) is not supported by pagoda yet/],
    [['--speculative-config', '{"method": "ngram"}'],
      /error: --speculative-config: num_speculative_tokens is required/],
    [['--enable-prompt-embeds'], /error: --enable-prompt-embeds is not supported by pagoda/],
    [['--kv-transfer-config', '{"kv_connector": "NixlConnector", "kv_role": "kv_producer"}'],
      /error: --kv-transfer-config: kv_connector 'NixlConnector' is vLLM's/],
    [['--kv-transfer-config', '{"kv_connector": "PagodaConnector", "kv_role": "kv_both", "kv_port": 1}'],
      /error: --kv-transfer-config: unknown key kv_port/],
    [['--allowed-origins', '[1'], /error: --allowed-origins: '\[1' is not a JSON list/],
  ];
  for (const [flags, message] of cases) {
    it(flags.join(' '), () => {
      const r = spawnSync(PAGODA_BIN, ['serve', MODEL_DIR, '--port', '1', ...flags],
        { encoding: 'utf8', timeout: 30000 });
      assert.equal(r.status, 2, r.stderr);
      assert.match(r.stderr, message);
    });
  }
});

describe('CORS', () => {
  const preflight = (server, origin, headers = 'content-type, authorization') =>
    fetch(`${server.baseURL}/v1/chat/completions`, {
      method: 'OPTIONS',
      headers: { Origin: origin, 'Access-Control-Request-Method': 'POST',
                 'Access-Control-Request-Headers': headers },
    });

  it('by default (vLLM\'s) any origin may call: preflight 200 without the key', async () => {
    const server = await startServer(['--api-key', 'k', '--disable-log-stats']);
    try {
      const r = await preflight(server, 'https://app.example');
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('access-control-allow-origin'), '*');
      assert.match(r.headers.get('access-control-allow-methods'), /POST/);
      assert.equal(r.headers.get('access-control-allow-headers'), 'content-type, authorization');
      const models = await fetch(`${server.baseURL}/v1/models`,
        { headers: { Origin: 'https://app.example', Authorization: 'Bearer k' } });
      assert.equal(models.status, 200);
      assert.equal(models.headers.get('access-control-allow-origin'), '*');
      // Errors carry it too, so that the page can read them.
      const denied = await fetch(`${server.baseURL}/v1/models`, { headers: { Origin: 'https://app.example' } });
      assert.equal(denied.status, 401);
      assert.equal(denied.headers.get('access-control-allow-origin'), '*');
    } finally {
      await server.stop();
    }
  });

  it('--allowed-origins, --allowed-methods, --allowed-headers, --allow-credentials', async () => {
    const server = await startServer(['--allowed-origins', '["https://app.example"]',
      '--allowed-methods', '["GET","POST"]', '--allowed-headers', '["authorization"]',
      '--allow-credentials', '--disable-log-stats']);
    try {
      const ok = await preflight(server, 'https://app.example', 'authorization');
      assert.equal(ok.status, 200);
      assert.equal(ok.headers.get('access-control-allow-origin'), 'https://app.example');
      assert.equal(ok.headers.get('access-control-allow-credentials'), 'true');
      assert.equal(ok.headers.get('access-control-allow-methods'), 'GET, POST');
      const other = await preflight(server, 'https://evil.example', 'authorization');
      assert.equal(other.status, 400);
      assert.match(await other.text(), /Disallowed CORS origin/);
      const header = await preflight(server, 'https://app.example', 'x-custom');
      assert.equal(header.status, 400);
      assert.match(await header.text(), /Disallowed CORS headers/);
      const simple = await fetch(`${server.baseURL}/v1/models`, { headers: { Origin: 'https://evil.example' } });
      assert.equal(simple.status, 200);
      assert.equal(simple.headers.get('access-control-allow-origin'), null);
    } finally {
      await server.stop();
    }
  });
});
