// `pagoda bench serve` against the live server: a short run reports its requests as vLLM's
// benchmark does, saves them as JSON, and reads the prefix-cache counters from /metrics.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, it } from 'node:test';
import { promisify } from 'node:util';
import { MODEL_DIR, PAGODA_BIN, metric, readMetrics, startServer } from './lib/harness.mjs';

const run = promisify(execFile);
const SHAREGPT = fileURLToPath(new URL('../data/sharegpt/tiny_sharegpt.json', import.meta.url));
let server;

before(async () => {
  server = await startServer(['--kv-cache-memory', '64M']);
});

after(async () => {
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `SIGTERM exit\n${server.log().slice(-4000)}`);
});

/** A value of the result block (after its ==== header), as the 40-column label layout puts it. */
function field(stdout, label) {
  const report = stdout.slice(stdout.indexOf('============ Serving Benchmark Result'));
  const line = report.split('\n').find((l) => l.startsWith(label));
  assert.ok(line, `report has "${label}"\n${stdout}`);
  return Number(line.slice(40).trim());
}

it('bench serve: 20 completions with random token prompts', async () => {
  const out = join(mkdtempSync(join(tmpdir(), 'pagoda-bench-')), 'result.json');
  const before = await readMetrics(server.baseURL);
  const { stdout } = await run(PAGODA_BIN, [
    'bench', 'serve', '--base-url', server.baseURL, '--tokenizer', MODEL_DIR,
    '--random-input-len', '32', '--random-output-len', '16', '--num-prompts', '20',
    '--max-concurrency', '8', '--seed', '1', '--save-result', out,
    '--percentile-metrics', 'ttft,tpot,itl,e2el',
  ], { timeout: 120000 });
  console.log(stdout.split('\n').map((l) => `# ${l}`).join('\n'));
  assert.match(stdout, /============ Serving Benchmark Result ============/);
  assert.equal(field(stdout, 'Successful requests:'), 20);
  assert.equal(field(stdout, 'Failed requests:'), 0);
  assert.equal(field(stdout, 'Maximum request concurrency:'), 8);
  assert.equal(field(stdout, 'Total input tokens:'), 20 * 32);
  assert.equal(field(stdout, 'Total generated tokens:'), 20 * 16);
  assert.ok(field(stdout, 'Peak concurrent requests:') <= 8);
  for (const m of ['TTFT', 'TPOT', 'ITL', 'E2EL']) {
    assert.ok(field(stdout, `Mean ${m} (ms):`) > 0, m);
    assert.ok(field(stdout, `P99 ${m} (ms):`) >= field(stdout, `Median ${m} (ms):`), m);
  }
  assert.ok(field(stdout, 'Mean E2EL (ms):') >= field(stdout, 'Mean TTFT (ms):'));

  const saved = JSON.parse(readFileSync(out, 'utf8'));
  assert.equal(saved.completed, 20);
  assert.equal(saved.failed, 0);
  assert.equal(saved.output_lens.length, 20);
  assert.ok(saved.output_lens.every((n) => n === 16));
  assert.equal(saved.itls.length, 20);
  // The run's prefix-cache queries equal what /metrics says happened during it (the initial test
  // request goes before the first read, as in vLLM).
  const afterRun = await readMetrics(server.baseURL);
  const queries = metric(afterRun, 'pagoda:prefix_cache_queries_total') -
    metric(before, 'pagoda:prefix_cache_queries_total');
  assert.ok(saved.prefix_cache_queries > 0 && saved.prefix_cache_queries <= queries,
    `prefix cache queries ${saved.prefix_cache_queries} of ${queries}`);
  assert.match(stdout, /Prefix cache hit rate \(%\):/);
});

it('bench serve: a shared random prefix, sampling flags, chosen percentiles and goodput', async () => {
  const out = join(mkdtempSync(join(tmpdir(), 'pagoda-bench-')), 'result.json');
  const { stdout } = await run(PAGODA_BIN, [
    'bench', 'serve', '--base-url', server.baseURL, '--tokenizer', MODEL_DIR,
    '--random-input-len', '8', '--random-prefix-len', '32', '--random-output-len', '6',
    '--num-prompts', '12', '--max-concurrency', '4', '--seed', '3',
    '--temperature', '0.8', '--top-p', '0.9', '--top-k', '20', '--min-p', '0.05', '--logprobs', '2',
    '--percentile-metrics', 'ttft,e2el', '--metric-percentiles', '25,50,99.9',
    '--goodput', 'e2el:600000', 'ttft:600000', '--save-result', out,
  ], { timeout: 120000 });
  console.log(stdout.split('\n').map((l) => `# ${l}`).join('\n'));
  assert.equal(field(stdout, 'Successful requests:'), 12);
  assert.equal(field(stdout, 'Total input tokens:'), 12 * (32 + 8));
  assert.equal(field(stdout, 'Total generated tokens:'), 12 * 6);
  // Every request meets objectives of ten minutes: goodput is the request throughput.
  assert.equal(field(stdout, 'Request goodput (req/s):'), field(stdout, 'Request throughput (req/s):'));
  for (const label of ['Mean TTFT (ms):', 'P25 TTFT (ms):', 'P50 TTFT (ms):', 'P99.9 TTFT (ms):',
    'Median E2EL (ms):', 'P99.9 E2EL (ms):']) {
    assert.ok(field(stdout, label) > 0, label);
  }
  assert.ok(!stdout.includes('TPOT') && !stdout.includes('ITL'), 'only the chosen metrics');
  assert.ok(!stdout.includes('P99 '), 'only the chosen percentiles');
  // The 32-token prefix (two blocks of 16) is computed once and read from the cache after.
  assert.ok(field(stdout, 'Prefix cache hits (tokens):') >= 12 * 32);
  const saved = JSON.parse(readFileSync(out, 'utf8'));
  assert.equal(saved.request_goodput, saved.request_throughput);
  for (const key of ['mean_ttft_ms', 'p25_ttft_ms', 'p99.9_ttft_ms', 'std_e2el_ms', 'p50_e2el_ms']) {
    assert.equal(typeof saved[key], 'number', key);
  }
  assert.ok(!('mean_tpot_ms' in saved) && !('p99_ttft_ms' in saved));
  assert.ok(saved.input_lens.every((n) => n === 40));
});

it('bench serve: prefix_repetition shares each prefix among its prompts', async () => {
  const { stdout } = await run(PAGODA_BIN, [
    'bench', 'serve', '--base-url', server.baseURL, '--tokenizer', MODEL_DIR,
    '--dataset-name', 'prefix_repetition', '--prefix-repetition-prefix-len', '32',
    '--prefix-repetition-suffix-len', '8', '--prefix-repetition-num-prefixes', '2',
    '--prefix-repetition-output-len', '4', '--num-prompts', '8', '--seed', '4',
    '--max-concurrency', '1',
  ], { timeout: 120000 });
  assert.equal(field(stdout, 'Successful requests:'), 8);
  assert.equal(field(stdout, 'Total input tokens:'), 8 * 40);
  assert.equal(field(stdout, 'Total generated tokens:'), 8 * 4);
  // One request at a time: only the first prompt of each prefix computes it.
  assert.ok(field(stdout, 'Prefix cache hits (tokens):') >= 6 * 32);
});

it('bench serve: ShareGPT conversations from a local file', async () => {
  const out = join(mkdtempSync(join(tmpdir(), 'pagoda-bench-')), 'result.json');
  const { stdout } = await run(PAGODA_BIN, [
    'bench', 'serve', '--base-url', server.baseURL, '--tokenizer', MODEL_DIR,
    '--dataset-name', 'sharegpt', '--dataset-path', SHAREGPT, '--num-prompts', '5',
    '--seed', '5', '--save-result', out,
  ], { timeout: 120000 });
  assert.equal(field(stdout, 'Successful requests:'), 5);
  const saved = JSON.parse(readFileSync(out, 'utf8'));
  // Three conversations pass the filter; five requests repeat them. The server counts the
  // prompts as the benchmark did (the same tokenizer), and generates each reply's length.
  assert.ok(new Set(saved.input_lens).size <= 3, `${saved.input_lens}`);
  assert.ok(saved.input_lens.every((n) => n >= 4 && n <= 1024));
  assert.ok(saved.output_lens.every((n) => n >= 4));

  const fewer = await run(PAGODA_BIN, [
    'bench', 'serve', '--base-url', server.baseURL, '--tokenizer', MODEL_DIR,
    '--dataset-name', 'sharegpt', '--dataset-path', SHAREGPT, '--num-prompts', '5',
    '--no-oversample', '--sharegpt-output-len', '3', '--endpoint', '/v1/chat/completions',
  ], { timeout: 120000 });
  assert.match(fewer.stdout, /The sharegpt dataset gives 4 requests \(of --num-prompts 5\)/);
  assert.equal(field(fewer.stdout, 'Successful requests:'), 4);
  assert.equal(field(fewer.stdout, 'Total generated tokens:'), 4 * 3);
});

it('bench serve: bad sampling values are refused by name', async () => {
  await assert.rejects(run(PAGODA_BIN, [
    'bench', 'serve', '--base-url', server.baseURL, '--random-vocab-size', '10', '--top-p', '1.5',
  ], { timeout: 60000 }), (e) => /--top-p must be in \(0, 1\]/.test(e.stderr));
});

it('bench serve: chat endpoint at a finite request rate', async () => {
  const { stdout } = await run(PAGODA_BIN, [
    'bench', 'serve', '--base-url', server.baseURL, '--endpoint', '/v1/chat/completions',
    '--random-input-len', '8', '--random-output-len', '8', '--num-prompts', '10',
    '--request-rate', '20', '--seed', '2',
  ], { timeout: 120000 });
  assert.equal(field(stdout, 'Successful requests:'), 10);
  assert.equal(field(stdout, 'Request rate configured (RPS):'), 20);
  assert.equal(field(stdout, 'Total generated tokens:'), 80);
});

it('bench serve: exits non-zero when the server is gone', async () => {
  await assert.rejects(run(PAGODA_BIN, [
    'bench', 'serve', '--base-url', 'http://127.0.0.1:9', '--model', 'x', '--random-vocab-size', '10',
    '--num-prompts', '2',
  ], { timeout: 60000 }));
});

it('--metrics-prefix vllm: the same series under vllm:, which bench serve reads too', async () => {
  const vllm = await startServer(['--kv-cache-memory', '16M', '--metrics-prefix', 'vllm']);
  try {
    const { stdout } = await run(PAGODA_BIN, [
      'bench', 'serve', '--base-url', vllm.baseURL, '--tokenizer', MODEL_DIR,
      '--random-input-len', '16', '--random-output-len', '4', '--num-prompts', '4',
    ], { timeout: 60000 });
    assert.equal(field(stdout, 'Successful requests:'), 4);
    assert.ok(field(stdout, 'Prefix cache queries (tokens):') >= 4 * 16);
    const text = await (await fetch(`${vllm.baseURL}/metrics`)).text();
    assert.ok(!text.includes('pagoda:'), 'no pagoda: series');
    const m = await readMetrics(vllm.baseURL);
    for (const name of ['vllm:num_requests_running', 'vllm:kv_cache_usage_perc',
      'vllm:generation_tokens_total', 'vllm:time_to_first_token_seconds_count']) {
      assert.ok(m.has(name), name);
    }
    assert.equal(metric(m, 'vllm:request_success_total', { finished_reason: 'length' }), 5);
    assert.equal(metric(m, 'vllm:time_to_first_token_seconds_count'), 5);
  } finally {
    assert.deepEqual(await vllm.stop(), { code: 0, signal: null });
  }
});
