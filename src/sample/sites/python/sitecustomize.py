# -*- coding: utf-8 -*-
"""leakwatch --py-sites bootstrap, imported by Python as `sitecustomize`.

leakwatch (src/sample/sites/python/mod.rs) writes this file into a private directory
D/boot (mode 0700), puts D/boot first on the command's PYTHONPATH and sets
LEAKWATCH_PY_DIR=D and LEAKWATCH_PY_FRAMES=N. In every Python 3.7+ process
of the command's tree it then:

1. starts tracemalloc with N frames (unless the program already traces);
2. answers leakwatch's requests on the Unix socket D/<pid>.sock from one OS
   thread blocked in accept(): no CPU while idle, no signal taken from the
   program (gunicorn and Celery own USR1/USR2/HUP);
3. opens a fresh endpoint of its own in every forked child
   (os.register_at_fork), since threads do not survive fork;
4. removes its endpoint at exit;
5. imports the `sitecustomize` the environment would have imported without
   leakwatch (the next one on sys.path after D/boot), under that name.

`leakwatch attach --py-sites` runs this file in a process already running
instead (src/sample/sites/python/attach.rs): with `_leakwatch_attach` =
(D, N, leakwatch's pid) in its globals it only calls `_attach`, which does
1-4 from then on, and a `detach` request (or its leakwatch gone) undoes them.

Only grouped statistics leave the process (top allocation sites with their
tracebacks, sizes and counts; on request live objects counted by type, as
objgraph counts them), never heap contents. The wire format is
specified in src/sample/sites/python/wire.rs (version 1).

It must never break the program: every failure is swallowed, said once on
stderr ("leakwatch: ...") and written to D/<pid>.err for leakwatch to show.
The syntax stays parseable by Python 2.7, so a Python 2 interpreter in the
tree still reaches its own sitecustomize instead of failing on a SyntaxError;
interpreters older than 3.7 only chain.
"""

import os
import sys

_FILE = os.path.abspath(__file__)
_DIR = os.path.dirname(_FILE)
# The file name tracemalloc records for this module's frames.
_CODE_FILE = sys._getframe().f_code.co_filename
# Set in sys.modules by the first copy: keeps this module alive once
# `sitecustomize` names the chained module, and marks the process as set up.
_MARK = "_leakwatch_sitecustomize"
_FORMAT = "leakwatch-py-sites"
_VERSION = 1
_DEFAULT_FRAMES = 1  # leakwatch always sets LEAKWATCH_PY_FRAMES
_MAX_REQUEST = 65536
# A client that connects and sends nothing cannot hold the answering thread longer.
_IO_TIMEOUT_S = 10.0
# Attached: how often the answering thread looks whether its leakwatch is alive.
_OWNER_CHECK_S = 5.0
_MT_WARNING = r"This process \(pid=\d+\) is multi-threaded, use of fork"


class _S(object):
    """Per-process state. Reset in forked children."""

    dir = None
    pid = 0
    sock = None
    path = None
    said = False
    err_written = False
    forked = False
    started = 0.0
    seq = 0
    start_thread = None
    tm = None
    prev = None  # ({traceback: bytes}, {frame: bytes}) at the previous answer
    sticky = None  # ({traceback: row}, {frame: row}) reported before
    fork_filter = None  # our warnings filter for the 3.12+ fork warning
    internal = None  # filename -> bool: not a "user" frame
    time = None
    socket_mod = None
    serve_frame = None  # (file, line) of the answering thread's call into _handle
    conn = None  # the connection being answered
    gc = None
    prev_types = None  # {type name: count} at the previous answer that counted types
    sticky_types = None  # {type name: row} reported before
    untraced = (0, 0)  # tracked objects and their bytes from before tracing started
    tm_ours = False  # tracemalloc was started here (and is stopped at detach)
    detach_after = False  # a detach request was answered: stop after sending it
    owner = 0  # attached: the leakwatch whose session this is (0: started with the program)


def _say(msg):
    """Reports a failure: once per process on stderr (inherited by forked
    children, so a pool does not repeat its parent), and in D/<pid>.err."""
    try:
        line = ("leakwatch: %s\n" % (msg,)).encode("utf-8", "replace")
    except Exception:
        return
    if not _S.said:
        _S.said = True
        try:
            os.write(2, line)
        except Exception:
            pass
    _write_err(line)


def _write_err(line):
    if _S.err_written or not _S.dir:
        return
    _S.err_written = True
    try:
        path = os.path.join(_S.dir, "%d.err" % os.getpid())
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags, 384)  # 0o600, spelled so Python 2 parses it
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except Exception:
        pass


def _now():
    return _S.time.monotonic()


# ---------------------------------------------------------------- set-up


def _init():
    d = os.environ.get("LEAKWATCH_PY_DIR")
    if not d:
        _say("LEAKWATCH_PY_DIR is not set although the bootstrap is on PYTHONPATH; not instrumented")
        return
    try:
        frames = int(os.environ.get("LEAKWATCH_PY_FRAMES", _DEFAULT_FRAMES))
    except ValueError:
        frames = _DEFAULT_FRAMES
    _start(d, frames)


def _start(d, frames):
    """Traces with `frames` frames and answers on d/<pid>.sock."""
    _S.dir = d
    if sys.version_info < (3, 7):
        # Expected, not a failure: no stderr line, only the reason for leakwatch.
        _write_err(
            (
                "leakwatch: Python %d.%d is too old for --py-sites (3.7 or later); not instrumented\n"
                % sys.version_info[:2]
            ).encode("utf-8")
        )
        return
    try:
        # Everything the answering thread needs is imported here, on the
        # main thread at start-up: a fork while another thread is inside an
        # import leaves that module's import lock held forever in the child,
        # and the child's next import of it hangs. The thread never imports.
        import _thread
        import _socket
        import _tracemalloc
        import gc
        import time

        if not hasattr(_tracemalloc, "_get_traces"):
            import tracemalloc  # noqa: F401
    except ImportError as e:
        _say("this interpreter has no %s (not CPython?); not instrumented" % (e.name,))
        return
    _S.tm = _tracemalloc
    _S.gc = gc
    _S.time = time
    _S.socket_mod = _socket
    # Captured now, before the program can monkey-patch threads into
    # greenlets (gevent, eventlet): the listener must be a real OS thread.
    _S.start_thread = _thread.start_new_thread
    frames = max(1, min(frames, 1000))
    _S.started = _now()
    _S.pid = os.getpid()
    if not _tracemalloc.is_tracing():  # PYTHONTRACEMALLOC / -X tracemalloc: keep theirs
        # The objects alive now (the interpreter's and site's, ~0.5 ms for
        # 10,000) are tracked but never traced: the untracked estimate
        # subtracts them. Measured untraced, before tracing starts.
        try:
            alive = gc.get_objects()
            _S.untraced = (len(alive), sum(map(sys.getsizeof, alive)))
            del alive
        except Exception:
            pass
        _tracemalloc.start(frames)
        _S.tm_ours = True
    try:
        _listen(_socket)
    except OSError as e:
        _say("cannot listen on %s: %s" % (os.path.join(d, "%d.sock" % os.getpid()), e))
    os.register_at_fork(before=_before_fork, after_in_child=_after_child)
    import atexit

    atexit.register(_cleanup)


def _listen(_socket):
    """Binds D/<pid>.sock and starts the answering thread."""
    pid = os.getpid()
    path = os.path.join(_S.dir, "%d.sock" % pid)
    try:
        # A file with our pid is ours: left by this process' previous image
        # (exec) or by a dead process whose pid we reuse.
        os.unlink(path)
    except OSError:
        pass
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.bind(path)
        s.listen(8)
        if _S.owner:
            s.settimeout(_OWNER_CHECK_S)
        _S.sock, _S.path, _S.pid = s, path, pid
        _S.start_thread(_serve, (s, pid, _socket))
    except BaseException:
        # No endpoint without a thread behind it: leakwatch would wait for nothing.
        _S.sock = None
        s.close()
        try:
            os.unlink(path)
        except OSError:
            pass
        raise


def _cleanup():
    if _S.sock is None or _S.pid != os.getpid():
        return  # a forked child exiting: the parent's endpoint is not ours
    _S.sock = None
    try:
        os.unlink(_S.path)
    except OSError:
        pass


# ---------------------------------------------------------------- fork


def _before_fork():
    # Python 3.12+ warns (DeprecationWarning) when a process with more than
    # one thread forks. When the only other thread is ours it is our doing,
    # and ours holds no lock a child could inherit: hide that warning then,
    # and only then. 3.13 warns after the after_in_parent hooks, so the
    # filter is not removed after the fork but re-decided before each one;
    # it matches nothing but this warning.
    if sys.version_info < (3, 12):
        return
    try:
        ours = _S.sock is not None and len(os.listdir("/proc/self/task")) == 2
        if not ours and _S.fork_filter is None:
            return
        # 3.13 does not import the Python module at startup; its filters
        # list is the one the C warnings code reads.
        import warnings

        if not hasattr(warnings, "_filters_mutated"):  # 3.14 reworked it: leave it be
            return
        present = _S.fork_filter is not None and any(f is _S.fork_filter for f in warnings.filters)
        if ours and not present:
            warnings.filterwarnings("ignore", message=_MT_WARNING, category=DeprecationWarning)
            _S.fork_filter = warnings.filters[0]
        elif present and not ours:
            warnings.filters.remove(_S.fork_filter)
            warnings._filters_mutated()
    except Exception:
        pass


def _after_child():
    # The parent's endpoint and the connection it may be answering: close
    # our copies (never unlink, never shut down: they are the parent's).
    for name in ("sock", "conn"):
        old = getattr(_S, name)
        setattr(_S, name, None)
        try:
            if old is not None:
                old.close()
        except Exception:
            pass
    _S.forked = True
    _S.err_written = False
    _S.seq = 0
    _S.prev = None
    _S.sticky = None
    _S.prev_types = None
    _S.sticky_types = None
    if _S.tm is None or _S.start_thread is None:
        return
    _S.started = _now()
    try:
        _listen(_S.socket_mod)
    except OSError as e:
        if os.path.isdir(_S.dir):  # gone: leakwatch has finished, nothing to say
            _say("cannot listen on %s: %s" % (os.path.join(_S.dir, "%d.sock" % os.getpid()), e))
    except Exception as e:
        _say("cannot answer in forked child %d: %s: %s" % (os.getpid(), type(e).__name__, e))


# ---------------------------------------------------------------- serving


def _serve(s, pid, _socket):
    while True:
        try:
            fd, _addr = s._accept()
        except _socket.timeout:
            # Attached (the listening socket has a timeout then): a session
            # whose leakwatch is gone, killed before it could detach, ends
            # here, so tracing never outlives it.
            if _S.sock is s and not os.path.exists("/proc/%d" % _S.owner):
                _detach()
                return
            continue
        except Exception as e:
            if _S.sock is s and _S.pid == os.getpid():
                _say("stopped answering on %s: %s" % (_S.path, e))
            return
        conn = None
        try:
            conn = _S.conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, fd)
            _handle(conn)
        except Exception as e:
            _say("could not answer a request: %s: %s" % (type(e).__name__, e))
        finally:
            _S.conn = None
            try:
                if conn is not None:
                    conn.close()
                else:
                    os.close(fd)
            except Exception:
                pass
        if _S.detach_after:
            _detach()
            return


def _handle(conn):
    # Every allocation of the answering thread has this frame in its
    # traceback (unless cut by the frame limit): it marks them as ours.
    _S.serve_frame = (_CODE_FILE, sys._getframe(1).f_lineno)
    conn.settimeout(_IO_TIMEOUT_S)
    data = b""
    while b"\n" not in data and len(data) < _MAX_REQUEST:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    line = data.split(b"\n", 1)[0].strip()
    try:
        req = _parse_request(line.decode("utf-8")) if line else {}
    except ValueError as e:
        req = {"op": "invalid", "detail": str(e)}
    answer = _answer(req)
    out = []
    _dump(answer, out)
    out.append("\n")
    out = "".join(out).encode("utf-8")
    flags = getattr(_S.socket_mod, "MSG_NOSIGNAL", 0)  # a closed peer must not SIGPIPE us
    view = memoryview(out)
    while len(view):
        n = conn.send(view, flags)
        view = view[n:]


def _int_arg(req, key, default):
    v = req.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        return default
    return max(0, min(v, 100000))


def _answer(req):
    base = {
        "format": _FORMAT,
        "version": _VERSION,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "run": req.get("run") if isinstance(req.get("run"), int) else None,
    }
    op = req.get("op", "snapshot")
    if req.get("version", _VERSION) != _VERSION:
        base["error"] = "request version %r not understood (this bootstrap speaks %d)" % (req.get("version"), _VERSION)
    elif op == "ping":
        base["seq"] = _S.seq
    elif op == "detach":
        base["detached"] = True
        _S.detach_after = True
    elif op != "snapshot":
        base["error"] = "unknown request %r (%s)" % (op, req.get("detail", "expected op snapshot, ping or detach"))
    elif not _S.tm.is_tracing():
        base["error"] = "tracemalloc is not tracing: the program stopped it"
    else:
        limits = (
            _int_arg(req, "top_bytes", 50),
            _int_arg(req, "top_blocks", 20),
            _int_arg(req, "top_growth", 20),
            _int_arg(req, "sticky_max", 200),
        )
        type_limits = (
            _int_arg(req, "top_types", 0),
            _int_arg(req, "top_types_bytes", 10),
            _int_arg(req, "top_types_growth", 20),
            _int_arg(req, "sticky_types", 100),
        )
        _S.seq += 1
        snap = {"seq": _S.seq}
        try:
            _snapshot(snap, limits, type_limits)
            base.update(snap)
        except Exception as e:  # e.g. MemoryError: an answer that says so beats a silent hang-up
            base["error"] = "snapshot failed: %s: %s" % (type(e).__name__, e)
    return base


# ---------------------------------------------------------------- snapshot


def _snapshot(out, limits, type_limits):
    time = _S.time
    tm = _S.tm
    t0 = time.perf_counter()
    current, peak = tm.get_traced_memory()
    overhead = tm.get_tracemalloc_memory()
    limit = tm.get_traceback_limit()
    traces = _traces(tm)
    t1 = time.perf_counter()
    # Everything below runs traced too: each allocation here costs ~1.5 us
    # at 16 frames, so the work per trace allocates nothing (a running sum
    # per trace made this 20x slower) and the work per group little. Raw
    # tracebacks are tuples of (filename, lineno), innermost first; they are
    # their own keys (the previous answer's sizes are looked up by value).
    groups = {}
    get = groups.get
    for t in traces:
        tb = t[2]
        sizes = get(tb)
        if sizes is None:
            groups[tb] = [t[1]]
        else:
            sizes.append(t[1])
    del traces, get
    rows, totals = _tb_rows(groups)
    del groups
    lines = _line_rows(rows)
    prev = _S.prev  # None before this process' first answer (or fork)
    sticky = _S.sticky or ({}, {})
    tb_sites, tb_other = _select(rows, prev and prev[0], sticky[0], limits)
    line_sites, line_other = _select(lines, prev and prev[1], sticky[1], limits)
    # For the next answer: every group's size (growth) and what was reported (sticky).
    _S.prev = ({r[2]: r[0] for r in rows}, {r[2]: r[0] for r in lines})
    _S.sticky = ({r[2]: r for r, _p in tb_sites}, {r[2]: r for r, _p in line_sites})
    files = {}
    out["by_traceback"] = {
        "groups": len(rows),
        "other_bytes": tb_other[0],
        "other_blocks": tb_other[1],
        "sites": [_tb_site(r, p, files) for r, p in tb_sites],
    }
    out["by_line"] = {
        "groups": len(lines),
        "other_bytes": line_other[0],
        "other_blocks": line_other[1],
        "sites": [_line_site(r, p, files) for r, p in line_sites],
    }
    out["files"] = [f for f, _i in sorted(files.items(), key=lambda kv: kv[1])]
    types_ms = None
    if type_limits[0]:
        # Before the peak is reset: counting's own memory is this answer's.
        types_ms = _types(out, type_limits, totals)
    peak_since = "start"
    if hasattr(tm, "reset_peak"):  # 3.9+
        if _S.seq > 1:
            peak_since = "previous_answer"
        tm.reset_peak()
    t2 = time.perf_counter()
    out.update(
        {
            "seq": _S.seq,
            "time_unix": time.time(),
            "uptime_s": round(_now() - _S.started, 6),
            "forked": _S.forked,
            "argv0": _clean(sys.argv[0]) if getattr(sys, "argv", None) else None,
            "executable": _clean(sys.executable or ""),
            "python": "%d.%d.%d" % sys.version_info[:3],
            "implementation": sys.implementation.name,
            "frames_limit": limit,
            "totals": {
                "traced_bytes": totals[0],
                "traced_blocks": totals[1],
                "self_bytes": totals[2],
                "self_blocks": totals[3],
                "current_bytes": current,
                "peak_bytes": peak,
                "peak_since": peak_since,
                "tracemalloc_bytes": overhead,
            },
            "timing": {
                "traces_ms": round((t1 - t0) * 1000.0, 3),
                "group_ms": round((t2 - t1 - (types_ms or 0.0) / 1000.0) * 1000.0, 3),
                "types_ms": types_ms,
            },
        }
    )


def _traces(tm):
    """All live traces as (domain, size, traceback innermost first, ...)."""
    get = getattr(tm, "_get_traces", None)
    if get is not None:
        return get()
    # Public fallback, should the private function ever go: slower (a Trace
    # object per block) but the same data. Traceback is oldest first (3.7+).
    import tracemalloc

    snap = tracemalloc.take_snapshot()
    return [(0, t.size, tuple((f.filename, f.lineno) for f in reversed(t.traceback))) for t in snap.traces]


def _type_name(t):
    """Module-qualified class name (`logging.LogRecord`); builtins bare (`dict`)."""
    try:
        name = t.__qualname__
        module = t.__module__
    except Exception:
        name, module = getattr(t, "__name__", "?"), None
    if not isinstance(name, str):
        name = "?"
    if isinstance(module, str) and module != "builtins":
        name = module + "." + name
    return _clean(name)


def _types(out, limits, totals):
    """Live objects by type, the way objgraph counts them: every object the
    cyclic GC tracks (gc.get_objects(), no collection first), its count and
    sys.getsizeof total per module-qualified class name, and one row for
    the rest tracemalloc sees (untracked leaves such as str, bytes, int,
    and storage no object's size covers) as traced minus tracked.

    Cost: about 0.1 s per million tracked objects under tracemalloc (3.11):
    one Python loop that only appends (an int per object would be an
    allocation, traced, 8x slower), then the sizes in C through the type's
    own __sizeof__ (sys.getsizeof allocates a bound method per call) plus
    the per-type header getsizeof adds. The untracked row counts the
    objects alive before tracing started as traced (see _init). Holding a reference to every object
    writes each one's reference count: in a forked child that unshares the
    pages of its parent's objects, as a full collection would. An object
    the program drops while it is counted is freed (its __del__ run) when
    counting ends, in this thread."""
    time = _S.time
    t0 = time.perf_counter()
    objs = _S.gc.get_objects()
    groups = {}
    get = groups.get
    for o in objs:
        t = type(o)
        same = get(t)
        if same is None:
            groups[t] = [o]
        else:
            same.append(o)
    del objs
    o = same = None
    getsize = sys.getsizeof
    by_name = {}
    tracked_n = tracked_b = 0
    for t, same in groups.items():
        n = len(same)
        try:
            sizeof = t.__sizeof__
            b = sum(map(sizeof, same)) + n * (getsize(same[0]) - sizeof(same[0]))
        except Exception:
            try:
                b = sum(map(getsize, same))
            except Exception:
                b = 0
        name = _type_name(t)
        e = by_name.get(name)
        if e is None:
            by_name[name] = [n, b]
        else:
            e[0] += n
            e[1] += b
        tracked_n += n
        tracked_b += b
    del groups, same
    rows = [(e[0], e[1], name) for name, e in by_name.items()]
    del by_name
    chosen, other = _select(rows, _S.prev_types, _S.sticky_types, limits)
    _S.prev_types = {r[2]: r[0] for r in rows}
    _S.sticky_types = {r[2]: r for r, _p in chosen}
    # Traced by the program, to compare with the tracked objects that were
    # allocated under tracing.
    program_b = totals[0] - totals[2] + _S.untraced[1]
    program_n = totals[1] - totals[3] + _S.untraced[0]
    out["by_type"] = {
        "types": len(rows),
        "objects": tracked_n,
        "bytes": tracked_b,
        "other_count": other[0],
        "other_bytes": other[1],
        "untracked_count": max(0, program_n - tracked_n),
        "untracked_bytes": max(0, program_b - tracked_b),
        "rows": [{"type": r[2], "count": r[0], "bytes": r[1], "prev_count": p} for r, p in chosen],
    }
    return round((time.perf_counter() - t0) * 1000.0, 3)


def _tb_rows(groups):
    """Rows (bytes, blocks, traceback) without the bootstrap's own
    allocations: innermost frame in this file, or made by the answering
    thread (e.g. importing json); and the totals (traced bytes, blocks,
    own bytes, blocks)."""
    rows = []
    append = rows.append
    self_b = self_n = 0
    own = _CODE_FILE
    serve = _S.serve_frame
    for tb, sizes in groups.items():
        if tb and (tb[0][0] == own or serve in tb):
            self_b += sum(sizes)
            self_n += len(sizes)
        else:
            append((sum(sizes), len(sizes), tb))
    traced_b = self_b + sum(r[0] for r in rows)
    traced_n = self_n + sum(r[1] for r in rows)
    return rows, (traced_b, traced_n, self_b, self_n)


def _internal_file(filename):
    """Not a "user" file: this one, frozen modules, unknown, the standard
    library (importlib, tracemalloc, json, ...) outside site-packages."""
    if filename == _CODE_FILE or filename.startswith("<frozen ") or filename == "<unknown>":
        return True
    stdlib = os.path.dirname(getattr(os, "__file__", "") or "/nonexistent") + os.sep
    return filename.startswith(stdlib) and not (
        filename.startswith(stdlib + "site-packages" + os.sep) or filename.startswith(stdlib + "dist-packages" + os.sep)
    )


def _line_rows(rows):
    """Rows (bytes, blocks, frame, tracebacks, internal) per innermost user
    frame. A traceback with no user frame goes to its innermost frame
    outside this file, flagged internal. Sizes are appended and summed at
    the end: a running sum would allocate an int per row, traced."""
    internal = _S.internal
    if internal is None:
        internal = _S.internal = {}
    own = _CODE_FILE
    acc = {}
    # Index loops: `for f in tb` allocates an iterator per row, and at 16
    # frames each traced allocation costs more than the rest of the loop.
    for b, n, tb in rows:
        frame = None
        depth = len(tb)
        i = 0
        while i < depth:
            name = tb[i][0]
            v = internal.get(name)
            if v is None:
                v = internal[name] = _internal_file(name)
            if not v:
                frame = tb[i]
                break
            i += 1
        flagged = frame is None
        if flagged:
            frame = tb[0] if depth else ("<unknown>", 0)
            i = 0
            while i < depth:
                if tb[i][0] != own:
                    frame = tb[i]
                    break
                i += 1
        e = acc.get(frame)
        if e is None:
            acc[frame] = ([b], [n], flagged)
        else:
            e[0].append(b)
            e[1].append(n)
    return [(sum(e[0]), sum(e[1]), f, len(e[0]), e[2]) for f, e in acc.items()]


def _select(rows, prev, sticky, limits):
    """The rows to report: top by bytes, by blocks, by growth since the
    previous answer, and rows reported before (so a site's series goes on
    once it has appeared, at 0 bytes once freed; the largest sticky_max of
    those). A row's key is row[2]. Returns ([(row, prev bytes or None)],
    (other bytes, other blocks)). Type rows are (count, bytes, name): the
    same selection by count, by bytes, by growth in count."""
    top_bytes, top_blocks, top_growth, sticky_max = limits
    chosen = {}
    for r in sorted(rows, key=lambda r: r[0], reverse=True)[:top_bytes]:
        chosen[r[2]] = r
    for r in sorted(rows, key=lambda r: r[1], reverse=True)[:top_blocks]:
        chosen[r[2]] = r
    if prev is not None and top_growth:
        pget = prev.get
        for r in sorted(rows, key=lambda r: r[0] - pget(r[2], 0), reverse=True)[:top_growth]:
            if r[0] > pget(r[2], 0):
                chosen[r[2]] = r
    if sticky:
        by_key = None
        kept = []
        for k, old in sticky.items():
            if k not in chosen:
                if by_key is None:
                    by_key = {r[2]: r for r in rows}
                r = by_key.get(k)
                kept.append(r if r is not None else (0, 0) + old[2:])
        kept.sort(key=lambda r: r[0], reverse=True)
        for r in kept[:sticky_max]:
            chosen[r[2]] = r
    sites = sorted(chosen.values(), key=lambda r: (r[0], r[1]), reverse=True)
    other_b = sum(r[0] for r in rows) - sum(r[0] for r in sites)
    other_n = sum(r[1] for r in rows) - sum(r[1] for r in sites)
    return [(r, prev.get(r[2], 0) if prev is not None else None) for r in sites], (other_b, other_n)


def _file_index(files, name):
    i = files.get(name)
    if i is None:
        i = files[name] = len(files)
    return i


def _clean(s):
    """A string JSON and Rust accept: the bytes of undecodable file names
    (surrogate escapes) become \\xNN, as leakwatch shows every byte that
    is not UTF-8, instead of lone surrogates."""
    if not isinstance(s, str):
        s = str(s)
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _frame(files, f):
    return [_file_index(files, _clean(f[0])), int(f[1] or 0)]


def _tb_site(r, prev_b, files):
    return {"frames": [_frame(files, f) for f in r[2]], "bytes": r[0], "blocks": r[1], "prev_bytes": prev_b}


def _line_site(r, prev_b, files):
    return {
        "frame": _frame(files, r[2]),
        "bytes": r[0],
        "blocks": r[1],
        "prev_bytes": prev_b,
        "tracebacks": r[3] if r[0] else 0,
        "internal": r[4],
    }


# ---------------------------------------------------------------- JSON
# Written out rather than imported: the answering thread must not import
# (see _init), and importing json at every interpreter's start-up costs
# 1.5 ms or more.

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _quote(s):
    s = _clean(s)
    if s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    return '"' + "".join(_ESCAPES.get(c) or (c if c >= " " else "\\u%04x" % ord(c)) for c in s) + '"'


def _dump(o, out):
    """Appends the JSON text of o (None, bool, int, float, str, list,
    tuple, dict with str keys) to the list out."""
    if o is None:
        out.append("null")
    elif o is True:
        out.append("true")
    elif o is False:
        out.append("false")
    elif isinstance(o, int):
        out.append(str(o))
    elif isinstance(o, float):
        out.append(repr(o) if o == o and o not in (float("inf"), float("-inf")) else "null")
    elif isinstance(o, str):
        out.append(_quote(o))
    elif isinstance(o, dict):
        out.append("{")
        first = True
        for k, v in o.items():
            if not first:
                out.append(",")
            first = False
            out.append(_quote(k))
            out.append(":")
            _dump(v, out)
        out.append("}")
    else:
        out.append("[")
        first = True
        for v in o:
            if not first:
                out.append(",")
            first = False
            _dump(v, out)
        out.append("]")


def _parse_request(text):
    """Parses a flat JSON object whose values are integers, strings,
    true/false/null: all a request has. Raises ValueError otherwise."""
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError("not a JSON object")
    body = text[1:-1]
    req = {}
    i, n = 0, len(body)

    def string(i):
        if body[i] != '"':
            raise ValueError("expected a string at %d" % i)
        j = i + 1
        chars = []
        while j < n and body[j] != '"':
            if body[j] == "\\":
                j += 1
                if j >= n:
                    break
                c = body[j]
                if c == "u":
                    chars.append(chr(int(body[j + 1 : j + 5], 16)))
                    j += 4
                else:
                    chars.append({"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}.get(c, c))
            else:
                chars.append(body[j])
            j += 1
        if j >= n:
            raise ValueError("unterminated string")
        return "".join(chars), j + 1

    def skip(i):
        while i < n and body[i] in " \t\r\n":
            i += 1
        return i

    i = skip(i)
    while i < n:
        key, i = string(i)
        i = skip(i)
        if i >= n or body[i] != ":":
            raise ValueError("expected ':' after %r" % key)
        i = skip(i + 1)
        if i < n and body[i] == '"':
            value, i = string(i)
        else:
            j = i
            while j < n and body[j] not in ", \t\r\n":
                j += 1
            word = body[i:j]
            consts = {"true": True, "false": False, "null": None}
            if word in consts:
                value = consts[word]
            else:
                value = int(word)  # ValueError for anything else
            i = j
        req[key] = value
        i = skip(i)
        if i < n:
            if body[i] != ",":
                raise ValueError("expected ',' at %d" % i)
            i = skip(i + 1)
    return req


# ---------------------------------------------------------------- chaining


def _norm(p):
    try:
        return os.path.normcase(os.path.realpath(p or os.curdir))
    except Exception:
        return p


def _find_next():
    """Finds the `sitecustomize` Python would have imported without
    leakwatch: the first one on sys.path after this file's directory.
    Returns a loader thunk, or None. Runs before tracemalloc starts: under
    tracing at 16 frames the lookup took 15-35 ms instead of 1."""
    own = _norm(_DIR)
    entries = [p for p in sys.path if isinstance(p, str)]
    normed = [_norm(p) for p in entries]
    start = normed.index(own) + 1 if own in normed else 0
    search = [p for p, n in zip(entries[start:], normed[start:]) if n != own]
    if sys.version_info < (3, 4):
        return _find_imp(search)
    external = sys.modules.get("_frozen_importlib_external")
    bootstrap = sys.modules.get("_frozen_importlib")
    if external is None or bootstrap is None:  # not CPython's frozen importlib
        import importlib.machinery as external
        import importlib.util as bootstrap
    spec = external.PathFinder.find_spec("sitecustomize", search)
    if spec is None or spec.loader is None:
        return None

    def load():
        module = bootstrap.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)

    return load


def _find_imp(search):
    import imp

    try:
        found = imp.find_module("sitecustomize", search)
    except ImportError:
        return None

    def load():
        # load_module would re-execute into the module of that name (this one).
        sys.modules.pop("sitecustomize", None)
        try:
            imp.load_module("sitecustomize", *found)
        finally:
            if found[0] is not None:
                found[0].close()

    return load


def _chain(load):
    """Runs the found sitecustomize as site.py would have: a failure is said
    the way site.py says it, and the program goes on."""
    if load is None:
        return
    ours = sys.modules.get("sitecustomize")
    try:
        load()
    except Exception as err:
        if sys.modules.get("sitecustomize") is not ours and ours is not None:
            sys.modules["sitecustomize"] = ours
        if isinstance(err, ImportError) and getattr(err, "name", None) == "sitecustomize":
            return
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write(
                "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n" % (err.__class__.__name__, err)
            )


def _find_quietly():
    try:
        return _find_next()
    except Exception as e:
        _say("cannot look for the environment's own sitecustomize: %s: %s" % (type(e).__name__, e))
        return None


# ---------------------------------------------------------------- entry


def _attach(d, frames, owner):
    """Entry of `leakwatch attach --py-sites`, which runs this file in a
    process already running (through gdb, on one of its threads holding
    the GIL). An earlier session's copy, left by a leakwatch that was
    killed or by `run --keep-survivors`, is detached first: growth counts
    from this attach, answered on this session's directory only. `owner`
    is the attaching leakwatch's pid: the session ends when it is gone."""
    old = sys.modules.get(_MARK)
    stop = getattr(old, "_detach", None)
    if stop is not None:
        stop()
    handle = type(sys)(_MARK)
    handle._detach = _detach
    handle.__file__ = _FILE
    sys.modules[_MARK] = handle
    _S.owner = owner
    _start(d, frames)


def _detach():
    """Ends this copy's session: the endpoint closes (waking the answering
    thread, which then returns), tracemalloc stops if it was started here
    (its traces freed), and forked children no longer open endpoints."""
    s, path = _S.sock, _S.path
    _S.sock = None
    _S.detach_after = False
    if _S.tm is not None and _S.tm_ours:
        try:
            _S.tm.stop()
        except Exception:
            pass
    _S.tm = None
    _S.tm_ours = False
    if s is not None:
        try:
            s.shutdown(_S.socket_mod.SHUT_RDWR)
        except Exception:
            pass
        try:
            s.close()
        except Exception:
            pass
        try:
            os.unlink(path)
        except OSError:
            pass
    mine = sys.modules.get(_MARK)
    if mine is not None and getattr(mine, "_detach", None) is _detach:
        del sys.modules[_MARK]


_ATTACH = globals().get("_leakwatch_attach")
if _ATTACH is not None:
    # Run by `leakwatch attach --py-sites` (see _attach), not imported.
    _attach(*_ATTACH)
elif _MARK in sys.modules:
    # A second copy, imported by another bootstrap that chains the same way
    # (e.g. ddtrace-run's, which removes its own directory and imports
    # `sitecustomize` again): set up already, only pass the chain on.
    _chain(_find_quietly())
else:
    sys.modules[_MARK] = sys.modules.get(__name__)
    _next = _find_quietly()
    try:
        # Before the next sitecustomize runs: it may monkey-patch threads
        # (gevent), and its allocations are the program's.
        _init()
    except Exception as _e:
        _say("not instrumented: %s: %s" % (type(_e).__name__, _e))
    _chain(_next)
