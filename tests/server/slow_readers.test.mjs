// Suite: a client that stops reading a stream holds at most --max-stream-buffer of the server's
// memory: past it the stream ends with an error event, [DONE] and the end of the chunked body,
// and its request is aborted (the engine goes idle while the client still holds the connection).
// At shutdown, when --shutdown-timeout expires, every open stream ends the same way.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { describe, it } from 'node:test';
import { finishedRequests, readMetrics, startServer, waitFor, waitForIdle } from './lib/harness.mjs';

function rssBytes(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]) * 1024;
}

/** Sends `body` to `path` on a raw connection that is paused (not read) until resume(). */
function pausedRequest(server, path, body) {
  const socket = net.connect(server.port, '127.0.0.1');
  const json = JSON.stringify(body);
  socket.write(`POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
               `Content-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`);
  socket.pause();
  const chunks = [];
  socket.on('data', (c) => chunks.push(c));
  const closed = new Promise((resolve) => socket.on('close', resolve));
  return {
    resume() { socket.resume(); },
    async bytes() { await closed; return Buffer.concat(chunks); },
    destroy() { socket.destroy(); },
  };
}

/** The events of a chunked SSE response (bytes), and whether its chunked body ended. */
function events(raw) {
  let at = raw.indexOf('\r\n\r\n') + 4;
  const parts = [];
  let ended = false;
  while (at < raw.length) {
    const eol = raw.indexOf('\r\n', at);
    if (eol < 0) break;
    const size = parseInt(raw.subarray(at, eol).toString('latin1'), 16);
    if (size === 0) {
      ended = true;
      break;
    }
    parts.push(raw.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
  const text = Buffer.concat(parts).toString('utf8');
  return { events: text.split('\n\n').filter((e) => e), ended };
}

describe('slow readers', () => {
  it('a stream past --max-stream-buffer ends with an error and its request is aborted', async () => {
    const server = await startServer(['--kv-cache-memory', '64M', '--max-stream-buffer', '64K']);
    try {
      const before = await readMetrics(server.baseURL);
      const rss0 = rssBytes(server.proc.pid);
      // 32 completions with 20 alternatives per token: megabytes of events, more than the
      // socket buffers hold.
      const client = pausedRequest(server, '/v1/completions', {
        model: server.model, prompt: 'Once upon a time', n: 32, max_tokens: 400,
        ignore_eos: true, logprobs: 20, stream: true,
      });
      // The engine aborts the request while the client still reads nothing.
      await waitFor(async () => finishedRequests(await readMetrics(server.baseURL)) -
        finishedRequests(before) >= 32, { what: 'the 32 completions to end' });
      await waitForIdle(server.baseURL);
      assert.match(server.log(), /slower than it is produced/);
      client.resume();
      const { events: evs, ended } = events(await client.bytes());
      assert.ok(ended, 'the chunked body ends');
      assert.equal(evs.at(-1), 'data: [DONE]');
      const error = JSON.parse(evs.at(-2).slice('data: '.length)).error;
      assert.match(error.message, /too slowly/);
      // Memory: nowhere near the megabytes the request would have produced.
      assert.ok(rssBytes(server.proc.pid) - rss0 < 64 << 20, 'RSS grew by less than 64 MB');
      // The server serves on.
      const r = await fetch(`${server.baseURL}/v1/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: 'Once', max_tokens: 2 }),
      });
      assert.equal(r.status, 200);
    } finally {
      assert.deepEqual(await server.stop(), { code: 0, signal: null });
    }
  });
});

describe('shutdown', () => {
  it('when --shutdown-timeout expires, open streams get an error event, [DONE] and the end', async () => {
    const server = await startServer(['--kv-cache-memory', '64M', '--max-num-seqs', '1',
                                      '--shutdown-timeout', '0']);
    const streams = [];
    for (let i = 0; i < 6; ++i) {
      const r = await fetch(`${server.baseURL}/v1/chat/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: `Story ${i}` }],
                               max_tokens: 400, ignore_eos: true, stream: true }),
      });
      assert.equal(r.status, 200);
      // The role chunk comes at once: the stream is open.
      const reader = r.body.getReader();
      const first = await reader.read();
      streams.push({ reader, text: new TextDecoder().decode(first.value) });
    }
    const stopped = server.stop();
    const results = await Promise.all(streams.map(async (s) => {
      const decoder = new TextDecoder();
      for (;;) {
        const { value, done } = await s.reader.read();  // rejects on a body cut short
        if (done) return s.text;
        s.text += decoder.decode(value, { stream: true });
      }
    }));
    assert.deepEqual(await stopped, { code: 0, signal: null });
    let errors = 0;
    for (const text of results) {
      const evs = text.split('\n\n').filter((e) => e);
      assert.equal(evs.at(-1), 'data: [DONE]');
      const last = JSON.parse(evs.at(-2).slice('data: '.length));
      if (last.error) {
        assert.match(last.error.message, /shutting down/);
        ++errors;
      }
    }
    assert.ok(errors >= 1, 'at least the queued streams were ended by the shutdown');
  });
});
