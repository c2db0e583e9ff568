// The deployment's monitoring for real (issue 19, deploy/): two `pagoda serve` engines and
// `pagoda router --backend` on free loopback ports, Debian's `prometheus` (free port, temp dir,
// scrape interval 1 s, deploy/prometheus/alerts.yml loaded) scraping all three, traffic through
// the router with the openai client, then every target `expr` of every panel of
// deploy/grafana/pagoda-dashboard.json, with its template variables substituted as Grafana would,
// queried through /api/v1/query until it returns a finite value. Waits are bounded by progress:
// the number of scrapes Prometheus has made (count_over_time of `up`), never wall time alone.
// A second case runs nginx with deploy/nginx/nginx.conf (loopback ports, a throwaway certificate)
// in front of the router: a streamed chat over TLS equals the router's own stream, plain HTTP
// redirects, /metrics is hidden, and a burst of 200 requests meets the rate limit (429).
// Each case is skipped, saying why, where `prometheus` (or `nginx`) is not installed
// (scripts/install-deps.sh installs both).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, it } from 'node:test';
import OpenAI from 'openai';
import { freePort, startRouter, startServer, waitFor } from './lib/harness.mjs';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const dashboardFile = path.join(repo, 'deploy/grafana/pagoda-dashboard.json');
const alertsFile = path.join(repo, 'deploy/prometheus/alerts.yml');
const alertCount = fs.readFileSync(alertsFile, 'utf8').match(/^\s*- alert:/gm).length;
const SCRAPE_S = 1;
// Scrapes (of the least-scraped target) an expression may stay empty once traffic has begun.
const MAX_SCRAPES = 60;

const hasPrometheus = spawnSync('prometheus', ['--version']).status === 0;
const skip = hasPrometheus ? false : 'prometheus is not installed (scripts/install-deps.sh installs it)';
const hasNginx = spawnSync('nginx', ['-v']).status === 0;
const nginxSkip = hasNginx ? false : 'nginx is not installed (scripts/install-deps.sh installs it)';

let engines = [];
let router;
let prom;        // { baseURL, proc, log(), stop() }
let tmp;

/**
 * Starts prometheus on a free port with `config` (written as JSON, which is YAML) and waits for
 * /-/ready; retries once with another port if the first was taken.
 */
async function startPrometheus(config) {
  fs.writeFileSync(path.join(tmp, 'prometheus.yml'), JSON.stringify(config, null, 2));
  for (let attempt = 0; ; ++attempt) {
    const port = await freePort();
    const proc = spawn('prometheus', [
      `--config.file=${path.join(tmp, 'prometheus.yml')}`,
      `--storage.tsdb.path=${path.join(tmp, `data${attempt}`)}`,
      `--web.listen-address=127.0.0.1:${port}`,
    ], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const keep = (c) => { output = (output + c.toString()).slice(-100000); };
    proc.stdout.on('data', keep);
    proc.stderr.on('data', keep);
    let exitStatus = null;
    const exited = new Promise((resolve) => proc.on('exit', (code, signal) => {
      exitStatus = { code, signal };
      resolve(exitStatus);
    }));
    const baseURL = `http://127.0.0.1:${port}`;
    try {
      await waitFor(async () => {
        if (exitStatus) throw new Error(`prometheus exited early (${JSON.stringify(exitStatus)})`);
        return (await fetch(`${baseURL}/-/ready`)).status === 200;
      }, { timeoutMs: 120000, what: 'prometheus /-/ready' });
    } catch (e) {
      if (!exitStatus) proc.kill('SIGKILL');
      if (attempt === 0 && /address already in use/i.test(output)) continue;
      throw new Error(`${e.message}\n--- prometheus output ---\n${output}`);
    }
    return {
      baseURL,
      proc,
      log: () => output,
      async stop() {
        if (exitStatus) return exitStatus;
        proc.kill('SIGTERM');
        const timer = setTimeout(() => proc.kill('SIGKILL'), 30000);
        const status = await exited;
        clearTimeout(timer);
        return status;
      },
    };
  }
}

/** GET /api/v1/<what>; returns `data` of a successful answer. */
async function api(what, params = {}) {
  const url = new URL(`${prom.baseURL}/api/v1/${what}`);
  for (const [k, v] of Object.entries(params)) url.searchParams.append(k, v);
  const r = await fetch(url);
  const body = await r.json();
  if (body.status !== 'success') throw new Error(`${url}: ${JSON.stringify(body)}`);
  return body.data;
}

async function query(expr) {
  return api('query', { query: expr });
}

/** Scrapes made of the least-scraped of the three targets (0 before the first). */
async function scrapes() {
  const r = await query('min(count_over_time(up{job=~"pagoda|pagoda-router"}[1h]))');
  return r.result.length ? Number(r.result[0].value[1]) : 0;
}

/** Waits until Prometheus has scraped every target once more. */
async function nextScrape() {
  const now = await scrapes();
  await waitFor(async () => (await scrapes()) > now,
    { timeoutMs: 120000, intervalMs: 200, what: 'the next scrape of every target' });
}

/** The panels' queries: [{ panel, expr }], nested rows included. */
function dashboardQueries(dashboard) {
  const out = [];
  const walk = (panels) => {
    for (const p of panels ?? []) {
      for (const t of p.targets ?? []) {
        if (t.expr !== undefined && !t.hide) out.push({ panel: p.title, expr: t.expr });
      }
      walk(p.panels);
    }
  };
  walk(dashboard.panels);
  return out;
}

/**
 * Substitutes Grafana's variables in a query: the dashboard's own (`$name`, `${name}`,
 * `[[name]]`) and the built-in intervals. With the data source's scrape interval (timeInterval)
 * as the minimum interval, Grafana's $__interval is at least one scrape and
 * $__rate_interval = max($__interval + scrape, 4 * scrape): for a 1 s scrape, $__interval 1s and
 * $__rate_interval 4s. Example: rate(x{model_name="$model_name"}[$__rate_interval]) with
 * model_name "m" -> rate(x{model_name="m"}[4s]).
 */
function substitute(expr, vars) {
  const all = {
    __interval: `${SCRAPE_S}s`,
    __interval_ms: String(SCRAPE_S * 1000),
    __rate_interval: `${4 * SCRAPE_S}s`,
    __range: '30m',
    ...vars,
  };
  const out = expr.replace(/\$\{(\w+)\}|\[\[(\w+)\]\]|\$(\w+)/g, (m, a, b, c) => {
    const name = a ?? b ?? c;
    if (!(name in all)) throw new Error(`unknown Grafana variable ${m} in ${expr}`);
    return all[name];
  });
  return out;
}

/** A result with at least one finite sample (NaN is what Grafana draws as no data). */
function hasData(data) {
  const values = data.resultType === 'vector' ? data.result.map((s) => s.value[1])
    : data.resultType === 'scalar' ? [data.result[1]] : [];
  return values.some((v) => Number.isFinite(Number(v)));
}

before(async () => {
  if (skip) return;
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pagoda-deploy-'));
  engines = await Promise.all([0, 1].map(() => startServer(['--kv-cache-memory', '64M'])));
  router = await startRouter(engines.map((e) => e.baseURL));
  fs.copyFileSync(alertsFile, path.join(tmp, 'alerts.yml'));
  const target = (s) => new URL(s.baseURL).host;
  // The deployment's jobs (deploy/prometheus/prometheus.yml) with loopback targets.
  prom = await startPrometheus({
    global: { scrape_interval: `${SCRAPE_S}s`, evaluation_interval: `${SCRAPE_S}s` },
    rule_files: ['alerts.yml'],
    scrape_configs: [
      { job_name: 'pagoda', static_configs: [{ targets: engines.map(target) }] },
      { job_name: 'pagoda-router', static_configs: [{ targets: [target(router)] }] },
    ],
  });
});

after(async () => {
  if (skip) return;
  if (prom) assert.deepEqual(await prom.stop(), { code: 0, signal: null }, `prometheus exit\n${prom.log().slice(-4000)}`);
  if (router) await router.stop();
  for (const e of engines) await e.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

it('every query of every panel of the Grafana dashboard returns data from a real Prometheus', { skip }, async () => {
  const model = engines[0].model;
  const client = new OpenAI({ baseURL: `${router.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
  // Traffic through the router until the checks are done: completions that share a prefix (prefix
  // cache hits), ones cut by max_tokens (finished_reason length) and streamed chats (stop).
  let running = true;
  let served = 0;
  let trafficError = null;
  const traffic = async (worker) => {
    for (let i = 0; running; ++i) {
      if (i % 3 === 2) {
        const stream = await client.chat.completions.create({
          model, messages: [{ role: 'user', content: `Tell me story ${worker}.${i}` }],
          max_tokens: 32, temperature: 0, stream: true,
        });
        for await (const chunk of stream) void chunk;
      } else {
        const r = await client.completions.create({
          model, prompt: `Once upon a time, in a small town by the sea, there was a girl named ${i % 5}`,
          max_tokens: i % 3 === 0 ? 8 : 64, temperature: 0.8, seed: i,
        });
        assert.equal(r.choices.length, 1);
      }
      served += 1;
    }
  };
  const workers = [0, 1].map((w) => traffic(w).catch((e) => { trafficError = e; running = false; }));
  try {
    await waitFor(async () => served >= 4 || trafficError, { timeoutMs: 120000, what: 'the first answers' });
    assert.equal(trafficError, null);

    // Every target up.
    await waitFor(async () => {
      const up = await query('up');
      return up.result.length === 3 && up.result.every((s) => s.value[1] === '1');
    }, { timeoutMs: 120000, what: 'up == 1 for both engines and the router' });

    // $model_name as the dashboard's variable query reads it: label_values(pagoda:num_requests_running, model_name).
    const dashboard = JSON.parse(fs.readFileSync(dashboardFile, 'utf8'));
    const variable = dashboard.templating.list.find((v) => v.name === 'model_name');
    const m = /^label_values\(([^,]+),\s*(\w+)\)$/.exec(variable.query.query ?? variable.query);
    assert.ok(m, `model_name's query ${JSON.stringify(variable.query)}`);
    const names = await api(`label/${m[2]}/values`, { 'match[]': m[1] });
    assert.deepEqual(names, [model], 'the engines serve one model name');

    const queries = dashboardQueries(dashboard).map((q) => ({ ...q, promql: substitute(q.expr, { model_name: names[0] }) }));
    assert.ok(queries.length >= 20, `${queries.length} queries in the dashboard`);
    const start = await scrapes();
    let pending = queries;
    const last = new Map();
    for (;;) {
      const still = [];
      for (const q of pending) {
        const data = await query(q.promql);
        last.set(q, data);
        if (!hasData(data)) still.push(q);
      }
      pending = still;
      if (pending.length === 0) break;
      const made = (await scrapes()) - start;
      assert.ok(made <= MAX_SCRAPES, `after ${made} scrapes with traffic, these panel queries return no data:\n` +
        pending.map((q) => `  panel "${q.panel}": ${q.promql}\n    last result: ${JSON.stringify(last.get(q).result)}`).join('\n'));
      await nextScrape();
      assert.equal(trafficError, null);
    }

    // The router's own series are scraped too.
    assert.ok((await query('sum(pagoda_router:requests_total{outcome="success"})')).result[0].value[1] > 0);

    // The alert rules load and evaluate without error (each evaluated at least once).
    await waitFor(async () => {
      const { groups } = await api('rules');
      const rules = groups.flatMap((g) => g.rules);
      return rules.length === alertCount && rules.every((r) => r.health === 'ok' && !r.lastEvaluation.startsWith('0001'));
    }, { timeoutMs: 120000, what: 'every alert rule evaluated with health ok' });
  } finally {
    running = false;
    await Promise.all(workers);
  }
  assert.equal(trafficError, null);
});

/** An HTTPS request to nginx that trusts `ca`: resolves to { status, body }. */
function httpsRequest(url, ca, { method = 'GET', body } = {}) {
  return new Promise((resolve, reject) => {
    const req = https.request(url, {
      method, ca, headers: body ? { 'Content-Type': 'application/json' } : {},
    }, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, body: text }));
    });
    req.on('error', reject);
    req.end(body ? JSON.stringify(body) : undefined);
  });
}

it('nginx with deploy/nginx/nginx.conf terminates TLS, streams SSE from the router and rate-limits', { skip: skip || nginxSkip }, async () => {
  const dir = path.join(tmp, 'nginx');
  fs.mkdirSync(dir);
  const cert = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1',
    '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1',
    '-keyout', path.join(dir, 'tls.key'), '-out', path.join(dir, 'tls.crt')]);
  assert.equal(cert.status, 0, String(cert.stderr));
  const ca = fs.readFileSync(path.join(dir, 'tls.crt'));
  const [httpsPort, httpPort] = [await freePort(), await freePort()];
  // The deployment's file with loopback ports, the router's address, the throwaway certificate
  // and temp paths in the test's directory (nginx need not run as root).
  const temp = ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']
    .map((t) => `${t}_temp_path ${dir}/${t};`).join(' ');
  const conf = fs.readFileSync(path.join(repo, 'deploy/nginx/nginx.conf'), 'utf8')
    .replaceAll('/etc/nginx/tls/', `${dir}/`)
    .replace('server router:8000;', `server ${new URL(router.baseURL).host};`)
    .replace(/^\s*listen \[::\].*$/gm, '')
    .replace('listen 443 ssl;', `listen 127.0.0.1:${httpsPort} ssl;`)
    .replace('listen 80;', `listen 127.0.0.1:${httpPort};`)
    .replace('http {', `http { ${temp}`)
    .replace('access_log /dev/stdout;', `access_log ${dir}/access.log;`)
    .replace('error_log /dev/stderr warn;', `error_log ${dir}/error.log warn;`);
  fs.writeFileSync(path.join(dir, 'nginx.conf'), conf);
  const proc = spawn('nginx', ['-p', dir, '-e', path.join(dir, 'error.log'), '-c', path.join(dir, 'nginx.conf'),
    '-g', `daemon off; pid ${dir}/nginx.pid;`], { stdio: ['ignore', 'ignore', 'pipe'] });
  let exitStatus = null;
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => {
    exitStatus = { code, signal };
    resolve(exitStatus);
  }));
  const base = `https://127.0.0.1:${httpsPort}`;
  try {
    await waitFor(async () => exitStatus || (await httpsRequest(`${base}/health`, ca)).status === 200,
      { timeoutMs: 60000, what: 'nginx /health' });
    assert.equal(exitStatus, null, `nginx exited: ${fs.readFileSync(path.join(dir, 'error.log'), 'utf8')}`);

    // A streamed greedy chat through nginx: the same events as from the router itself.
    const model = engines[0].model;
    const body = { model, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 24, temperature: 0, stream: true };
    const viaNginx = await httpsRequest(`${base}/v1/chat/completions`, ca, { method: 'POST', body });
    assert.equal(viaNginx.status, 200, viaNginx.body);
    const direct = await (await fetch(`${router.baseURL}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
    })).text();
    const text = (sse) => sse.split('\n').filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]')
      .map((l) => JSON.parse(l.slice(6)).choices[0]?.delta?.content ?? '').join('');
    assert.ok(viaNginx.body.trimEnd().endsWith('data: [DONE]'), viaNginx.body.slice(-200));
    assert.equal(text(viaNginx.body), text(direct));
    assert.ok(text(direct).length > 0);

    // Plain HTTP redirects; /metrics is not exposed.
    assert.equal((await fetch(`http://127.0.0.1:${httpPort}/v1/models`, { redirect: 'manual' })).status, 301);
    assert.equal((await httpsRequest(`${base}/metrics`, ca)).status, 404);

    // 200 requests at once from one address: past the burst of 20 (10/s refill) nginx answers 429.
    const statuses = await Promise.all(Array.from({ length: 200 }, () => httpsRequest(`${base}/v1/models`, ca)
      .then((r) => r.status)));
    assert.ok(statuses.includes(200) && statuses.includes(429), `statuses: ${[...new Set(statuses)]}`);
    assert.ok(statuses.every((s) => s === 200 || s === 429), `statuses: ${[...new Set(statuses)]}`);
  } finally {
    if (!exitStatus) proc.kill('SIGTERM');
    await exited;
  }
});
