// Suite: the host KV tier (`--kv-offloading-size`, vLLM's flag). A prompt evicted from a small
// device KV pool by other prompts and asked again is served from the host tier: the same text and
// log-probabilities, its cached tokens in usage, host hits in vLLM's external prefix cache
// counters on /metrics, and the tier's size in the start-up log. Bad values are refused by name.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { MODEL_DIR, PAGODA_BIN, parseMetrics, startServer } from './lib/harness.mjs';

// stories260K: 1,280 bytes of KV per token, 20,480 per block of 16 tokens. 21 blocks (the null
// block and 20 usable, 320 tokens) hold one 200-token prompt with its output; two more evict it.
const POOL = String(21 * 20480);

function promptOf(n, seed) {
  const p = [1];
  for (let i = 1; i < n; ++i) p.push(3 + ((seed * 131 + i * 17) % 500));
  return p;
}

async function complete(server, prompt) {
  const r = await fetch(`${server.baseURL}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      model: server.model, prompt, max_tokens: 12, temperature: 0, ignore_eos: true, logprobs: 3,
    }),
  });
  assert.equal(r.status, 200);
  return r.json();
}

async function metric(server, name) {
  const m = parseMetrics(await (await fetch(`${server.baseURL}/metrics`)).text());
  assert.ok(m.has(name), `no ${name} on /metrics`);
  return m.get(name)[0].value;
}

describe('an evicted prompt comes back from the host tier', () => {
  let server;
  before(async () => {
    server = await startServer(['--kv-cache-memory', POOL, '--max-model-len', '256',
      '--kv-offloading-size', '0.004', '--metrics-prefix', 'vllm']);
  });
  after(async () => {
    assert.deepEqual(await server.stop(), { code: 0, signal: null });
  });

  it('with the same output, and the hits counted as the host tier\'s', async () => {
    // 0.004 GiB = 4,294,967 bytes: 209 blocks of 20,480 bytes.
    assert.match(server.log(), /host KV tier \(--kv-offloading-size\): 209 blocks of 16 tokens/);
    const a = promptOf(200, 1);
    const first = await complete(server, a);
    await complete(server, promptOf(200, 2));
    await complete(server, promptOf(200, 3));
    const hitsBefore = await metric(server, 'vllm:external_prefix_cache_hits_total');
    const again = await complete(server, a);
    assert.equal(again.choices[0].text, first.choices[0].text);
    assert.deepEqual(again.choices[0].logprobs, first.choices[0].logprobs);
    // A's 12 full blocks (192 tokens) come back from the host tier, none from the device.
    assert.equal(await metric(server, 'vllm:external_prefix_cache_hits_total') - hitsBefore, 192);
    assert.equal(again.usage.prompt_tokens_details?.cached_tokens, 192);
    assert.ok(await metric(server, 'vllm:host_kv_blocks_loaded_total') >= 12);
    assert.ok(await metric(server, 'vllm:host_kv_cache_usage_perc') > 0);
  });
});

describe('--kv-offloading-size is refused by name', () => {
  const cases = [
    [['--kv-offloading-size', '-1'], /--kv-offloading-size: .*-1/],
    [['--kv-offloading-size', 'lots'], /--kv-offloading-size: .*lots/],
    [['--kv-offloading-size', '1', '--no-enable-prefix-caching'],
      /--kv-offloading-size needs prefix caching/],
    [['--kv-offloading-size', '1K'], /--kv-offloading-size: 1024 bytes hold no KV block/],
    [['--kv-offloading-backend', 'lmcache'], /--kv-offloading-backend lmcache: only native/],
  ];
  for (const [flags, message] of cases) {
    it(flags.join(' '), () => {
      const r = spawnSync(PAGODA_BIN, ['serve', MODEL_DIR, '--port', '1', '--device', 'cpu',
        '--kv-cache-memory', '16M', ...flags], { encoding: 'utf8', timeout: 60000 });
      assert.notEqual(r.status, 0, r.stderr);
      assert.match(r.stderr, message);
    });
  }
});
