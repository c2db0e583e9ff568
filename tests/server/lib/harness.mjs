// Shared pieces of the end-to-end suites: start `pagoda serve` (or `pagoda router`) on a free
// loopback port, wait for /health, read /metrics, stop the server with SIGTERM and report its exit
// status.
import { spawn } from 'node:child_process';
import net from 'node:net';

export const PAGODA_BIN = process.env.PAGODA_BIN;
export const MODEL_DIR = process.env.PAGODA_MODEL_DIR;
if (!PAGODA_BIN || !MODEL_DIR) {
  throw new Error('set PAGODA_BIN and PAGODA_MODEL_DIR (tests/server/run.sh does)');
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** Polls `check` (async, returns truthy when done) until it succeeds or `timeoutMs` passes. */
export async function waitFor(check, { timeoutMs = 30000, intervalMs = 100, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await check();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${last})`);
    await sleep(intervalMs);
  }
}

/**
 * Spawns `pagoda ...args(port)` on a free loopback port and waits until `ready(baseURL)` (async)
 * holds. Returns { baseURL, port, proc, log(), stop() }; stop() sends SIGTERM and resolves to the
 * exit { code, signal }.
 */
async function launch(what, args, ready) {
  for (let attempt = 0; ; ++attempt) {
    const port = await freePort();
    const proc = spawn(PAGODA_BIN, args(port), { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const keep = (chunk) => {
      output += chunk.toString();
      if (output.length > 200000) output = output.slice(-100000);
    };
    proc.stdout.on('data', keep);
    proc.stderr.on('data', keep);
    const exited = new Promise((resolve) =>
      proc.on('exit', (code, signal) => resolve({ code, signal })));
    let exitStatus = null;
    exited.then((s) => { exitStatus = s; });
    const baseURL = `http://127.0.0.1:${port}`;
    try {
      await waitFor(async () => {
        if (exitStatus) throw new Error(`pagoda ${what} exited early (${JSON.stringify(exitStatus)})`);
        return ready(baseURL);
      }, { timeoutMs: 60000, what: `${baseURL} to be ready` });
    } catch (e) {
      if (!exitStatus) proc.kill('SIGKILL');
      // Another process may have taken the port between freePort() and the bind: retry once.
      if (attempt === 0 && /address|in use|bind/i.test(output)) continue;
      throw new Error(`${e.message}\n--- ${what} output ---\n${output}`);
    }
    return {
      baseURL,
      port,
      proc,
      log: () => output,
      async stop(timeoutMs = 30000) {
        if (exitStatus) return exitStatus;
        proc.kill('SIGTERM');
        const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
        const status = await exited;
        clearTimeout(timer);
        return status;
      },
    };
  }
}

/**
 * Starts `pagoda serve MODEL_DIR --host 127.0.0.1 --port P ...extraArgs` and waits for /health.
 * Returns { baseURL, port, model, proc, log(), stop() }; stop() sends SIGTERM and resolves to the
 * exit { code, signal }.
 */
export async function startServer(extraArgs = []) {
  // The CPU, also on a GPU machine: the suites' expectations are stories260K's CPU outputs.
  const server = await launch('serve', (port) => ['serve', MODEL_DIR, '--host', '127.0.0.1',
    '--port', String(port), '--device', 'cpu', ...extraArgs],
  async (baseURL) => (await fetch(`${baseURL}/health`)).status === 200);
  const models = await (await fetch(`${server.baseURL}/v1/models`, {
    headers: apiKeyHeader(extraArgs),
  })).json();
  server.model = models.data?.[0]?.id;
  return server;
}

/**
 * Starts `pagoda router --backend URL... --host 127.0.0.1 --port P ...extraArgs` and waits until
 * it answers /metrics (its backends need not be healthy). Same shape as startServer's result.
 */
export async function startRouter(backendURLs, extraArgs = []) {
  return launch('router', (port) => ['router', '--backend', ...backendURLs, '--host', '127.0.0.1',
    '--port', String(port), ...extraArgs],
  async (baseURL) => (await fetch(`${baseURL}/metrics`)).status === 200);
}

/** `pagoda router --prefill URL... --decode URL...` (P/D mode), as startRouter. */
export async function startPDRouter(prefillURLs, decodeURLs, extraArgs = []) {
  return launch('router', (port) => ['router', '--prefill', ...prefillURLs, '--decode',
    ...decodeURLs, '--host', '127.0.0.1', '--port', String(port), ...extraArgs],
  async (baseURL) => (await fetch(`${baseURL}/metrics`)).status === 200);
}

function apiKeyHeader(args) {
  const i = args.indexOf('--api-key');
  return i >= 0 ? { Authorization: `Bearer ${args[i + 1]}` } : {};
}

/** Parses the Prometheus text of /metrics into name -> [{ labels, value }]. */
export function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`bad metrics line: ${line}`);
    const labels = {};
    if (m[3]) {
      for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
      }
    }
    const value = m[4] === '+Inf' ? Infinity : m[4] === '-Inf' ? -Infinity : Number(m[4]);
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1]).push({ labels, value });
  }
  return out;
}

export async function readMetrics(baseURL) {
  const r = await fetch(`${baseURL}/metrics`);
  if (r.status !== 200) throw new Error(`/metrics: HTTP ${r.status}`);
  return parseMetrics(await r.text());
}

/** The value of one series (the sum over label sets matching `labels`). */
export function metric(metrics, name, labels = {}) {
  const samples = metrics.get(name);
  if (!samples) throw new Error(`no series ${name} on /metrics`);
  let sum = 0;
  for (const s of samples) {
    if (Object.entries(labels).every(([k, v]) => s.labels[k] === v)) sum += s.value;
  }
  return sum;
}

/** Waits until the engine holds no request and no KV block, as /metrics reports it. */
export async function waitForIdle(baseURL, prefix = 'pagoda', timeoutMs = 30000) {
  let last;
  await waitFor(async () => {
    last = await readMetrics(baseURL);
    return metric(last, `${prefix}:kv_cache_usage_perc`) === 0 &&
      metric(last, `${prefix}:num_requests_running`) === 0 &&
      metric(last, `${prefix}:num_requests_waiting`) === 0;
  }, { timeoutMs, what: 'kv_cache_usage_perc == 0 and no running or waiting request' });
  return last;
}

/** Requests recorded in request_success_total (every finished_reason) by the metrics `m`. */
export function finishedRequests(m, prefix = 'pagoda') {
  return ['stop', 'length', 'abort'].reduce(
    (sum, r) => sum + metric(m, `${prefix}:request_success_total`, { finished_reason: r }), 0);
}

/**
 * Waits until `count` more requests than in `before` are recorded as finished, and returns the
 * metrics. The engine frees a request's blocks before the HTTP thread records its end, so an
 * idle engine does not yet mean the counters are complete for requests whose client has gone.
 */
export async function waitForFinished(baseURL, before, count, prefix = 'pagoda', timeoutMs = 30000) {
  let last;
  await waitFor(async () => {
    last = await readMetrics(baseURL);
    return finishedRequests(last, prefix) - finishedRequests(before, prefix) >= count;
  }, { timeoutMs, what: `${count} requests recorded in ${prefix}:request_success_total` });
  return last;
}

/**
 * The token counts of a usage object. prompt_tokens_details.cached_tokens is left out: it depends
 * on what the prefix cache held when the request came, which differs between twin requests.
 */
export function counts(usage) {
  return {
    prompt_tokens: usage.prompt_tokens,
    completion_tokens: usage.completion_tokens,
    total_tokens: usage.total_tokens,
  };
}
