// Multi-turn TTFT with and without bi-directional KV (docs/benchmarks.md, "Bi-directional KV").
//
//   node bench/pd/multiturn_ttft.mjs --pagoda build/src/cli/pagoda --model DIR [--load-format dummy]
//        [--conversations 4] [--turns 3] [--first-len 256] [--new-tokens 64] [--output-tokens 64]
//        [--kv-cache-memory 1G] [--threads 1] [--max-model-len 4096]
//        [--device cpu|cuda] [--serve-args 'more serve flags']
//
// For each mode (off, then on) it starts a producer and a consumer (`serve --kv-transfer-config`
// kv_both, loopback, free ports) and `pagoda router --prefill --decode` (with
// --bidirectional-kv when on), then runs the conversations one after another: turn 1 is a prompt
// of --first-len token ids, each later turn the previous prompt, its answer and --new-tokens new
// ids; every answer is --output-tokens long (ignore_eos, greedy). TTFT is measured at the client,
// from sending the streamed request to its first token. Before each turn but the first it waits
// for the router to report the previous turn's import (on) or for nothing (off), as a user's
// think time would. It prints, per mode and turn, the mean TTFT and the producer's computed
// prompt tokens, and the ratio off / on per turn.
import { spawn } from 'node:child_process';
import net from 'node:net';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]?.startsWith('--') ? 'true' : all[i + 1]]);
  return acc;
}, []));
const PAGODA = args.pagoda ?? 'build/src/cli/pagoda';
const MODEL = args.model ?? 'models/stories260K';
const CONVERSATIONS = Number(args.conversations ?? 4);
const TURNS = Number(args.turns ?? 3);
const FIRST = Number(args['first-len'] ?? 256);
const NEW = Number(args['new-tokens'] ?? 64);
const OUT = Number(args['output-tokens'] ?? 64);
const DEVICE = args.device ?? 'cpu';
// On a GPU both engines share it: --serve-args '--gpu-memory-utilization 0.4' splits it.
const ENGINE = ['--device', DEVICE, '--max-model-len', args['max-model-len'] ?? '4096',
  ...(DEVICE === 'cpu' ? ['--kv-cache-memory', args['kv-cache-memory'] ?? '1G',
    '--threads', args.threads ?? '1'] : []),
  ...(args['load-format'] ? ['--load-format', args['load-format']] : []),
  ...(args['serve-args'] ? args['serve-args'].split(' ').filter(Boolean) : [])];
const BOTH = JSON.stringify({ kv_connector: 'PagodaConnector', kv_role: 'kv_both' });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}
async function start(argv, ready) {
  const port = await freePort();
  const proc = spawn(PAGODA, argv(port), { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log = (log + d).slice(-20000); });
  const base = `http://127.0.0.1:${port}`;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`${argv(port).join(' ')} exited:\n${log}`);
    try { if (await ready(base)) break; } catch { /* not up yet */ }
    await sleep(200);
  }
  return { proc, base };
}
const engine = () => start((port) => ['serve', MODEL, '--host', '127.0.0.1', '--port', String(port),
  ...ENGINE, '--kv-transfer-config', BOTH], async (b) => (await fetch(`${b}/health`)).status === 200);
async function metric(base, name, labels = '') {
  const text = await (await fetch(`${base}/metrics`)).text();
  // The series of `name` (any labels besides those asked for, such as model_name).
  const line = text.split('\n').find((l) => l.startsWith(name) &&
    [' ', '{'].includes(l[name.length]) && l.includes(labels.slice(1, -1)));
  return line ? Number(line.split(' ').pop()) : 0;
}

function ids(n, seed) {
  const out = [];
  for (let i = 0; i < n; ++i) out.push(3 + ((seed * 7919 + i * 104729) % 250));
  return out;
}

/// One streamed turn: its TTFT (ms) and token ids.
async function turn(base, prompt) {
  const t0 = performance.now();
  const r = await fetch(`${base}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: OUT, temperature: 0, ignore_eos: true,
      stream: true, return_token_ids: true }),
  });
  let ttft = null;
  const tokens = [];
  let pending = '';
  for await (const chunk of r.body) {
    pending += Buffer.from(chunk).toString();
    let end;
    while ((end = pending.indexOf('\n\n')) >= 0) {
      const event = pending.slice(0, end);
      pending = pending.slice(end + 2);
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const j = JSON.parse(event.slice(6));
      const t = j.choices?.[0]?.token_ids ?? [];
      if (t.length && ttft === null) ttft = performance.now() - t0;
      tokens.push(...t);
    }
  }
  return { ttft, tokens };
}

async function runMode(on) {
  const [producer, consumer] = [await engine(), await engine()];
  const router = await start((port) => ['router', '--prefill', producer.base, '--decode',
    consumer.base, '--host', '127.0.0.1', '--port', String(port),
    ...(on ? ['--bidirectional-kv'] : [])], async (b) => (await fetch(`${b}/health`)).status === 200);
  const ttft = Array.from({ length: TURNS }, () => []);
  const computed = Array(TURNS).fill(0);
  const imported = () => metric(router.base, 'pagoda_router:kv_returns_total', '{outcome="imported"}');
  try {
    for (let c = 0; c < CONVERSATIONS; ++c) {
      let prompt = [1, ...ids(FIRST - 1, 1000 + c)];
      for (let t = 0; t < TURNS; ++t) {
        const before = await metric(producer.base, 'pagoda:prompt_tokens_total');
        const want = await imported();
        const r = await turn(router.base, prompt);
        ttft[t].push(r.ttft);
        computed[t] += await metric(producer.base, 'pagoda:prompt_tokens_total') - before;
        // Think time: until the turn's KV is back on the producer (on).
        while (on && (await imported()) < want + 1) await sleep(20);
        prompt = [...prompt, ...r.tokens, ...ids(NEW, 5000 + 31 * c + t)];
      }
    }
  } finally {
    for (const p of [router, producer, consumer]) p.proc.kill('SIGTERM');
    await sleep(500);
  }
  return { ttft: ttft.map((v) => v.reduce((a, b) => a + b, 0) / v.length),
    computed: computed.map((v) => v / CONVERSATIONS) };
}

const off = await runMode(false);
const on = await runMode(true);
console.log(`model ${MODEL}${args['load-format'] ? ' (dummy weights)' : ''}, ${CONVERSATIONS} ` +
  `conversations x ${TURNS} turns: first prompt ${FIRST}, +${NEW} new tokens a turn, ${OUT} ` +
  'generated');
console.log('turn | prompt | TTFT off (ms) | TTFT on (ms) | off / on | prefill tokens off | on');
for (let t = 0; t < TURNS; ++t) {
  const len = FIRST + t * (OUT + NEW);
  console.log(`${t + 1} | ${len} | ${off.ttft[t].toFixed(1)} | ${on.ttft[t].toFixed(1)} | ` +
    `${(off.ttft[t] / on.ttft[t]).toFixed(2)}x | ${off.computed[t]} | ${on.computed[t]}`);
}
