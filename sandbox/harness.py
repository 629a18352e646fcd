"""Code that runs inside the sandbox: the worker (zygote) and the per-execution child.

Started as `python3 -I -S -B -c LOADER harness.py worker` (process backend: LOADER imports the
bytecode compiled once on the host; docker runs the file itself) with the standard library only
(inside the sandbox the interpreter is the system Python, not the project's virtualenv). Two
roles:

- the *worker* never runs candidate code and never sees a test's expected values. It pre-imports
  common modules once, then for each execution the host sends it a header and the execution's file
  descriptors (SCM_RIGHTS over the control socket, fd 3); it forks a *child*, waits until the child
  exits or the host says `end`, kills every other process it can see (`kill(-1)`: inside the
  sandbox's pid namespace that is exactly the execution's processes, because the worker is pid 1 and
  the namespace holds nothing else), wipes the scratch directory and reports the child's exit status
  and resource use (trusted numbers) back to the host.
- the *child* runs the candidate. For function problems it serves requests from the host on fds 3/4:
  `exec` a program or statement, `eval` an expression and return its value serialized as exact
  builtin types. The host compares values itself (sandbox/verdict.py), so whatever the candidate does
  to this process (patched builtins, an `__eq__` that is always true, exiting early) can change only
  the values it reports, never a verdict. For stdio problems the child runs the program as
  `__main__` with the case's input on stdin and exits.

Frames on every channel: 4-byte big-endian length + UTF-8 JSON.
"""

import _signal
import _socket
import marshal
import posix as os  # the os module costs ~1 ms to import in a one-shot worker; posix has all we use
import resource
import select
import sys
from _json import encode_basestring_ascii as _quote

# Imported once here, none of them costly (Debian's interpreter has all but _json and resource
# built in): an import statement in a function runs the import machinery at every call, and in a
# forked child every page that touches is a copy.

MAX_FRAME = 16 << 20
PREIMPORT = ("math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string",
             "typing", "operator", "json", "random", "copy", "fractions", "decimal", "statistics",
             "dataclasses", "array", "traceback", "io", "struct", "socket", "select")


def _read_exact(fd, n):
    chunks = []
    while n:
        b = os.read(fd, min(n, 1 << 20))
        if not b:
            return None
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def read_frame(fd):
    """A request from the host (trusted): marshal, which needs no import."""
    head = _read_exact(fd, 4)
    if head is None:
        return None
    n = int.from_bytes(head, "big")
    if n > MAX_FRAME:
        raise ValueError("frame too large")
    body = _read_exact(fd, n)
    if body is None:
        return None
    return marshal.loads(body)


def write_frame(fd, obj):
    """A reply to the host, as JSON (the host never unmarshals what the sandbox says)."""
    body = dumps(obj).encode("ascii")
    data = len(body).to_bytes(4, "big") + body
    while data:
        n = os.write(fd, data)
        data = data[n:]


def dumps(o):
    """JSON for the plain structures we send (the json package costs ~15 ms to import)."""
    q = _quote
    t = type(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if t is int:
        return int.__repr__(o)
    if t is float:
        return float.__repr__(o) if o == o and o not in (float("inf"), float("-inf")) else "null"
    if t is str:
        return q(o)
    if t is list or t is tuple:
        return "[" + ",".join([dumps(v) for v in o]) + "]"
    if t is dict:
        return "{" + ",".join([q(str(k)) + ":" + dumps(v) for k, v in o.items()]) + "}"
    raise TypeError(f"cannot send {t.__name__}")


# --- values -> tagged JSON ---------------------------------------------------------------------
# null/true/false/strings are themselves; every JSON array is a tagged node [tag, ...]; ints that
# fit in a double exactly are JSON numbers. The host decodes with type and size checks.

class Unserializable(Exception):
    pass


MAX_ITEMS = 1_000_000
MAX_DEPTH = 200


def encode(value):
    budget = [MAX_ITEMS]
    return _enc(value, 0, budget)


def _enc(x, depth, budget):
    budget[0] -= 1
    if budget[0] < 0:
        raise Unserializable("value too large")
    if depth > MAX_DEPTH:
        raise Unserializable("value nested too deeply")
    if x is None or x is True or x is False:
        return x
    t = type(x)
    # Subclasses of builtins (namedtuple, Counter, OrderedDict...) are sent as their base type's data,
    # read through the base type's own methods so an overridden __eq__/__iter__ is never consulted.
    if isinstance(x, int):
        v = int.__int__(x)
        if isinstance(x, bool):
            return bool(v)
        return v if -(1 << 53) < v < (1 << 53) else ["I", hex(v)]
    if isinstance(x, float):
        return ["f", float.hex(float.__float__(x))]
    if isinstance(x, str):
        return str.__str__(x)
    if isinstance(x, complex):
        return ["c", float.hex(complex.__getattribute__(x, "real")),
                float.hex(complex.__getattribute__(x, "imag"))]
    d = depth + 1
    if isinstance(x, tuple):
        return ["t", [_enc(v, d, budget) for v in tuple.__iter__(x)]]
    if isinstance(x, list):
        return ["l", [_enc(v, d, budget) for v in list.__iter__(x)]]
    if isinstance(x, dict):
        return ["d", [[_enc(k, d, budget), _enc(v, d, budget)] for k, v in dict.items(x)]]
    if isinstance(x, frozenset):
        return ["F", [_enc(v, d, budget) for v in frozenset.__iter__(x)]]
    if isinstance(x, set):
        return ["s", [_enc(v, d, budget) for v in set.__iter__(x)]]
    if isinstance(x, (bytes, bytearray)):
        return ["B" if isinstance(x, bytearray) else "b", bytes(x).hex()]
    if t.__module__ == "builtins" and t.__name__ in ("range", "map", "filter", "zip", "enumerate",
                                                     "reversed", "generator", "dict_keys",
                                                     "dict_values", "dict_items", "list_iterator",
                                                     "tuple_iterator", "set_iterator") \
            or t.__module__ == "collections" and t.__name__ == "deque" \
            or t.__module__ == "itertools":
        items = []
        for v in x:
            items.append(_enc(v, d, budget))
        return ["it", items]
    raise Unserializable(f"a value of type {t.__module__}.{t.__qualname__} cannot be checked "
                         "outside the sandbox (return builtin types: int, float, str, bool, None, "
                         "list, tuple, dict, set, bytes)")


# --- the child ---------------------------------------------------------------------------------

def _describe(exc):
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:
        text = type(exc).__name__
    return text[:2000]


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _serve_function(rpc_in, rpc_out):
    """Answer the host's exec/eval requests until it stops asking (the worker then kills us)."""
    import builtins
    ns = {"__name__": "__candidate__", "__builtins__": builtins}
    while True:
        req = read_frame(rpc_in)
        if req is None:
            break
        op, src = req.get("op"), req.get("src", "")
        bind = req.get("bind")
        if bind:
            ns.update(bind)  # the host's current values of the test's own names
        try:
            if op == "exec":
                code = compile(src, req.get("filename", "<test>"), "exec", dont_inherit=True)
                exec(code, ns)
                reply = {"ok": True}
            elif op == "eval":
                code = compile(src, "<test>", "eval", dont_inherit=True)
                value = eval(code, ns)
                try:
                    reply = {"ok": True, "value": encode(value)}
                except Unserializable as e:
                    reply = {"ok": False, "etype": "Unserializable", "error": str(e)}
                except RecursionError:
                    reply = {"ok": False, "etype": "Unserializable", "error": "value nested too deeply"}
            else:
                reply = {"ok": False, "etype": "ProtocolError", "error": f"unknown op {op!r}"}
        except BaseException as e:  # SystemExit and KeyboardInterrupt are failures too
            reply = {"ok": False, "etype": type(e).__name__, "error": _describe(e),
                     "memory": isinstance(e, MemoryError)}
        _flush()
        reply["id"] = req.get("id")
        write_frame(rpc_out, reply)
    _flush()
    os._exit(0)


def _run_stdio(code_src):
    import builtins
    ns = {"__name__": "__main__", "__builtins__": builtins}
    status = 0
    try:
        exec(compile(code_src, "<candidate>", "exec", dont_inherit=True), ns)
    except SystemExit as e:
        code = e.code
        status = 0 if code is None else code if isinstance(code, int) else 1
        if not isinstance(code, (int, type(None))):
            sys.stderr.write(f"{code}\n")
    except BaseException:
        import traceback
        traceback.print_exc()
        status = 1
    _flush()
    os._exit(status & 0xFF)


def _child(header, fds):
    signal = _signal
    # fds arrive as [stdin, stdout, stderr, rpc_in, rpc_out]; everything else is closed. One that
    # already sits below len(fds) is first moved up, so no dup2 below overwrites it.
    safe = []
    for fd in fds:
        while fd < len(fds):
            fd = os.dup(fd)
        safe.append(fd)
    for target, fd in enumerate(safe):
        os.dup2(fd, target, inheritable=True)
    os.closerange(len(fds), 65536)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.setsid()
    except OSError:
        pass
    if _NONDUMPABLE:
        _set_dumpable(1)  # the worker is not dumpable; the candidate's own processes may be
    limits = header["limits"]
    cpu = max(1, int(limits["cpu_s"] + 0.999))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if limits.get("as_bytes"):
        resource.setrlimit(resource.RLIMIT_AS, (limits["as_bytes"], limits["as_bytes"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.get("fsize_bytes"):
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits["fsize_bytes"], limits["fsize_bytes"]))
    if limits.get("nofile"):
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits["nofile"], limits["nofile"]))
    if limits.get("nproc"):
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["nproc"], limits["nproc"]))
    # Made here, on the execution's own descriptors: a stream caches whether its file is seekable.
    sys.stdin, sys.stdout, sys.stderr = _new_stdio()
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    random = sys.modules.get("random")
    if random is not None:  # what os.fork()'s at-fork hook did (the worker forks with libc's)
        random.seed()
    sys.argv = ["candidate"]
    if header.get("site"):  # the problem's environment (read-only): its packages, .pth files included
        import site
        site.addsitedir(header["site"])
    sys.setrecursionlimit(10000)
    if header["mode"] == "stdio":
        _run_stdio(header["code"])
    else:
        _serve_function(3, 4)


def _new_stdio():
    """The candidate's text streams on fds 0/1/2."""
    import io
    return (io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace"),
            io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                             errors="backslashreplace", write_through=False),
            io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                             errors="backslashreplace", line_buffering=True))


# --- the worker --------------------------------------------------------------------------------

_NONDUMPABLE = False


_LIBC = None


def _set_dumpable(flag):
    global _LIBC
    try:
        if _LIBC is None:
            import ctypes
            _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.prctl(4, flag, 0, 0, 0)  # PR_SET_DUMPABLE
    except Exception:
        pass


def _fork():
    """fork(2) for the worker: libc's, when ctypes is already loaded (long-lived workers), not
    os.fork(), whose CPython at-fork hooks (re-initialising interpreter locks and threading,
    calling registered Python callbacks) made every child copy ~60 more pages and cost ~0.15 ms.
    The worker is single-threaded and imports neither threading nor logging, so nothing needs
    them; the one callback registered, `random`'s re-seeding, the child does itself."""
    if _LIBC is not None:
        pid = _LIBC.fork()
        if pid < 0:
            import ctypes
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return pid
    return os.fork()


def _kill_all(own_pid, child_pid, namespaced):
    """SIGKILL every process of the execution and reap them; returns the child's wait4 result."""
    child_status = None
    while True:
        # One kill(-1) reaches every process of the namespace: the kernel holds the task list
        # while it signals, and a fork racing with it fails on the pending SIGKILL. Repeating it
        # each round is cheap insurance.
        try:
            if namespaced:
                os.kill(-1, 9)
            else:
                os.killpg(child_pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            pid, status, ru = os.wait4(-1, 0)
        except ChildProcessError:
            return child_status
        if pid == child_pid:
            child_status = (status, ru)


def _scratch_dirs(namespaced):
    """What to wipe after each execution: the working directory and, inside a sandbox whose
    /dev/shm is a directory of its own (docker's private tmpfs), that too. The process backend
    links /dev/shm to the working directory; outside a sandbox /dev/shm is the host's."""
    scratch = [os.getcwd()]
    if namespaced:
        try:
            shm, cwd = os.stat("/dev/shm"), os.stat(scratch[0])
            if (shm.st_dev, shm.st_ino) != (cwd.st_dev, cwd.st_ino):
                scratch.append("/dev/shm")
        except OSError:
            pass  # no /dev/shm at all
    return scratch


def _wipe_all(paths):
    return sum(_wipe(p) for p in paths)


def _wipe(path):
    """Empty the scratch directory; returns how many entries it removed."""
    removed = 0
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass
    stack = [path]
    dirs = []
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                is_dir = e.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                try:
                    os.chmod(e.path, 0o700)
                except OSError:
                    pass
                stack.append(e.path)
                dirs.append(e.path)
            else:
                try:
                    os.unlink(e.path)
                    removed += 1
                except OSError:
                    pass
    for d in reversed(dirs):
        try:
            os.rmdir(d)
            removed += 1
        except OSError:
            pass
    return removed


def _recv_fds(sock, bufsize, maxfds=16):
    """socket.recv_fds without importing socket.py (~15 ms in a one-shot worker) or array
    (which imports collections: ~3 ms)."""
    msg, ancdata, _flags, _addr = sock.recvmsg(bufsize, _socket.CMSG_SPACE(maxfds * 4))
    fds = []
    for level, kind, data in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += memoryview(data[: len(data) - len(data) % 4]).cast("i").tolist()
    return msg, fds


def _prepare_worker(light):
    """Before serving: pre-import the common modules and, for a long-lived worker, keep candidates
    (same uid) out of its memory (/proc/1/mem): it serves later executions. A one-shot (light)
    worker skips both (the ctypes import alone costs ~20 ms)."""
    global _NONDUMPABLE
    if light:
        return
    for name in PREIMPORT:
        try:
            __import__(name)
        except Exception:
            pass
    _set_dumpable(0)
    _NONDUMPABLE = True
    import gc
    gc.collect()
    gc.freeze()  # children then do not dirty (copy) every pre-imported object's page in GC passes


def _worker_signals():
    # No handler for SIGINT (Python installs one): pid 1 of a pid namespace receives from inside
    # it only the signals it handles, so a candidate could otherwise KeyboardInterrupt its worker.
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
    _signal.signal(_signal.SIGPIPE, _signal.SIG_IGN)


def worker(ctrl_fd=3, light=False):
    _prepare_worker(light)
    _worker_signals()
    ctrl = _socket.socket(fileno=ctrl_fd)
    namespaced = os.getpid() == 1
    scratch = _scratch_dirs(namespaced)
    own = os.getpid()

    def send(obj):
        body = dumps(obj).encode("ascii")
        ctrl.sendall(len(body).to_bytes(4, "big") + body)

    def vsz():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * resource.getpagesize()

    def take_frame():
        nonlocal buf
        if len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
            n = int.from_bytes(buf[:4], "big")
            frame = marshal.loads(buf[4:4 + n])  # from the host: trusted
            buf = buf[4 + n:]
            return frame
        return None

    send({"op": "ready", "pid": own, "namespaced": namespaced, "vsz": vsz(),
          "python": sys.version.split()[0]})
    buf = b""
    fd_queue = []  # descriptors arrive with their run frame; take exactly what each frame declares
    while True:
        header = take_frame()
        while header is None:
            msg, new_fds = _recv_fds(ctrl, 1 << 20)
            fd_queue.extend(new_fds)
            if not msg:
                os._exit(0)
            buf += msg
            header = take_frame()
        if header.get("op") == "exit":
            os._exit(0)
        if header.get("op") != "run":
            continue  # a late end/kill/gone for an execution that already ended
        nfds = int(header.get("nfds", 0))
        if len(fd_queue) < nfds:
            os._exit(1)  # descriptors travel with their frame; anything else is a broken host
        fds, fd_queue = fd_queue[:nfds], fd_queue[nfds:]
        pid = _fork()
        if pid == 0:
            try:
                ctrl.close()
                _child(header, fds)
            except BaseException:
                import traceback
                traceback.print_exc()
            finally:
                os._exit(70)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        ended_by = "exit"
        while True:
            cmd = take_frame()
            if cmd is None:
                ready, _, _ = select.select([ctrl, pidfd], [], [])
                if pidfd in ready:
                    break
                msg, new_fds = _recv_fds(ctrl, 1 << 16)
                fd_queue.extend(new_fds)
                if not msg:
                    _kill_all(own, pid, namespaced)
                    os._exit(0)
                buf += msg
                continue
            if cmd.get("op") in ("end", "kill"):
                ended_by = cmd["op"]
                break
            if cmd.get("op") == "gone":
                # The host saw the child's channel close: let it finish dying so its real exit
                # status (e.g. SIGKILL from the OOM killer) is what we report.
                if not select.select([pidfd], [], [], 2.0)[0]:
                    ended_by = "kill"
                break
        os.close(pidfd)
        report = _done_report(ended_by, _kill_all(own, pid, namespaced))
        report["wiped"] = _wipe_all(scratch)
        send(report)


def _done_report(ended_by, reaped):
    """The "done" message for the host: how the payload ended, from `(wait status, rusage)` of its reaping
    (None when it could not be reaped)."""
    status, ru = reaped if reaped else (None, None)
    report = {"op": "done", "ended_by": ended_by, "exit_code": None, "signal": None,
              "utime": ru.ru_utime if ru else 0.0, "stime": ru.ru_stime if ru else 0.0,
              "maxrss_kb": ru.ru_maxrss if ru else 0}
    if status is not None:
        if os.WIFEXITED(status):
            report["exit_code"] = os.WEXITSTATUS(status)
        elif os.WIFSIGNALED(status):
            report["signal"] = os.WTERMSIG(status)
    return report


def _oom_kills():
    """The container's cgroup OOM-kill count, where /sys is visible (docker); else None."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 2 and parts[0] == "oom_kill":
                        return int(parts[1])
        except (OSError, ValueError):
            continue
    return None


def relay_worker(light=False):
    """The worker for engines that cannot pass file descriptors (docker): it makes each
    execution's pipes itself and multiplexes them over its stdin/stdout. Host -> worker frames:
    4-byte length + marshal; worker -> host frames: 1-byte kind (c=control JSON, o=stdout,
    e=stderr, r=rpc reply bytes) + 4-byte length + payload. Verdicts stay on the host."""
    _prepare_worker(light)
    _worker_signals()
    namespaced = os.getpid() == 1
    scratch = _scratch_dirs(namespaced)
    host_in, host_out = os.dup(0), os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)

    def put(kind, payload):
        data = kind + len(payload).to_bytes(4, "big") + payload
        while data:
            data = data[os.write(host_out, data):]

    def control(obj):
        put(b"c", dumps(obj).encode("ascii"))

    buf = b""

    def take():
        nonlocal buf
        if len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
            n = int.from_bytes(buf[:4], "big")
            frame = marshal.loads(buf[4:4 + n])
            buf = buf[4 + n:]
            return frame
        return None

    def fill():
        nonlocal buf
        chunk = os.read(host_in, 1 << 20)
        if not chunk:
            os._exit(0)
        buf += chunk

    control({"op": "ready", "pid": os.getpid(), "namespaced": namespaced, "vsz": 0,
             "python": sys.version.split()[0]})
    while True:
        header = take()
        if header is None:
            fill()
            continue
        if header.get("op") == "exit":
            os._exit(0)
        if header.get("op") != "run":
            continue
        oom_before = _oom_kills()
        stdin_r, stdin_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(host_in)
                os.close(host_out)
                for fd in (stdin_w, out_r, err_r, to_w, from_r):
                    os.close(fd)
                fds = [stdin_r, out_w, err_w] + ([to_r, from_w] if header["mode"] == "function" else [])
                _child(header, fds)
            except BaseException:
                import traceback
                traceback.print_exc()
            finally:
                os._exit(70)
        for fd in (stdin_r, out_w, err_w, to_r, from_w):
            os.close(fd)
        # stdin: small inputs at once; the child reads it like a file (EOF after the input)
        data = header.get("stdin") or b""
        try:
            while data:
                data = data[os.write(stdin_w, data[:65536]):]
        except OSError:
            pass
        os.close(stdin_w)
        cap = int(header.get("output_cap", 1 << 20)) + 1
        sent = {out_r: 0, err_r: 0}
        kinds = {out_r: b"o", err_r: b"e", from_r: b"r"}
        open_fds = [out_r, err_r, from_r]
        try:
            pidfd = os.pidfd_open(pid)
        except (OSError, AttributeError):  # old kernels, some gVisor versions: poll instead
            pidfd = None
        early = None  # the child's wait4 result when polling reaped it
        ended_by = "exit"
        finished = False
        while not finished:
            cmd = take()
            if cmd is not None:
                op = cmd.get("op")
                if op == "rpc":
                    try:
                        payload = cmd["data"]
                        while payload:
                            payload = payload[os.write(to_w, payload):]
                    except OSError:
                        pass
                    continue
                if op in ("end", "kill"):
                    ended_by = op
                    break
                if op == "gone":
                    if pidfd is not None:
                        if not select.select([pidfd], [], [], 2.0)[0]:
                            ended_by = "kill"
                    else:
                        for _ in range(400):
                            early = os.wait4(pid, os.WNOHANG)
                            if early[0]:
                                break
                            select.select([], [], [], 0.005)
                        else:
                            ended_by = "kill"
                    break
                continue
            watch = [host_in] + open_fds + ([pidfd] if pidfd is not None else [])
            ready, _, _ = select.select(watch, [], [], None if pidfd is not None else 0.005)
            if pidfd is None and early is None:
                early = os.wait4(pid, os.WNOHANG)
                if early[0]:
                    finished = True
                else:
                    early = None
            for fd in ready:
                if fd == host_in:
                    fill()
                elif fd == pidfd:
                    finished = True
                else:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        open_fds.remove(fd)
                    elif fd in sent:
                        if sent[fd] < cap:
                            put(kinds[fd], chunk[: cap - sent[fd]])
                            sent[fd] += len(chunk)
                    else:
                        put(b"r", chunk)
        if pidfd is not None:
            os.close(pidfd)
        result = _kill_all(os.getpid(), pid, namespaced)
        if early is not None and early[0] == pid:
            result = (early[1], early[2])
        for fd in list(open_fds):  # every writer is dead: drain to EOF
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                if fd in sent and sent[fd] < cap:
                    put(kinds[fd], chunk[: cap - sent[fd]])
                    sent[fd] += len(chunk)
                elif fd not in sent:
                    put(b"r", chunk)
        for fd in (out_r, err_r, from_r, to_w):
            os.close(fd)
        report = _done_report(ended_by, result)
        oom_after = _oom_kills()
        report["oom"] = oom_before is not None and oom_after is not None and oom_after > oom_before
        report["wiped"] = _wipe_all(scratch)
        control(report)


def main(args):
    if args[:1] == ["worker"] and "--relay" in args[1:]:
        relay_worker(light="--light" in args[1:])
    elif args[:1] == ["worker"] and len(args) >= 2:
        worker(int(args[1]), light="--light" in args[2:])
    else:
        sys.stderr.write("usage: harness.py worker FD [--light] | worker --relay [--light]\n")
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
