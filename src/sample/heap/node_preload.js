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
        let answer;
        if (request.trim() === 'heap') {
          const before = v8.getHeapStatistics();
          gc();
          const after = v8.getHeapStatistics();
          answer = {
            v: 1,
            pid: process.pid,
            used_before: before.used_heap_size,
            used_after: after.used_heap_size,
            limit: after.heap_size_limit,
          };
        } else {
          answer = { v: 1, pid: process.pid, error: 'unknown request' };
        }
        conn.end(JSON.stringify(answer) + '\n');
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
