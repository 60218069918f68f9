# execcritic runtime guard. Harness-owned, read-only inside the sandbox, first on PYTHONPATH, so
# `site` imports it in EVERY Python process of a guarded run before any repository code runs.
#
# It observes; the harness decides (src/harness/guard/). What it does:
#  * installs an audit hook (irremovable: Python has no API to remove one) that reports, as
#    records on a private duplicate of fd 2, the capability uses a verdict must not rest on
#    (process spawning/exec/kill, code compiled from strings or data files, code-object surgery,
#    trace/profile hooks, gc introspection, ctypes, import hooks, shadowing modules, reads of the
#    tests or of .git by candidate code, writes to test/runner/.git paths), each attributed to
#    WHERE it came from: a line the candidate patch added, the tests, the repository, or no
#    repository frame at all ("orphan");
#  * in the runner process the harness designated (matched by its command line), reads the run's
#    nonce from stdin (before any repository code, then stdin is /dev/null), loads the pytest
#    plugin below (or wraps unittest's TestResult), records every test outcome, checks that the
#    judged test functions are the ones compiled from the test files and that no runner or
#    standard-library function was rebound, and finally emits ONE record carrying the nonce:
#    only this code can emit it (the hook checks the emitting code object), so a run whose
#    runner did not finish normally has no authenticated completion.
# Keep it Python 3.5-compatible (no f-strings): old benchmark images run old interpreters; the
# audit hook needs 3.8, and without it the records say so.

def _execcritic_is_test_path(rel, library=()):
    """Whether a workspace-relative path is test code or data: the harness's rule
    (`harness::diff::is_test_path_in`, checked against it by a test), with `library` the
    prefixes of library source that looks like tests by name (`django/test/`)."""
    parts = rel.split("/")
    name = parts[-1]
    conventional = name.startswith("test_") or name.endswith("_test.py") \
        or name.endswith("_test.go") or name.endswith("_tests.py") \
        or name in ("conftest.py", "tests.py")
    for p in library:
        if (p.endswith("/") and rel.startswith(p) and not conventional) or rel == p:
            return False
    if conventional:
        return True
    for c in parts[:-1]:
        if c in ("tests", "test", "testing", "testdata") or c.endswith("tests") or c.startswith("test_"):
            return True
    return False


def _execcritic_guard():
    import os
    import sys
    import json

    spec_path = os.environ.get("EXECCRITIC_GUARD_SPEC")
    if not spec_path:
        return None
    try:
        with open(spec_path, "rb") as f:
            spec = json.loads(f.read().decode("utf-8"))
    except Exception:
        return None

    PREFIX = spec.get("prefix", "@@EXECCRITIC-GUARD@@")
    ws = spec.get("workspace", "/testbed").rstrip("/")
    guard_dir = os.path.dirname(os.path.abspath(__file__))
    handoff = spec.get("handoff", "/tmp/.execcritic").rstrip("/")
    mode = spec.get("mode", "candidate")
    # Lines the candidate added, per workspace-relative path (None: the whole file is new).
    attributed = {}
    for path, ranges in (spec.get("attributed") or {}).items():
        attributed[ws + "/" + path] = None if ranges is None else [tuple(r) for r in ranges]
    shipped = set(ws + "/" + p for p in (spec.get("shipped") or []))
    judged_files = [ws + "/" + p for p in (spec.get("test_files") or [])]
    judged_real = set(os.path.realpath(p) for p in judged_files)
    added = set(p for p, r in attributed.items() if r is None)
    limit = int(spec.get("max_records", 4000))

    # ------------------------------------------------------------------ records
    import fcntl
    try:
        rec_fd = fcntl.fcntl(2, getattr(fcntl, "F_DUPFD_CLOEXEC", fcntl.F_DUPFD), 700)
        fcntl.fcntl(rec_fd, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
    except Exception:
        rec_fd = -1
    state = {"n": 0, "lost": 0, "done": False, "overflow": False}
    pid = os.getpid()

    def write_record(obj):
        if rec_fd < 0:
            state["lost"] += 1
            return
        if state["n"] >= limit:
            if not state["overflow"]:
                state["overflow"] = True
                obj = {"k": "overflow"}
            else:
                return
        state["n"] += 1
        obj["pid"] = os.getpid()
        try:
            data = ("\n" + PREFIX + " " + json.dumps(obj, sort_keys=True) + "\n").encode("utf-8", "replace")
            while data:
                n = os.write(rec_fd, data)
                data = data[n:]
        except Exception:
            state["lost"] += 1

    def clip(s, n=300):
        s = str(s)
        return s if len(s) <= n else s[:n] + "..."

    # ------------------------------------------------------------------ attribution
    def under(path, root):
        return path == root or path.startswith(root + "/")

    library = tuple(spec.get("source_prefixes") or ())

    def is_test_path(rel):
        return _execcritic_is_test_path(rel, library)

    kinds = {}

    def file_kind(fn):
        k = kinds.get(fn)
        if k is not None:
            return k
        if fn.startswith("<"):
            k = "dyn"
        elif under(fn, guard_dir):
            k = "guard"
        elif not os.path.isabs(fn):
            k = "repo" if os.path.exists(os.path.join(ws, fn)) else "lib"
            if k == "repo":
                fn2 = os.path.join(ws, fn)
                k = file_kind(fn2)
        elif under(fn, ws):
            rel = fn[len(ws) + 1:]
            if fn in attributed:
                k = "cand"
            elif is_test_path(rel):
                k = "test"
            else:
                k = "repo"
        else:
            k = "lib"
        kinds[fn] = k
        return k

    def line_is_candidate(fn, line):
        ranges = attributed.get(fn, ())
        if ranges is None:
            return True
        for a, b in ranges:
            if a <= line <= b:
                return True
        return False

    # What "the code under suspicion" is: candidate lines (candidate mode), the bundle's test
    # files (bundle mode).
    bundle_files = set(ws + "/" + p for p in (spec.get("bundle_files") or []))

    def suspect(fn, line):
        if mode == "bundle":
            return fn in bundle_files
        return file_kind(fn) == "cand" and line_is_candidate(fn, line)

    def where(f):
        try:
            return clip(f.f_code.co_filename.replace(ws + "/", ""), 120) + ":" + str(f.f_lineno)
        except Exception:
            return "?"

    IMPORT_MACHINERY = ("<frozen importlib._bootstrap", "importlib/_bootstrap")
    # Functions of the import system that run only when a module is being imported (a direct
    # `loader.get_source()` or `get_data()` call is a read, not an import).
    IMPORTING = ("_find_and_load", "_find_and_load_unlocked", "_load_unlocked", "exec_module",
                 "_load", "load_module", "_load_backward_compatible")
    # Library code that reads source files to REPORT (tracebacks, warnings, log records), not
    # for the test to inspect them.
    REPORTING = ("/traceback.py", "/warnings.py", "/logging/__init__.py", "/_pytest/", "/unittest/",
                 "/pluggy/", "/doctest.py")

    def attribute(f):
        """(attribution, where, via_import, immediate): 'direct' when the frame performing the
        operation is suspect code, 'indirect' when the innermost non-library frame is, 'repo',
        'test' or 'orphan' (no repository frame at all) otherwise. `via_import` also covers
        reporting code (tracebacks, warnings) between the operation and that frame."""
        immediate = None
        via_import = False
        first = True
        while f is not None:
            code = f.f_code
            fn = code.co_filename
            k = file_kind(fn)
            if first:
                immediate = fn
            if k == "dyn" or k == "lib" or k == "guard":
                if ((fn.startswith(IMPORT_MACHINERY) or "importlib/_bootstrap" in fn)
                        and code.co_name in IMPORTING) or any(r in fn for r in REPORTING):
                    via_import = True
                first = False
                f = f.f_back
                continue
            if suspect(fn, f.f_lineno):
                return ("direct" if first else "indirect"), where(f), via_import, immediate
            return k, where(f), via_import, immediate
        # No repository frame: name the library code that did it (for diagnostics).
        return "orphan", ("lib:" + clip(immediate or "?", 100)) if immediate else "", via_import, immediate

    # ------------------------------------------------------------------ the hook
    import _thread
    busy = {}
    seen = set()
    seen_modules = set()
    get_ident = _thread.get_ident
    getframe = sys._getframe

    def ev(event_class, target, attr, wh, extra=None):
        key = (event_class, target, attr, wh)
        if key in seen:
            return
        seen.add(key)
        rec = {"k": "ev", "e": event_class, "t": clip(target), "a": attr, "w": wh}
        if extra:
            rec.update(extra)
        write_record(rec)

    PROC_RE_PREFIXES = ("/proc/",)
    SENSITIVE_DEV = ("/dev/tty", "/dev/pts/", "/dev/fd/", "/dev/stdout", "/dev/stderr", "/dev/stdin")
    CONFIG_NAMES = ("pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
                    "setup.cfg", "pyproject.toml", "conftest.py", "sitecustomize.py",
                    "usercustomize.py")

    def on_open(args):
        path = args[0]
        mode_ = args[1] if len(args) > 1 else "r"
        flags = args[2] if len(args) > 2 else 0
        if isinstance(path, int):
            return
        try:
            path = os.fsdecode(path)
        except Exception:
            return
        if not path.startswith("/"):
            try:
                path = os.path.join(os.getcwd(), path)
            except Exception:
                return
        path = os.path.normpath(path)
        writing = (isinstance(mode_, str) and any(c in mode_ for c in "wax+")) or \
            bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
        inside = under(path, ws)
        rel = path[len(ws) + 1:] if inside else ""
        target = None
        if inside:
            if rel == ".git" or rel.startswith(".git/"):
                target = "git"
            elif is_test_path(rel):
                target = "test_write" if writing else "test_read"
            elif writing and (rel.endswith(".py") or rel.split("/")[-1] in CONFIG_NAMES
                              or ".dist-info/" in rel.lower() or ".egg-info/" in rel.lower()
                              or rel.lower().endswith(".pth")):
                target = "code_write"
            elif mode == "bundle" and not writing and rel.endswith((".py", ".pyi", ".pyx", ".pyc", ".pyo")):
                target = "source_read"
            else:
                return
        elif under(path, handoff):
            target = "handoff"
        elif under(path, guard_dir):
            if not writing:
                return
            target = "guard"
        elif path.startswith(PROC_RE_PREFIXES):
            p = path.split("/")
            if len(p) > 2 and p[2] == "self" and len(p) > 3 and p[3] in ("status", "stat", "statm", "maps", "meminfo", "limits", "mounts", "mountinfo", "cgroup"):
                return
            if len(p) > 2 and p[2] in ("cpuinfo", "meminfo", "stat", "loadavg", "uptime", "version", "sys", "filesystems", "mounts", "self") and not (p[2] == "self" and len(p) > 3 and p[3] in ("mem", "fd", "cmdline", "environ", "exe", "root", "cwd")):
                return
            target = "proc"
        elif path.startswith(SENSITIVE_DEV):
            target = "tty"
        else:
            return
        attr, wh, via_import, _ = attribute(getframe(2))
        if via_import and target in ("source_read", "test_read"):
            return
        if attr in ("direct", "indirect", "orphan"):
            if target == "source_read" and attr == "orphan":
                # A process the bundle's tests started (not the runner) reading source.
                if role["runner"]:
                    return
                attr = "child"
            ev("open_" + target, (path.replace(ws + "/", "") if inside else path) + (" (write)" if writing else ""), attr, wh)

    RUNNERISH = ("python", "pytest", "py.test", "runtests", "bin/test", "tox", "nox", "sh", "bash", "dash", "env", "git")

    def on_spawn(event, args):
        exe = ""
        try:
            if event == "subprocess.Popen":
                exe = args[0]
                argv = args[1]
            elif event == "os.system":
                exe = "sh"
                argv = ["sh", "-c", args[0]]
            else:
                exe = args[0] if len(args) > 0 else ""
                argv = args[1] if len(args) > 1 else []
            if isinstance(argv, (str, bytes)):
                argv = [argv]
            argv = [os.fsdecode(a) if isinstance(a, (bytes, str)) else str(a) for a in (argv or [])]
            exe = os.fsdecode(exe) if isinstance(exe, (str, bytes)) else str(exe)
        except Exception:
            argv = []
        attr, wh, _, _ = attribute(getframe(2))
        if attr in ("direct", "indirect", "orphan"):
            name = os.path.basename(exe or (argv[0] if argv else ""))
            extra = {"x": name}
            # A program handed the repository's source (a file or a directory that is not
            # tests) reads it: `cat`, `grep -r`, a script.
            try:
                cwd = os.getcwd()
            except Exception:
                cwd = ws
            for a in argv[1:]:
                if a.startswith("-") or not a:
                    continue
                full = os.path.normpath(a if a.startswith("/") else os.path.join(cwd, a))
                if under(full, ws) and full != ws + "/.git" and not full.startswith(ws + "/.git/"):
                    rel = full[len(ws) + 1:] if full != ws else ""
                    if (full == ws or os.path.isdir(full) or rel.endswith((".py", ".pyi", ".pyx"))) \
                            and not (rel and is_test_path(rel + ("/x" if os.path.isdir(full) else ""))):
                        extra["src"] = rel or "."
                        break
            ev("spawn", name + " " + " ".join(argv[1:])[:200], attr, wh, extra)

    def on_kill(event, args):
        attr, wh, _, _ = attribute(getframe(2))
        if attr in ("repo", "test") and mode != "bundle":
            return
        target = args[0] if args else None
        me = os.getpid()
        try:
            parent = os.getppid()
        except Exception:
            parent = -1
        if event == "os.killpg" or (isinstance(target, int) and (target <= 1 or target in (me, parent))):
            ev("kill", "%s %s" % (event, "self" if target == me else ("parent" if target == parent else target)), attr, wh)
        elif attr in ("direct", "indirect"):
            ev("kill", "%s other" % event, attr, wh)

    DYNAMIC_RUNNERS = ("/runpy.py", "/code.py", "/codeop.py", "/timeit.py", "/pdb.py", "/bdb.py",
                       "/doctest.py", "/profile.py", "/cProfile.py", "/trace.py")

    def on_compile(event, args):
        if event == "compile":
            filename = args[1] if len(args) > 1 else ""
        else:
            code = args[0]
            filename = getattr(code, "co_filename", "")
        try:
            filename = os.fsdecode(filename)
        except Exception:
            filename = str(filename)
        if filename.endswith(".py") and filename not in shipped:
            return
        if not filename.startswith("<"):
            full = filename if filename.startswith("/") else os.path.join(ws, filename)
            if full in shipped and not full.endswith(".py"):
                attr, wh, _, _ = attribute(getframe(2))
                ev("code_from_data", full.replace(ws + "/", ""), attr, wh)
            return
        f = getframe(2)
        attr, wh, _, immediate = attribute(f)
        if attr == "direct":
            ev("dynamic_code", filename, attr, wh)
        elif attr == "indirect" and immediate and immediate.endswith(DYNAMIC_RUNNERS):
            ev("dynamic_code", filename + " via " + os.path.basename(immediate), attr, wh)

    def on_generic(event_class, target, strength):
        attr, wh, _, immediate = attribute(getframe(2))
        if strength == "direct" and attr != "direct":
            if attr == "orphan" or attr == "indirect":
                ev(event_class, target, "weak-" + attr, wh)
            return
        if attr in ("direct", "indirect", "orphan"):
            ev(event_class, target, attr, wh)

    CODE_ATTRS = ("__code__", "f_code", "gi_code", "cr_code", "ag_code")
    # Standard-library code whose use of a code object is to read its bytecode.
    BYTECODE_READERS = ("/dis.py", "/opcode.py", "/modulefinder.py")

    def on_code_attr(args):
        """Bundle mode: the tests (or a bytecode reader they call) fetching the code object of a
        repository function — its bytecode, constants and names are the source in another
        form. `inspect.signature` and the runner's own reads are not the tests'."""
        if mode != "bundle" or len(args) < 2 or args[1] not in CODE_ATTRS:
            return
        try:
            code = getattr(args[0], args[1])
            fn = code.co_filename
        except Exception:
            return
        if not isinstance(fn, str) or not under(fn, ws) or fn in bundle_files:
            return
        rel = fn[len(ws) + 1:]
        if is_test_path(rel):
            return
        attr, wh, _, immediate = attribute(getframe(2))
        if attr == "direct" or (attr == "indirect" and immediate and immediate.endswith(BYTECODE_READERS)):
            ev("code_read", "%s:%s" % (rel, getattr(code, "co_name", "?")), attr, wh)

    def resolve_all(name, path_list):
        """Every origin a top-level module name has along path_list, in import order."""
        import importlib.machinery as m
        origins = []
        for entry in path_list:
            if not isinstance(entry, str):
                continue
            try:
                spec_ = m.PathFinder.find_spec(name, [entry])
            except Exception:
                continue
            if spec_ is None:
                continue
            o = spec_.origin
            if o in (None, "namespace") and spec_.submodule_search_locations:
                o = list(spec_.submodule_search_locations)[0]
            if o:
                origins.append(o)
        return origins

    def on_import(args):
        name = args[0]
        if not isinstance(name, str):
            return
        top = name.split(".")[0]
        if top in seen_modules:
            return
        seen_modules.add(top)
        if top in sys.builtin_module_names:
            return
        meta = args[3] if len(args) > 3 else None
        hooks = args[4] if len(args) > 4 else None
        for hook_list, what in ((meta, "meta_path"), (hooks, "path_hooks")):
            for h in list(hook_list or ()):
                hid = id(h)
                if hid in known_hooks:
                    continue
                known_hooks.add(hid)
                fn = origin_of(h)
                if fn and suspect(*fn):
                    ev("import_hook", what + " " + clip(repr(h), 80), "direct", fn[0].replace(ws + "/", "") + ":" + str(fn[1]))
        path_list = args[2] if len(args) > 2 else sys.path
        origins = resolve_all(top, list(path_list or ()))
        if not origins:
            return
        first = origins[0]
        # Shadowing: the first place the name resolves is a module or package the candidate
        # created, and the name resolves somewhere else too (the standard library, the
        # environment, another directory of the repository).
        if os.path.isdir(first):
            init = os.path.join(first, "__init__.py")
            new = init in added if os.path.exists(init) else \
                all(os.path.join(first, n) in added for n in os.listdir(first) if n.endswith(".py"))
        else:
            new = first in added
        if new and len(origins) > 1 and origins[1] != first:
            ev("shadow_module", top + " -> " + first.replace(ws + "/", "") + " over " + origins[1], "direct", "")

    known_hooks = set(id(h) for h in list(sys.meta_path) + list(sys.path_hooks))

    def origin_of(obj):
        """(file, line) where a function, method or class (first method) was defined."""
        try:
            for cand in (obj, getattr(obj, "find_spec", None), getattr(obj, "find_module", None),
                         getattr(type(obj), "find_spec", None), getattr(obj, "__call__", None)):
                fn = getattr(cand, "__func__", cand)
                code = getattr(fn, "__code__", None)
                if code is not None:
                    return code.co_filename, code.co_firstlineno
        except Exception:
            pass
        return None

    WATCH = {
        "open": 1, "subprocess.Popen": 2, "os.system": 2, "os.exec": 2, "os.posix_spawn": 2,
        "os.spawn": 2, "os.fork": 3, "os.forkpty": 3, "os.kill": 4, "os.killpg": 4,
        "signal.pthread_kill": 4, "compile": 5, "exec": 5, "sys.settrace": 6, "sys.setprofile": 6,
        "code.__new__": 7, "object.__setattr__": 8, "marshal.loads": 9, "marshal.load": 9,
        "pickle.find_class": 10, "gc.get_objects": 11, "gc.get_referrers": 11,
        "gc.get_referents": 11, "ctypes.dlopen": 12, "ctypes.dlsym": 12,
        "ctypes.call_function": 12, "ctypes.string_at": 12, "ctypes.PyObj_FromPtr": 12,
        "ctypes.addressof": 12, "import": 13, "sys.addaudithook": 14, "sys._current_frames": 11,
        "execcritic.done": 15, "object.__getattr__": 16,
    }
    PICKLE_CODE = ("builtins", "__builtin__", "os", "posix", "subprocess", "sys", "importlib",
                   "runpy", "types", "ctypes", "code", "codeop", "marshal", "pickle", "_pickle",
                   "pty", "shutil", "signal", "gc", "inspect", "io", "_io", "functools", "operator")
    emit_codes = []
    auth = {"nonce": None}

    def hook(event, args):
        w = WATCH.get(event)
        if w is None:
            return
        t = get_ident()
        if busy.get(t):
            return
        busy[t] = True
        try:
            if w == 1:
                on_open(args)
            elif w == 2:
                on_spawn(event, args)
            elif w == 3:
                on_generic("fork", event, "indirect")
            elif w == 4:
                on_kill(event, args)
            elif w == 5:
                on_compile(event, args)
            elif w == 6:
                on_generic("trace_hook", event, "indirect")
            elif w == 7:
                on_generic("code_surgery", "code.__new__", "indirect")
            elif w == 8:
                if len(args) > 1 and args[1] == "__code__":
                    on_generic("code_surgery", "__code__ replaced", "indirect")
            elif w == 9:
                on_generic("dynamic_code", event, "indirect")
            elif w == 10:
                if args and str(args[0]).split(".")[0] in PICKLE_CODE:
                    on_generic("dynamic_code", "pickle %s.%s" % (args[0], args[1] if len(args) > 1 else ""), "indirect")
            elif w == 11:
                on_generic("introspection", event, "indirect")
            elif w == 12:
                on_generic("ctypes", event, "direct")
            elif w == 13:
                on_import(args)
            elif w == 14:
                on_generic("audit_hook", event, "indirect")
            elif w == 16:
                on_code_attr(args)
            elif w == 15:
                caller = getframe(1).f_code
                if any(caller is c for c in emit_codes) and not state["done"] and auth["nonce"] is not None:
                    state["done"] = True
                    payload = dict(args[0])
                    payload["k"] = "done"
                    payload["nonce"] = auth["nonce"]
                    payload["lost"] = state["lost"]
                    payload["records"] = state["n"]
                    write_record(payload)
                else:
                    ev("forged_completion", "execcritic.done raised outside the guard", "direct", where(getframe(1)))
        except Exception as e:  # an audit hook must never break the program
            try:
                write_record({"k": "guard_error", "e": event, "err": clip(repr(e))})
            except Exception:
                pass
        finally:
            busy[t] = False

    role = {"runner": False}
    audit = hasattr(sys, "addaudithook")
    write_record({"k": "start", "py": "%d.%d.%d" % tuple(sys.version_info[:3]), "audit": audit,
                  "argv": clip(" ".join(getattr(sys, "orig_argv", sys.argv)), 400)})
    if audit:
        sys.addaudithook(hook)

    # ------------------------------------------------------------------ the designated runner
    def cmdline():
        argv = getattr(sys, "orig_argv", None)
        if argv is None:
            try:
                with open("/proc/self/cmdline", "rb") as f:
                    argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
            except Exception:
                argv = list(sys.argv)
        return argv

    runner = spec.get("runner", "")
    argv = cmdline()

    def designated():
        words = argv[1:]
        # skip interpreter options
        i = 0
        while i < len(words) and words[i].startswith("-") and words[i] not in ("-m", "-c"):
            i += 1 + (1 if words[i] in ("-W", "-X", "-Q") else 0)
        rest = words[i:]
        if runner == "pytest":
            if rest[:2] == ["-m", "pytest"]:
                return True
            prog = os.path.basename(argv[1] if len(argv) > 1 else "")
            return bool(rest) and os.path.basename(rest[0]) in ("pytest", "py.test")
        if runner == "unittest":
            return rest[:2] == ["-m", "unittest"]
        script = spec.get("script")
        if script and rest:
            s = rest[0]
            return os.path.normpath(os.path.join(os.getcwd(), s)) == os.path.normpath(os.path.join(ws, script))
        return False

    if not designated():
        return None
    role["runner"] = True
    try:
        line = sys.stdin.buffer.readline() if sys.stdin is not None else b""
    except Exception:
        line = b""
    try:
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)
        sys.stdin = open(os.devnull, "r")
    except Exception:
        pass
    if not line.strip():
        write_record({"k": "no_nonce"})
        return None
    # The nonce lives in the audit hook's closure only (no other function captures it): reaching
    # it takes gc introspection or frame access, which the hook reports.
    auth["nonce"] = line.strip().decode("ascii", "replace")
    line = None
    if not hasattr(sys, "audit"):
        # Python < 3.8: no audit hook, no authenticated channel (the start record says so).
        legacy = {"nonce": auth["nonce"]}
    else:
        legacy = None

    # Code the test files compile to: (qualname-free) name and first line of every function, so a
    # test function replaced at run time (a lambda, another test, code from elsewhere) is seen.
    expected = {}
    for path in judged_files:
        try:
            with open(path, "rb") as f:
                src = f.read()
            top = compile(src, path, "exec", dont_inherit=True)
        except Exception:
            continue
        names = set()
        stack = [top]
        while stack:
            c = stack.pop()
            names.add((c.co_name, c.co_firstlineno))
            for k in c.co_consts:
                if hasattr(k, "co_code"):
                    stack.append(k)
        expected[os.path.realpath(path)] = names

    def check_code(func, label):
        """Whether `func` is a function the judged test file defines."""
        func = getattr(func, "__func__", func)
        func = getattr(func, "__wrapped__", func) if not hasattr(func, "__code__") else func
        code = getattr(func, "__code__", None)
        if code is None:
            return "not a Python function"
        fn = os.path.realpath(code.co_filename)
        names = expected.get(fn)
        if names is None:
            return "defined in %s" % code.co_filename.replace(ws + "/", "")
        if (code.co_name, code.co_firstlineno) not in names:
            return "%s:%d is not a function of the test file" % (code.co_name, code.co_firstlineno)
        return None

    # Functions and classes of every module loaded now (the runner, its dependencies, the standard
    # library): none of them may be rebound to something else by the run.
    snapshot = {}
    # The test runners' own packages: nothing but the runner itself may rebind them, and it
    # undoes what it rebinds before the completion is emitted.
    RUNNER_PACKAGES = ("pytest", "_pytest", "pluggy", "unittest", "py", "iniconfig")

    def take_snapshot():
        for name, mod in list(sys.modules.items()):
            if mod is None or name in snapshot:
                continue
            fn = getattr(mod, "__file__", None) or ""
            if fn and (under(os.path.abspath(fn), ws) or under(os.path.abspath(fn), guard_dir)):
                continue
            try:
                d = dict(vars(mod))
            except Exception:
                continue
            entries = {}
            for k, v in d.items():
                if callable(v) or isinstance(v, (staticmethod, classmethod, property)):
                    entries[k] = id(v)
                    if isinstance(v, type) and getattr(v, "__module__", None) == name:
                        try:
                            for ck, cv in list(vars(v).items()):
                                if callable(cv) or isinstance(cv, (staticmethod, classmethod, property)):
                                    entries[k + "." + ck] = id(cv)
                        except Exception:
                            pass
            snapshot[name] = (mod, entries)

    def changed_bindings():
        out = []
        for name, (mod, entries) in list(snapshot.items()):
            try:
                d = vars(mod)
            except Exception:
                continue
            for key, ident in entries.items():
                if "." in key:
                    cls_name, attr = key.split(".", 1)
                    cls = d.get(cls_name)
                    try:
                        v = vars(cls).get(attr, None) if cls is not None else None
                    except Exception:
                        v = None
                else:
                    v = d.get(key, None)
                if v is None or id(v) != ident:
                    o = origin_of(v) if v is not None else None
                    out.append({"m": name, "a": key, "o": (o[0].replace(ws + "/", "") + ":" + str(o[1])) if o else None,
                                "c": bool(o and suspect(*o)),
                                # a runner binding whose new value is not library code (the
                                # runner's own self-patching is): judged against Base
                                "r": name.split(".")[0] in RUNNER_PACKAGES
                                and not (o and file_kind(o[0]) == "lib")})
                    if len(out) >= 200:
                        return out
        return out

    results = {}
    order = []

    def record_result(node, outcome):
        if node not in results:
            order.append(node)
        prev = results.get(node)
        rank = {"passed": 0, "skipped": 1, "xfailed": 1, "xpassed": 2, "failed": 3, "error": 4}
        if prev is None or rank.get(outcome, 5) > rank.get(prev, 5):
            results[node] = outcome

    import time

    def emit_done(rc, extra):
        changed = changed_bindings()
        payload = {"rc": rc, "results": dict((k, results[k]) for k in order),
                   "changed": changed, "t": time.time()}
        payload.update(extra or {})
        if hasattr(sys, "audit"):
            sys.audit("execcritic.done", payload)
        elif legacy is not None and not state["done"]:
            # Without audit hooks there is no authenticated channel; the harness knows (start.audit).
            payload["k"] = "done"
            payload["nonce"] = legacy["nonce"]
            state["done"] = True
            write_record(payload)

    emit_codes.append(emit_done.__code__)

    if runner == "pytest":
        import types
        plugin = types.ModuleType("_execcritic_guard_plugin")
        # Loaded by `-p` while already imported: tell pytest not to try rewriting it.
        plugin.__doc__ = "execcritic guard plugin. PYTEST_DONT_REWRITE"
        try:
            import pluggy
            hookimpl = pluggy.HookimplMarker("pytest")
        except Exception:
            hookimpl = None

        def impl(**opts):
            def deco(fn):
                if hookimpl is not None:
                    return hookimpl(**opts)(fn)
                for k, v in opts.items():
                    setattr(fn, k, v)
                return fn
            return deco
        info = {"plugins_at_collection": None, "problems": [], "collected": []}

        def pytest_addoption(parser):
            take_snapshot()

        def pytest_collection_modifyitems(session, config, items):
            info["collected"] = [it.nodeid for it in items]

        def pytest_collection_finish(session):
            pm = session.config.pluginmanager
            info["plugins_at_collection"] = set(id(p) for p in pm.get_plugins())
            for p in pm.get_plugins():
                fn = getattr(p, "__file__", None)
                if fn and os.path.basename(fn) == "conftest.py" and os.path.abspath(fn) in shipped:
                    info["problems"].append("conftest added by the candidate: " + fn)
                for name in dir(p):
                    if not name.startswith("pytest_"):
                        continue
                    try:
                        o = origin_of(getattr(p, name))
                    except Exception:
                        o = None
                    if o and suspect(*o):
                        info["problems"].append("hook %s from %s:%d" % (name, o[0].replace(ws + "/", ""), o[1]))

        def check_item(item):
            try:
                fspath = str(getattr(item, "path", None) or getattr(item, "fspath", ""))
                if os.path.realpath(fspath) not in judged_real:
                    return
                import _pytest.python as P
                if isinstance(item, P.Function):
                    if "runtest" in vars(item):
                        info["problems"].append("%s: runtest replaced on the item" % item.nodeid)
                    why = check_code(item.obj, item.nodeid)
                    if why:
                        info["problems"].append("%s: test function replaced (%s)" % (item.nodeid, why))
                pm = item.config.pluginmanager
                if info["plugins_at_collection"] is not None:
                    for p in pm.get_plugins():
                        if id(p) not in info["plugins_at_collection"]:
                            info["plugins_at_collection"].add(id(p))
                            info["problems"].append("plugin registered after collection: " + clip(repr(p), 80))
            except Exception as e:
                info["problems"].append("check failed: " + clip(repr(e)))

        @impl(tryfirst=True)
        def pytest_runtest_call(item):
            check_item(item)

        def pytest_runtest_logreport(report):
            outcome = report.outcome
            xfail = hasattr(report, "wasxfail")
            if report.when == "call":
                if outcome == "passed":
                    o = "xpassed" if xfail else "passed"
                elif outcome == "skipped":
                    o = "xfailed" if xfail else "skipped"
                else:
                    o = "failed"
            else:
                if outcome == "failed":
                    o = "error"
                elif outcome == "skipped":
                    o = "skipped"
                else:
                    o = None
            if o is not None:
                record_result(report.nodeid, o)

        @impl(trylast=True)
        def pytest_sessionfinish(session, exitstatus):
            info["exitstatus"] = int(exitstatus)

        def finish():
            emit_done(info.get("exitstatus"), {"runner_problems": info["problems"][:100],
                                              "collected": len(info["collected"])})

        @impl(tryfirst=True)
        def pytest_configure(config):
            # Cleanups run last-in first-out: registered first, this runs after the runner and
            # its plugins have undone their own changes.
            if hasattr(config, "add_cleanup"):
                config.add_cleanup(finish)
            else:
                info["unconfigure"] = True

        @impl(trylast=True)
        def pytest_unconfigure(config):
            if info.get("unconfigure"):
                finish()

        for k, v in list(locals().items()):
            if k.startswith("pytest_"):
                setattr(plugin, k, v)
        sys.modules["_execcritic_guard_plugin"] = plugin
        # Plugins the environment declares are loaded explicitly, by module; metadata in the
        # workspace that the candidate shipped (any letter case) is never read.
        addopts = ["-p", "_execcritic_guard_plugin"]
        try:
            try:
                from importlib import metadata as md
                dists = list(md.distributions())
                eps = []
                for d in dists:
                    loc = str(getattr(d, "_path", "") or "")
                    for ep in d.entry_points:
                        if ep.group == "pytest11":
                            eps.append((loc, ep.value))
            except Exception:
                import pkg_resources
                eps = [(getattr(ep.dist, "egg_info", "") or "", ep.module_name)
                       for ep in pkg_resources.iter_entry_points("pytest11")]
            mods = []
            for loc, value in eps:
                loc = os.path.abspath(loc) if loc else ""
                if loc and under(loc, ws) and (loc in shipped or any(s.startswith(loc + "/") for s in shipped)):
                    write_record({"k": "ev", "e": "plugin_metadata", "t": loc.replace(ws + "/", ""), "a": "direct", "w": ""})
                    continue
                m = value.split(":")[0].strip()
                if m and m not in mods:
                    mods.append(m)
            for m in mods:
                addopts += ["-p", m]
        except Exception as e:
            write_record({"k": "guard_error", "e": "plugins", "err": clip(repr(e))})
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        os.environ["PYTEST_ADDOPTS"] = (os.environ.get("PYTEST_ADDOPTS", "") + " " + " ".join(addopts)).strip()
    else:
        # unittest, Django's runner, sympy's bin/test: outcomes from unittest's TestResult where
        # the runner uses it; completion at exit (the exit status is the sandbox's to report).
        import atexit
        try:
            import unittest.result as ur
            problems = []

            def judged_test(test):
                m = sys.modules.get(type(test).__module__)
                fn = getattr(m, "__file__", None)
                return bool(fn) and os.path.realpath(fn) in judged_real

            def wrap(name, outcome):
                fn = getattr(ur.TestResult, name)

                def w(self, test, *a):
                    try:
                        tid = test.id()
                        if outcome == "start":
                            if judged_test(test):
                                m = getattr(test, "_testMethodName", None)
                                if m:
                                    why = check_code(getattr(test, m), tid)
                                    if why:
                                        problems.append("%s: test method replaced (%s)" % (tid, why))
                        elif outcome == "subtest":
                            if len(a) > 1 and a[1] is not None:
                                record_result(tid, "failed")
                        else:
                            record_result(tid, outcome)
                    except Exception:
                        pass
                    return fn(self, test, *a)
                setattr(ur.TestResult, name, w)
            for name, outcome in (("startTest", "start"), ("addSuccess", "passed"),
                                  ("addFailure", "failed"), ("addError", "error"),
                                  ("addSkip", "skipped"), ("addExpectedFailure", "xfailed"),
                                  ("addUnexpectedSuccess", "xpassed"), ("addSubTest", "subtest")):
                wrap(name, outcome)
            take_snapshot()

            def at_exit():
                emit_done(None, {"runner_problems": problems[:100]})
            atexit.register(at_exit)
        except Exception as e:
            write_record({"k": "guard_error", "e": "unittest", "err": clip(repr(e))})
    return None


_execcritic_guard()
del _execcritic_guard

# The environment's own sitecustomize, if it has one, still runs.
def _execcritic_chain():
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    ws = "/testbed"
    try:
        import json
        with open(os.environ["EXECCRITIC_GUARD_SPEC"], "rb") as f:
            ws = json.loads(f.read().decode("utf-8")).get("workspace", ws).rstrip("/")
    except Exception:
        pass
    for entry in sys.path:
        try:
            cand = os.path.join(os.path.abspath(entry or "."), "sitecustomize.py")
        except Exception:
            continue
        d = os.path.dirname(cand)
        # Never the workspace's: a candidate's sitecustomize.py is not the environment's.
        if d == here or d == ws or d.startswith(ws + "/") or not os.path.isfile(cand):
            continue
        import importlib.util
        spec = importlib.util.spec_from_file_location("_execcritic_env_sitecustomize", cand)
        if spec and spec.loader:
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        break


_execcritic_chain()
del _execcritic_chain
