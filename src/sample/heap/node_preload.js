// leakwatch's heap reader for Node, preloaded into every Node process a
// `leakwatch run` starts (NODE_OPTIONS=--require this file). It listens on a
// Unix socket, D/<pid>.sock, in leakwatch's private directory D
// (LEAKWATCH_NODE_DIR, mode 0700), and answers one request line:
//
//   heap\n  ->  {"v":1,"pid":P,"used_before":B,"used_after":A,"limit":L}\n
//
// `used_before` is V8's used_heap_size as asked, `used_after` the same after
// a full collection (the live heap), `limit` the heap's maximum
// (heap_size_limit), all in bytes. Nothing else runs in the process: no
// timer, no port, and the server does not keep the process alive. Any
// failure leaves the program as it was.
//
// With LEAKWATCH_NODE_SITES=N (`--js-sites`), V8's sampling heap profiler
// runs from the start (HeapProfiler.startSampling, one sample per N bytes
// allocated on average, through an in-process inspector session: no port),
// and the answer carries "sites": the live sampled bytes after the
// collection (V8 scales each sample to an unbiased estimate), summed by the
// innermost frame of the program's own code (a frame with a script that is
// not node:internal), the largest MAX_SITES, each {"s": "fn (file:line)",
// "b": bytes, "t": its stack, innermost first, one frame a line}.
'use strict';
(function leakwatchHeap() {
  try {
    const dir = process.env.LEAKWATCH_NODE_DIR;
    if (!dir) return;
    const threads = require('worker_threads');
    if (!threads.isMainThread) return;
    const fs = require('fs');
    const net = require('net');
    const path = require('path');
    const v8 = require('v8');
    const vm = require('vm');
    // A collection on demand, without exposing `gc` to the program.
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc');
    const MAX_SITES = 200;
    const MAX_FRAMES = 8;
    const interval = parseInt(process.env.LEAKWATCH_NODE_SITES || '', 10);
    let session = null;
    if (interval > 0) {
      const inspector = require('inspector');
      session = new inspector.Session();
      session.connect();
      session.post('HeapProfiler.startSampling', { samplingInterval: interval });
    }
    const frameName = (f) => {
      const fn = f.functionName || '(anonymous)';
      return fn + ' (' + f.url.replace(/^file:\/\//, '') + ':' + (f.lineNumber + 1) + ')';
    };
    const isOwn = (f) => f.url !== '' && !f.url.startsWith('node:');
    // This file's own allocations (its server, its answers) are leakwatch's.
    const self = 'file://' + __filename;
    const isSelf = (f) => f.url === self || f.url === __filename;
    // The profile's tree folded into sites: each node's selfSize goes to
    // the innermost own frame of its stack.
    const fold = (head) => {
      const bySite = new Map();
      const walk = (node, stack) => {
        if (isSelf(node.callFrame)) return;
        stack.push(node.callFrame);
        if (node.selfSize > 0) {
          let i = stack.length - 1;
          while (i >= 0 && !isOwn(stack[i])) i--;
          const name = i >= 0 ? frameName(stack[i]) : '(V8 and Node internals)';
          let site = bySite.get(name);
          if (!site) {
            const frames = [];
            for (let j = stack.length - 1; j >= 0 && frames.length < MAX_FRAMES; j--) {
              if (stack[j].url !== '') frames.push(frameName(stack[j]));
            }
            site = { s: name, b: 0, t: frames.join('\n') };
            bySite.set(name, site);
          }
          site.b += node.selfSize;
        }
        for (const child of node.children || []) walk(child, stack);
        stack.pop();
      };
      walk(head, []);
      return Array.from(bySite.values()).sort((a, b) => b.b - a.b).slice(0, MAX_SITES);
    };
    const sock = path.join(dir, process.pid + '.sock');
    try { fs.unlinkSync(sock); } catch (e) { /* none yet */ }
    const server = net.createServer((conn) => {
      let request = '';
      conn.setEncoding('utf8');
      conn.on('error', () => {});
      conn.on('data', (chunk) => {
        request += chunk;
        if (request.length > 64) { conn.destroy(); return; }
        if (request.indexOf('\n') < 0) return;
        if (request.trim() !== 'heap') {
          conn.end(JSON.stringify({ v: 1, pid: process.pid, error: 'unknown request' }) + '\n');
          return;
        }
        const before = v8.getHeapStatistics();
        gc();
        const after = v8.getHeapStatistics();
        const answer = {
          v: 1,
          pid: process.pid,
          used_before: before.used_heap_size,
          used_after: after.used_heap_size,
          limit: after.heap_size_limit,
        };
        if (!session) {
          conn.end(JSON.stringify(answer) + '\n');
          return;
        }
        session.post('HeapProfiler.getSamplingProfile', (err, result) => {
          if (!err && result && result.profile) {
            try { answer.sites = fold(result.profile.head); } catch (e) { /* heap only */ }
          }
          conn.end(JSON.stringify(answer) + '\n');
        });
      });
    });
    server.on('error', () => {});
    server.listen(sock, () => {
      try { fs.chmodSync(sock, 0o600); } catch (e) { /* the directory is private */ }
    });
    server.unref();
    process.on('exit', () => {
      try { fs.unlinkSync(sock); } catch (e) { /* gone already */ }
    });
  } catch (e) {
    // The program runs as it would without leakwatch.
  }
})();
