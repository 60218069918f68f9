#!/usr/bin/env python3
"""The GPU check of the CUDA backend in one call (run through scripts/gpu-check.sh).

The GPU host is lent for one command of at most 600 s, a working tree of at most 64 MiB with
what it carries, and at most 8 files back from $OUT; it has the NVIDIA driver, nvcc, PyTorch,
but no Rust, no network, and maybe no bubblewrap, git or pytest. So:

  --build     (a CPU machine with Rust) builds the release test binaries and the CLI with
              `--features cuda`, strips them, prebuilds the sm_90 kernels when the CLI can
              (`execcritic kernels prebuild`), packs all of it into ONE archive,
              gpu-bin/gpu-bin.tar.xz (carry `gpu-bin`), and fails when the working tree plus the
              archive would exceed 60 MiB, printing the size either way.
  (no flag)   (the GPU host) the run: one command under an internal deadline (default 540 s,
              --deadline or GPU_CHECK_DEADLINE) that runs the steps of STEPS in order, each in
              its own process group under its own cap (bounded by what is left), skipped when
              less time is left than it needs; a failed test binary runs once more on the plainer
              device paths (EXECCRITIC_CUDA_DISABLE=all) when time is left. $OUT/gpu-check.json
              is rewritten (atomically) after every step, every log goes into
              $OUT/gpu-check-logs.tar.gz, and the benchmarks write their own JSON into $OUT
              after each of their phases. Never more than 8 files under $OUT.
  --rehearse  (a CPU machine with Rust) exactly that run on the emulated device: debug
              binaries packed the same way, benchmarks at the tiny shape, a short deadline and
              caps, one injected hang and one failure that only the plain-path retry passes;
              then checks the deadline held, at most 8 files under $OUT, a valid gpu-check.json
              with a status per step, the hung step a timeout (its processes gone), the retry,
              and the later steps run.
  --list      the steps, their caps and what each needs.

Environment: OUT (default ./gpu-check-out), GPU_CHECK_DEADLINE (s), GPU_CHECK_CAP (s, the most
any step gets), GPU_CHECK_CAP_<STEP> (s, one step's cap), GPU_CHECK_SKIP (steps, comma
separated), GPU_CHECK_ONLY (steps), GPU_CHECK_INJECT_HANG / GPU_CHECK_INJECT_FAIL (a step that
hangs / fails unless retried on the plain paths, for rehearsals), GPU_CHECK_RETRY_DISABLE (what
the retry turns off, default all), GPU_CHECK_DEVICE=emulator (benchmarks at the tiny shape on the
emulated device, the GPU not required), GPU_CHECK_ARCHIVE (the archive, default gpu-bin/gpu-bin.tar.*),
GPU_CHECK_WORK (the folder it unpacks to; default a fresh temporary one), and the library paths
EXECCRITIC_NVRTC / EXECCRITIC_CUBLAS / EXECCRITIC_CUBLASLT (found when unset).
"""

import ctypes
import datetime
import glob
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELF = os.path.abspath(__file__)
LIMIT_MIB = 60
MAX_OUT_FILES = 8
DEFAULT_DEADLINE = 540
RESERVE_S = 10  # kept back from the deadline for the last record and the log archive
TESTS = ["cuda_ops", "cuda_model", "engine_bench", "train_bench", "cuda_backward", "cuda_paged"]
CLI = "execcritic"
RESULT = "gpu-check.json"
LOGS = "gpu-check-logs.tar.gz"
LOG_TRIM = 4 << 20  # the last 4 MiB of a log go into the archive
# the op tests run again under compute-sanitizer's memcheck (the kernels of issue 27)
SANITIZER_TESTS = [
    "sampling_has_the_cpu_samplers_semantics",
    "gdn_chunked_and_recurrent_match_cpu",
    "moe_routing_grouping_and_combine_match_cpu",
    "paged_attention_matches_cpu_bf16",
]


class Step:
    """One step of the run: a command over the unpacked binaries."""

    def __init__(self, name, what, cap, need_s, argv, needs=(), outputs=(), bench=False, libtest=True,
                 after=None, retry=None):
        self.name, self.what, self.cap, self.need_s = name, what, cap, need_s
        self.argv, self.needs, self.outputs, self.bench = argv, tuple(needs), tuple(outputs), bench
        self.libtest = libtest  # a test binary: its per-test outcomes are parsed
        # a failed test binary runs again on the plainer device paths
        self.retry = libtest if retry is None else retry
        self.after = after  # called with the run once the step ended


def test_argv(binary, *args):
    return lambda ctx: [ctx.bin(binary), "--test-threads=1", "--nocapture"] + list(args)


def bench_argv(binary, test):
    return test_argv(binary, "--ignored", "--exact", test)


def demo_argv(ctx):
    device = "emulator" if ctx.emulated else "cuda"
    return [ctx.bin(CLI), "demo", "train", "--size", "ci", "--device", device,
            "--models", os.path.join(ROOT, "models"), "--out", os.path.join(ctx.work, "demo")]


def keep_demo_report(ctx):
    """The demo's report and metrics (not its checkpoints) go with the logs."""
    demo = os.path.join(ctx.work, "demo")
    for f in ["summary.json", "report.md", "metrics.jsonl", "reward_curve.svg"]:
        if os.path.isfile(os.path.join(demo, f)):
            os.makedirs(os.path.join(ctx.logs, "demo"), exist_ok=True)
            shutil.copy2(os.path.join(demo, f), os.path.join(ctx.logs, "demo", f))


def keep_snapshot(ctx):
    """The environment snapshot goes into gpu-check.json too."""
    try:
        with open(os.path.join(ctx.logs, "environment.json")) as f:
            ctx.record["environment"] = json.load(f)
    except (OSError, ValueError):
        pass


def sanitizer_argv(ctx):
    return (["compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "86",
             "--print-limit", "20", ctx.bin("cuda_ops"), "--test-threads=1", "--exact"]
            + SANITIZER_TESTS)


# In the order of what they tell: whether the host can run anything, whether the kernels are
# right, the speed figures (prefill before decode inside the model-step benchmark), the rest
# of the parity tests, and what only fits when time is left.
STEPS = [
    Step("environment", "driver, NVRTC path and version, nvidia-smi, tools present, binaries start",
         60, 5, lambda ctx: [sys.executable, SELF, "--snapshot", os.path.join(ctx.logs, "environment.json")],
         libtest=False, after=keep_snapshot),
    Step("op_parity", "cuda_ops: every forward op against the CPU reference", 120, 20, test_argv("cuda_ops")),
    Step("model_parity", "cuda_model: the whole forward on the fixtures against the CPU engine and transformers",
         120, 20, test_argv("cuda_model")),
    Step("model_step_bench", "full-size model-step benchmark: prefill, decode 1/64/256, MoE layer (cuda-bench.json)",
         150, 60, bench_argv("engine_bench", "full_size_model_step_benchmark"), outputs=["cuda-bench.json"], bench=True),
    Step("engine_bench", "full-size engine benchmark (engine-bench.json, h200-engine.json)",
         180, 60, bench_argv("engine_bench", "full_size_engine_benchmark"),
         outputs=["engine-bench.json", "h200-engine.json"], bench=True),
    Step("backward_parity", "cuda_backward: every backward kernel against the CPU trainer", 120, 20,
         test_argv("cuda_backward")),
    Step("paged_parity", "cuda_paged: the paged KV cache under the engine against the CPU engine", 90, 15,
         test_argv("cuda_paged")),
    Step("sanitizer", "compute-sanitizer memcheck over the op tests of sampling, GDN, MoE, attention",
         150, 60, sanitizer_argv, needs=["compute-sanitizer"], retry=False),
    Step("train_step", "two full-size LoRA GRPO iterations of the device trainer (h200-train.json)",
         240, 90, bench_argv("train_bench", "full_size_lora_grpo_step_benchmark"), outputs=["h200-train.json"],
         bench=True),
    Step("demo_train", "execcritic demo train --size ci on the device (sandboxes: bwrap, git, pytest)",
         300, 120, demo_argv, needs=["bwrap", "git", "pytest"], libtest=False, after=keep_demo_report),
]
OUT_FILES = [RESULT, LOGS] + [f for s in STEPS for f in s.outputs]
assert len(OUT_FILES) <= MAX_OUT_FILES


def log(msg):
    print("gpu-check: " + msg, flush=True)


def fail(msg):
    print("gpu-check: " + msg, file=sys.stderr, flush=True)
    sys.exit(1)


def mib(n):
    return n / (1 << 20)


def write_json(path, value):
    """`value` as JSON at `path`, through a temporary file in the same folder renamed over it."""
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def run_quiet(argv, timeout=20, cwd=None):
    """(exit code, stdout + stderr) of a short command; exit code None when it could not run."""
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, cwd=cwd)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError) as e:
        return None, str(e)


def tail(path, n):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def have_tool(name):
    if name == "pytest":
        if shutil.which("pytest"):
            return True
        code, _ = run_quiet([sys.executable, "-m", "pytest", "--version"], timeout=30)
        return code == 0
    return shutil.which(name) is not None


# ------------------------------------------------------------------ libraries on the host

def cuda_driver_version():
    """The driver's CUDA version ("13.0"), from libcuda without initialising it."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
            return "%d.%d" % (v.value // 1000, (v.value % 1000) // 10)
    except OSError:
        pass
    return None


def nvrtc_version(path):
    try:
        lib = ctypes.CDLL(path)
        a, b = ctypes.c_int(0), ctypes.c_int(0)
        if lib.nvrtcVersion(ctypes.byref(a), ctypes.byref(b)) == 0:
            return "%d.%d" % (a.value, b.value)
    except OSError:
        pass
    return None


def site_dirs():
    import site
    dirs = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    return [d for d in dirs if os.path.isdir(d)]


def candidates(stem):
    """Files of lib<stem> on the host: the toolkit's first, then the NVIDIA wheels'."""
    found = []
    for pat in ["/usr/local/cuda/lib64/lib%s.so*" % stem, "/usr/local/cuda-*/lib64/lib%s.so*" % stem,
                "/usr/local/cuda/targets/*/lib/lib%s.so*" % stem]:
        found += sorted(glob.glob(pat))
    for d in site_dirs():
        found += sorted(glob.glob(os.path.join(d, "nvidia", "**", "lib%s.so*" % stem), recursive=True))
    seen, out = set(), []
    for f in found:
        real = os.path.realpath(f)
        if "builtins" in os.path.basename(f) or real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        out.append(f)
    return out


def version_key(v):
    return tuple(int(x) for x in re.findall(r"\d+", v or "0"))


def choose_nvrtc(driver):
    """EXECCRITIC_NVRTC, else the toolkit's libnvrtc (its version is the driver's on CUDA images),
    else the newest wheel not newer than the driver (PTX of a newer NVRTC does not load)."""
    if os.environ.get("EXECCRITIC_NVRTC"):
        return os.environ["EXECCRITIC_NVRTC"]
    found = candidates("nvrtc")
    toolkit = [f for f in found if f.startswith("/usr/local/cuda")]
    if toolkit:
        return toolkit[-1]
    versioned = [(version_key(nvrtc_version(f)), f) for f in found]
    fits = [x for x in versioned if driver is None or x[0][:2] <= version_key(driver)[:2]]
    pick = max(fits or versioned, default=None)
    return pick[1] if pick else None


def library_env(driver):
    env = {}
    nvrtc = choose_nvrtc(driver)
    if nvrtc:
        env["EXECCRITIC_NVRTC"] = nvrtc
    for stem, var in [("cublas", "EXECCRITIC_CUBLAS"), ("cublasLt", "EXECCRITIC_CUBLASLT")]:
        if os.environ.get(var):
            env[var] = os.environ[var]
            continue
        found = [f for f in candidates(stem) if re.search(r"lib%s\.so" % stem, os.path.basename(f))]
        if found:
            env[var] = found[-1]
    return env


# ------------------------------------------------------------------ --snapshot (a step)

def snapshot(path):
    """The host as the run finds it, as JSON at `path` (and nvidia-smi's reports beside it)."""
    logs = os.path.dirname(path)
    snap = {"time_utc": datetime.datetime.utcnow().isoformat() + "Z", "host": os.uname().nodename,
            "kernel": os.uname().release, "python": sys.version.split()[0],
            "glibc": os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None,
            "cpus": os.cpu_count()}
    snap["driver_cuda_version"] = cuda_driver_version()
    code, out = run_quiet(["nvidia-smi", "--format=csv", "--query-gpu=name,driver_version,memory.total,"
                           "clocks.max.sm,clocks.max.mem,power.limit,persistence_mode,compute_mode,pstate"])
    snap["nvidia_smi"] = out.strip() if code == 0 else None
    for args, name in [([], "nvidia-smi.txt"), (["-q"], "nvidia-smi-q.txt")]:
        code, out = run_quiet(["nvidia-smi"] + args, timeout=30)
        if code is not None:
            with open(os.path.join(logs, name), "w") as f:
                f.write(out)
    snap["nvrtc"] = {"chosen": os.environ.get("EXECCRITIC_NVRTC"),
                     "candidates": [{"path": f, "version": nvrtc_version(f),
                                     "builtins_beside": bool(glob.glob(os.path.join(os.path.dirname(f),
                                                                                    "libnvrtc-builtins*")))}
                                    for f in candidates("nvrtc")]}
    snap["cublas"] = {v: os.environ.get(v) for v in ["EXECCRITIC_CUBLAS", "EXECCRITIC_CUBLASLT"]}
    tools = {}
    for name, argv in [("nvidia-smi", None), ("nvcc", ["nvcc", "--version"]),
                       ("compute-sanitizer", ["compute-sanitizer", "--version"]),
                       ("bwrap", ["bwrap", "--version"]), ("git", ["git", "--version"]), ("pytest", None),
                       ("tar", None), ("xz", None), ("zstd", None), ("gdb", None), ("cuobjdump", None)]:
        present = have_tool(name)
        entry = {"present": present}
        if present and argv:
            code, out = run_quiet(argv)
            lines = [l for l in out.strip().splitlines() if l.strip()]
            entry["version"] = lines[-1] if name == "nvcc" and lines else (lines[0] if lines else None)
        tools[name] = entry
    snap["tools"] = tools
    code, out = run_quiet([sys.executable, "-c", "import torch, transformers; print(torch.__version__, "
                           "torch.version.cuda, transformers.__version__, torch.cuda.is_available())"], timeout=30)
    snap["torch"] = out.strip().splitlines()[-1] if code == 0 and out.strip() else "unavailable: " + out[-300:]
    bindir = os.environ.get("GPU_CHECK_BIN", "")
    binaries = {}
    for name in TESTS + [CLI]:
        exe = os.path.join(bindir, name)
        if not os.path.isfile(exe):
            binaries[name] = "missing"
            continue
        code, out = run_quiet([exe, "--list"] if name != CLI else [exe, "--version"], timeout=30, cwd=ROOT)
        binaries[name] = ("runs (%d tests)" % out.count(": test")) if code == 0 and name != CLI else (
            out.strip() if code == 0 else "does not run (%s): %s" % (code, out.strip()[-400:]))
    snap["binaries"] = binaries
    try:
        with open(os.path.join(os.path.dirname(bindir), "BUILD.json")) as f:
            build = json.load(f)
        need = build.get("glibc_needed")
        snap["glibc_needed_by_binaries"] = need
        if need and snap["glibc"]:
            have = snap["glibc"].split()[-1]
            snap["glibc_ok"] = version_key(have) >= version_key(need)
    except (OSError, ValueError):
        pass
    kdir = os.environ.get("EXECCRITIC_KERNEL_DIR")
    if kdir and os.path.isdir(kdir):
        snap["kernels"] = {"dir": kdir, "files": len(os.listdir(kdir)),
                           "manifest": os.path.isfile(os.path.join(kdir, "manifest.json"))}
    snap["env"] = {k: v for k, v in os.environ.items() if k.startswith("EXECCRITIC_") or k.startswith("GPU_CHECK_")}
    write_json(path, snap)
    print(json.dumps(snap, indent=1))
    ok = all(v.startswith("runs") or k == CLI for k, v in binaries.items())
    return 0 if ok else 1


# ------------------------------------------------------------------ the run

class Run:
    """One run of the steps: where things are and what was recorded."""

    def __init__(self, out, deadline_s):
        self.t0 = time.monotonic()
        self.deadline = self.t0 + deadline_s
        self.deadline_s = deadline_s
        self.out = out
        self.emulated = os.environ.get("GPU_CHECK_DEVICE") == "emulator"
        self.work = os.environ.get("GPU_CHECK_WORK") or tempfile.mkdtemp(prefix="gpu-check-")
        self.logs = os.path.join(self.work, "logs")
        self.bindir = os.path.join(self.work, "bin")
        os.makedirs(self.logs, exist_ok=True)
        self.record = {"schema": 1, "mode": "rehearse (emulated device)" if self.emulated else "run",
                       "started_utc": datetime.datetime.utcnow().isoformat() + "Z",
                       "deadline_s": deadline_s, "elapsed_s": 0.0, "finished": False,
                       "steps": [{"name": s.name, "what": s.what, "status": "pending"} for s in STEPS]}
        self.current = None

    def bin(self, name):
        return os.path.join(self.bindir, name)

    def left(self):
        return self.deadline - time.monotonic()

    def step_record(self, name):
        return next(r for r in self.record["steps"] if r["name"] == name)

    def save(self):
        """Rewrite gpu-check.json and the log archive."""
        self.record["elapsed_s"] = round(time.monotonic() - self.t0, 2)
        self.record["files"] = sorted(os.listdir(self.out))
        write_json(os.path.join(self.out, RESULT), self.record)
        self.pack_logs()

    def pack_logs(self):
        tmp = os.path.join(self.out, "." + LOGS + ".tmp")
        with tarfile.open(tmp, "w:gz") as tar:
            for dirpath, _, files in os.walk(self.logs):
                for f in sorted(files):
                    path = os.path.join(dirpath, f)
                    arc = os.path.join("logs", os.path.relpath(path, self.logs))
                    size = os.path.getsize(path)
                    if size <= LOG_TRIM:
                        tar.add(path, arcname=arc)
                    else:  # the end of a long log: where it failed
                        with open(path, "rb") as fh:
                            fh.seek(size - LOG_TRIM)
                            data = b"[... first %d bytes left out ...]\n" % (size - LOG_TRIM) + fh.read()
                        info = tarfile.TarInfo(arc)
                        info.size, info.mtime = len(data), int(time.time())
                        tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, os.path.join(self.out, LOGS))


def unpack(archive, dest):
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(archive, "r:*") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)


def find_archive():
    if os.environ.get("GPU_CHECK_ARCHIVE"):
        return os.environ["GPU_CHECK_ARCHIVE"]
    found = sorted(glob.glob(os.path.join(ROOT, "gpu-bin", "gpu-bin.tar*")))
    return found[0] if found else None


def session_pids(sid):
    """Processes of session `sid` still alive (what a step left behind, its own groups included)."""
    pids = []
    for d in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(d.split("/")[2]))
        except (OSError, IndexError, ValueError):
            continue
    return pids


def kill_step(p):
    """End a step: SIGTERM to its process group, SIGKILL after 3 s, then whatever of its session
    is left. Returns how many processes were still there for the final sweep."""
    for sig, wait in [(signal.SIGTERM, 3), (signal.SIGKILL, 2)]:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    left = [q for q in session_pids(p.pid) if q != os.getpid()]
    for q in left:
        try:
            os.kill(q, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    return len(left)


def parse_tests(stdout):
    """What libtest's output says: tests started, the summary's counts, the failed tests, and
    the test running when the process died (no summary)."""
    started = re.findall(r"^test (\S+) \.\.\. ", stdout, re.M)
    out = {"started": len(started)}
    summary = re.search(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored.*$", stdout, re.M)
    if summary:
        out.update(passed=int(summary.group(1)), failed_count=int(summary.group(2)),
                   ignored=int(summary.group(3)))
    elif started:
        out["last_started"] = started[-1]  # killed or crashed in it
    failures = re.search(r"^failures:\n((?:    \S+\n)+)", stdout, re.M)
    out["failed"] = failures.group(1).split() if failures else []
    return out


HANG = ("import os, subprocess, sys, time\n"
        "print('gpu-check: injected hang (GPU_CHECK_INJECT_HANG)', file=sys.stderr, flush=True)\n"
        "subprocess.Popen(['sleep', '100000'], preexec_fn=lambda: os.setpgid(0, 0))\n"
        "time.sleep(100000)\n")
# fails unless the plainer paths are chosen (as a kernel broken on the GPU would)
FAIL_UNLESS_PLAIN = ("import os, sys\n"
                     "plain = os.environ.get('%s')\n"
                     "print('gpu-check: injected failure (GPU_CHECK_INJECT_FAIL), plain paths: %%s' %% plain, "
                     "file=sys.stderr)\n"
                     "sys.exit(0 if plain else 1)\n" % "EXECCRITIC_CUDA_DISABLE")
# the retry of a failed step: every optional device path off (EXECCRITIC_CUDA_DISABLE, read by
# the binaries when they open the GPU: graphs, device sampling, tensor-core and streaming
# expert GEMMs, cp.async)
PLAIN = os.environ.get("GPU_CHECK_RETRY_DISABLE", "all")


def attempt(ctx, step, env, cap, rec, label):
    """Run the step's command once into `rec` (logs `<step><label>.out/.err`)."""
    hang = os.environ.get("GPU_CHECK_INJECT_HANG") == step.name
    failing = os.environ.get("GPU_CHECK_INJECT_FAIL") == step.name
    injected = HANG if hang else FAIL_UNLESS_PLAIN if failing else None
    argv = [sys.executable, "-c", injected] if injected else step.argv(ctx)
    out_log = os.path.join(ctx.logs, step.name + label + ".out")
    err_log = os.path.join(ctx.logs, step.name + label + ".err")
    rec.update({"status": "running", "cap_s": round(cap, 1), "started_s": round(time.monotonic() - ctx.t0, 2),
                "argv": ["<injected %s>" % ("hang" if hang else "failure")] if injected else argv})
    ctx.save()
    log("%s%s: %s (cap %.0f s)" % (step.name, label, step.what, cap))
    t = time.monotonic()
    with open(out_log, "wb") as so, open(err_log, "wb") as se:
        try:
            p = subprocess.Popen(argv, stdout=so, stderr=se, stdin=subprocess.DEVNULL, cwd=ROOT, env=env,
                                 start_new_session=True)
        except OSError as e:
            rec.update({"status": "failed", "exit_code": None, "wall_s": 0.0,
                        "stderr_tail": "could not start %s: %s" % (argv[0], e)})
            return
        ctx.current = p
        rec["pid"] = p.pid
        try:
            code = p.wait(timeout=cap)
            status = "ok" if code == 0 else "failed"
            stray = kill_step(p)  # anything it left running
        except subprocess.TimeoutExpired:
            stray = kill_step(p)
            code, status = p.returncode, "timeout"
        ctx.current = None
    rec.update({"status": status, "exit_code": code, "wall_s": round(time.monotonic() - t, 2),
                "stderr_tail": tail(err_log, 3000), "stdout_tail": tail(out_log, 1500)})
    if code is not None and code < 0:
        rec["signal"] = signal.Signals(-code).name if -code in signal.valid_signals() else -code
    if stray:
        rec["processes_killed_after"] = stray
    if step.libtest and not injected:
        rec["tests"] = parse_tests(tail(out_log, 1 << 20))
    log("%s%s: %s in %.1f s (exit %s)" % (step.name, label, status, rec["wall_s"], code))


def run_step(ctx, step, env, cap):
    """The step, and once more on the plainer device paths when it failed and time is left (its
    first attempt's result files are kept in the logs as `<file>.first-attempt`)."""
    rec = ctx.step_record(step.name)
    attempt(ctx, step, env, cap, rec, "")
    retry_cap = min(cap, ctx.left() - RESERVE_S)
    if step.retry and rec["status"] == "failed" and retry_cap >= min(step.need_s, cap):
        for f in step.outputs:
            if os.path.isfile(os.path.join(ctx.out, f)):
                shutil.move(os.path.join(ctx.out, f), os.path.join(ctx.logs, f + ".first-attempt"))
        rec["retry"] = {"EXECCRITIC_CUDA_DISABLE": PLAIN}
        attempt(ctx, step, dict(env, EXECCRITIC_CUDA_DISABLE=PLAIN), retry_cap, rec["retry"], ".plain")
    if step.after:
        step.after(ctx)
    for f in step.outputs:
        rec.setdefault("results", {})[f] = os.path.isfile(os.path.join(ctx.out, f))


def selected(name):
    only = [s for s in os.environ.get("GPU_CHECK_ONLY", "").split(",") if s]
    skip = [s for s in os.environ.get("GPU_CHECK_SKIP", "").split(",") if s]
    if only and name not in only:
        return "not in GPU_CHECK_ONLY"
    if name in skip:
        return "in GPU_CHECK_SKIP"
    return None


def run(deadline_s):
    out = os.path.abspath(os.environ.get("OUT") or os.path.join(ROOT, "gpu-check-out"))
    os.makedirs(out, exist_ok=True)
    for f in OUT_FILES:  # a previous run's files (the device tool empties $OUT itself)
        if os.path.exists(os.path.join(out, f)):
            os.remove(os.path.join(out, f))
    ctx = Run(out, deadline_s)

    def interrupted(signum, _frame):
        if ctx.current is not None:
            kill_step(ctx.current)
        for r in ctx.record["steps"]:
            if r["status"] in ("pending", "running"):
                r["status"], r["reason"] = "skipped", "the run was interrupted (%s)" % signal.Signals(signum).name
        ctx.save()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)

    archive = find_archive()
    if archive is None:
        ctx.record["error"] = "no gpu-bin/gpu-bin.tar.* (run 'bash scripts/gpu-check.sh --build' and carry gpu-bin)"
    else:
        t = time.monotonic()
        try:
            unpack(archive, ctx.work)
            ctx.record["unpack_s"] = round(time.monotonic() - t, 2)
        except (OSError, tarfile.TarError) as e:
            ctx.record["error"] = "could not unpack %s: %s" % (archive, e)
    try:
        with open(os.path.join(ctx.work, "BUILD.json")) as f:
            ctx.record["build"] = json.load(f)
    except (OSError, ValueError):
        pass
    if "error" in ctx.record:
        for r in ctx.record["steps"]:
            r["status"], r["reason"] = "skipped", ctx.record["error"]
        ctx.record["finished"] = True
        ctx.save()
        fail(ctx.record["error"])

    driver = cuda_driver_version()
    env = dict(os.environ)
    env.update(library_env(driver))
    env.update({
        "OUT": out, "GPU_CHECK_BIN": ctx.bindir, "RUST_BACKTRACE": "1",
        "EXECCRITIC_MODELS": os.path.join(ROOT, "models"),
        "EXECCRITIC_CACHE": os.path.join(ctx.work, "kernel-cache"),
        "EXECCRITIC_COMMIT": ctx.record.get("build", {}).get("commit", "unknown"),
        "EXECCRITIC_DATE": datetime.datetime.utcnow().strftime("%Y-%m-%d"),
    })
    os.makedirs(env["EXECCRITIC_CACHE"], exist_ok=True)
    kernels = os.path.join(ctx.work, "kernels")
    if os.path.isdir(kernels):
        env["EXECCRITIC_KERNEL_DIR"] = kernels
    if ctx.emulated:
        env["EXECCRITIC_BENCH_SHAPE"] = "tiny"
        env.pop("EXECCRITIC_REQUIRE_GPU", None)
    else:
        env["EXECCRITIC_REQUIRE_GPU"] = "1"
    ctx.record["env"] = {k: env[k] for k in sorted(env) if k.startswith("EXECCRITIC_")}
    ctx.record["commit"] = env["EXECCRITIC_COMMIT"]
    ctx.save()

    max_cap = float(os.environ.get("GPU_CHECK_CAP", "inf"))
    for step in STEPS:
        rec = ctx.step_record(step.name)
        why = selected(step.name)
        missing = [t for t in step.needs if not have_tool(t)] if why is None else []
        cap = min(step.cap, max_cap, float(os.environ.get("GPU_CHECK_CAP_" + step.name.upper(), "inf")),
                  ctx.left() - RESERVE_S)
        if why is None and missing:
            why = "%s not found on this host" % ", ".join(missing)
        if why is None and cap < min(step.need_s, step.cap, max_cap):
            why = "not enough time left (%.0f s of the deadline for a step that needs %d s)" % (
                max(0, ctx.left() - RESERVE_S), step.need_s)
        if why is not None:
            rec.update({"status": "skipped", "reason": why})
            log("%s: skipped: %s" % (step.name, why))
            ctx.save()
            continue
        run_step(ctx, step, env, cap)
        ctx.save()
    ctx.record["finished"] = True
    statuses = [r["status"] for r in ctx.record["steps"]]
    ctx.record["summary"] = {s: statuses.count(s) for s in ["ok", "failed", "timeout", "skipped"]}
    # only the known files stay in $OUT (anything else goes into the log archive)
    for f in os.listdir(out):
        path = os.path.join(out, f)
        if f not in OUT_FILES:
            dest = os.path.join(ctx.logs, "out-" + f)
            shutil.move(path, dest)
    ctx.save()
    log("%s; %s in %.0f s of %d; %s" % (
        ", ".join("%s %s" % (r["name"], r["status"]) for r in ctx.record["steps"]),
        ctx.record["summary"], ctx.record["elapsed_s"], deadline_s, os.path.join(out, RESULT)))
    return 0 if not any(s in ("failed", "timeout") for s in statuses) else 1


# ------------------------------------------------------------------ --build / packing

def cargo_executables(profile, targets_args):
    """Paths of the executables cargo builds for `targets_args`, by target name."""
    argv = ["cargo"] + targets_args + ["--features", "cuda", "--message-format=json-render-diagnostics"]
    if profile == "release":
        argv.append("--release")
    log("$ " + " ".join(argv))
    p = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE)
    if p.returncode != 0:
        fail("cargo failed (%d): %s" % (p.returncode, " ".join(argv)))
    exes = {}
    for line in p.stdout.decode("utf-8", "replace").splitlines():
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if m.get("reason") == "compiler-artifact" and m.get("executable"):
            exes[m["target"]["name"]] = m["executable"]
    return exes


def glibc_needed(path):
    with open(path, "rb") as f:
        found = set(re.findall(rb"GLIBC_(2\.\d+(?:\.\d+)?)", f.read()))
    return max((v.decode() for v in found), key=version_key, default=None)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def git(*args):
    code, out = run_quiet(["git", "-C", ROOT] + list(args))
    return out.strip() if code == 0 else None


def stage_binaries(profile, stage, kernels=True):
    """Build, strip and gather the binaries (and the prebuilt kernels) in `stage`."""
    tests = cargo_executables(profile, ["test", "--no-run"] + sum([["--test", t] for t in TESTS], []))
    cli = cargo_executables(profile, ["build", "--bin", CLI])
    missing = [t for t in TESTS if t not in tests] + ([CLI] if CLI not in cli else [])
    if missing:
        fail("cargo built no executable for %s" % ", ".join(missing))
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    # DWARF goes, the symbol table stays: a panic's backtrace on the host names its functions
    # (+1 MiB of archive over --strip-all)
    strip = shutil.which("strip")
    if not strip:
        log("strip not found: the binaries travel unstripped")
    built = dict(tests)
    built[CLI] = cli[CLI]
    for name in TESTS + [CLI]:
        dst = os.path.join(stage, "bin", name)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if strip:
            subprocess.run([strip, "--strip-debug", "-o", dst, built[name]], check=True)
        else:
            shutil.copy2(built[name], dst)
    build = {"commit": (git("rev-parse", "HEAD") or "unknown") + ("-dirty" if git("status", "--porcelain") else ""),
             "built_utc": datetime.datetime.utcnow().isoformat() + "Z", "profile": profile, "features": ["cuda"],
             "strip": "--strip-debug" if strip else "none",
             "rustc": (run_quiet(["rustc", "-V"])[1] or "").strip(),
             "binaries": {n: {"bytes": os.path.getsize(os.path.join(stage, "bin", n)),
                              "sha256": sha256(os.path.join(stage, "bin", n))} for n in TESTS + [CLI]}}
    build["glibc_needed"] = max((glibc_needed(os.path.join(stage, "bin", n)) or "0" for n in TESTS + [CLI]),
                                key=version_key)
    build["kernels"] = prebuild_kernels(os.path.join(stage, "bin", CLI), os.path.join(stage, "kernels")) \
        if kernels else "not built (--no-kernels)"
    write_json(os.path.join(stage, "BUILD.json"), build)
    return build


def prebuild_kernels(cli, dest):
    """`execcritic kernels prebuild --out DIR --arch sm_90` when the CLI has it (the host then
    loads the CUBINs from EXECCRITIC_KERNEL_DIR instead of compiling)."""
    code, help_text = run_quiet([cli, "kernels", "--help"])
    if code != 0 or "prebuild" not in help_text:
        log("kernels: this execcritic has no 'kernels prebuild': no CUBINs carried (the host compiles them)")
        return "not carried: the CLI has no 'kernels prebuild'"
    argv = [cli, "kernels", "prebuild", "--out", dest, "--arch", "sm_90"]
    log("$ " + " ".join(argv))
    code, out = run_quiet(argv, timeout=1800, cwd=ROOT)
    if code != 0:
        fail("kernels prebuild failed (%s):\n%s\n(--no-kernels builds without them)" % (code, out[-3000:]))
    verified = None
    if "verify" in help_text:  # the CUBINs serve exactly this build
        code, vout = run_quiet([cli, "kernels", "verify", "--dir", dest, "--arch", "sm_90"], timeout=300, cwd=ROOT)
        if code != 0:
            fail("kernels verify of the prebuilt directory failed (%s):\n%s" % (code, vout[-3000:]))
        verified = True
    files = sorted(os.listdir(dest))
    return {"files": len(files), "bytes": sum(os.path.getsize(os.path.join(dest, f)) for f in files),
            "manifest": "manifest.json" in files, "verified": verified,
            "log": out.strip().splitlines()[-3:]}


def pack(stage, archive, compression):
    """The staged folder as one archive (`xz`: smallest, for the carry; `gz`: fast)."""
    tmp = archive + ".tmp"
    mode = {"xz": "w:xz", "gz": "w:gz"}[compression]
    kwargs = {"preset": 9} if compression == "xz" else {"compresslevel": 1}
    with tarfile.open(tmp, mode, **kwargs) as tar:
        for name in sorted(os.listdir(stage)):
            tar.add(os.path.join(stage, name), arcname=name)
    os.replace(tmp, archive)


def travelling_bytes():
    """Bytes of what the device tool sends: tracked and untracked-not-ignored files of the
    working tree, a shared/ folder inside the checkout, and gpu-bin/ (the carried archive)."""
    code, out = run_quiet(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          timeout=60)
    if code != 0:
        fail("git ls-files failed: %s" % out)
    files = set(f for f in out.split("\0") if f)
    for extra in ["shared", "gpu-bin"]:
        for dirpath, _, names in os.walk(os.path.join(ROOT, extra)):
            files.update(os.path.relpath(os.path.join(dirpath, n), ROOT) for n in names)
    by = {"tree": 0, "gpu-bin": 0}
    for f in files:
        path = os.path.join(ROOT, f)
        if os.path.lexists(path):
            by["gpu-bin" if f.startswith("gpu-bin/") else "tree"] += os.lstat(path).st_size
    return by


def build(no_kernels):
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    stage = os.path.join(target, "gpu-stage")
    info = stage_binaries("release", stage, kernels=not no_kernels)
    out_dir = os.path.join(ROOT, "gpu-bin")
    shutil.rmtree(out_dir, ignore_errors=True)  # only the archive travels
    os.makedirs(out_dir)
    archive = os.path.join(out_dir, "gpu-bin.tar.xz")
    t = time.monotonic()
    pack(stage, archive, "xz")
    log("packed %s in %.0f s" % (os.path.relpath(archive, ROOT), time.monotonic() - t))
    sizes = travelling_bytes()
    total = sizes["tree"] + sizes["gpu-bin"]
    log("binaries (stripped): " + ", ".join("%s %.1f MiB" % (n, mib(b["bytes"])) for n, b in info["binaries"].items()))
    log("kernels: %s" % json.dumps(info["kernels"]))
    log("carry size: working tree %.1f MiB + %s %.1f MiB = %.1f MiB (limit %d MiB; the device tool's is 64)" % (
        mib(sizes["tree"]), os.path.relpath(archive, ROOT), mib(sizes["gpu-bin"]), mib(total), LIMIT_MIB))
    if mib(total) > LIMIT_MIB:
        fail("%.1f MiB would travel: over the %d MiB limit" % (mib(total), LIMIT_MIB))
    log("built %s (commit %s); carry 'gpu-bin' and run 'bash scripts/gpu-check.sh' on the GPU host" % (
        os.path.relpath(archive, ROOT), info["commit"]))
    return 0


# ------------------------------------------------------------------ --rehearse

NAME_OK = re.compile(r"^[A-Za-z0-9._-]+$")


def rehearse():
    user_out = os.environ.get("OUT")
    out = os.path.abspath(user_out or tempfile.mkdtemp(prefix="gpu-check-rehearse-out-"))
    os.makedirs(out, exist_ok=True)
    if os.listdir(out):
        fail("--rehearse needs an empty OUT (%s holds %s)" % (out, ", ".join(sorted(os.listdir(out)))))
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    scratch = tempfile.mkdtemp(prefix="gpu-check-rehearse-")
    t0 = time.monotonic()
    try:
        stage = os.path.join(target, "gpu-stage-rehearse")
        stage_binaries("debug", stage, kernels=False)
        archive = os.path.join(scratch, "gpu-bin.tar.gz")
        pack(stage, archive, "gz")
        log("rehearsal binaries (debug, stripped) packed in %.0f s" % (time.monotonic() - t0))
        # 1. every step, one hung, one failing unless retried on the plainer paths: the demo would
        # run for many minutes on the emulator, so it is skipped (the skip path);
        # compute-sanitizer is absent here (the missing-tool path)
        deadline = int(os.environ.get("GPU_CHECK_REHEARSE_DEADLINE", "170"))
        hang = os.environ.get("GPU_CHECK_INJECT_HANG", "model_parity")
        wall = rehearse_run(archive, scratch, out, deadline, GPU_CHECK_CAP=os.environ.get("GPU_CHECK_CAP", "30"),
                            GPU_CHECK_INJECT_HANG=hang, GPU_CHECK_INJECT_FAIL=REHEARSE_FAIL,
                            GPU_CHECK_SKIP=os.environ.get("GPU_CHECK_SKIP", "demo_train"))
        problems = check_rehearsal(out, deadline, hang, wall)
        # 2. the deadline binds: a hung step's cap is what the deadline leaves, and a step that
        # needs more than is left afterwards is skipped
        out2 = os.path.join(scratch, "out-deadline")
        os.makedirs(out2)
        wall2 = rehearse_run(archive, scratch, out2, 35, GPU_CHECK_INJECT_HANG="op_parity",
                             GPU_CHECK_ONLY="environment,op_parity,model_parity")
        problems += check_deadline_run(out2, 35, wall2)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log("rehearsal: %.0f s in all; $OUT = %s" % (time.monotonic() - t0, out))
    if problems:
        fail("rehearsal FAILED:\n  " + "\n  ".join(problems))
    if not user_out:  # a temporary $OUT is kept only when the rehearsal failed
        shutil.rmtree(out, ignore_errors=True)
    log("rehearsal passed")
    return 0


def rehearse_run(archive, scratch, out, deadline, **env):
    """The run of this script on the emulated device with `env`; its wall time."""
    work = tempfile.mkdtemp(prefix="work-", dir=scratch)
    full = dict(os.environ, OUT=out, GPU_CHECK_DEVICE="emulator", GPU_CHECK_DEADLINE=str(deadline),
                GPU_CHECK_ARCHIVE=archive, GPU_CHECK_WORK=work, **env)
    for k in ["GPU_CHECK_CAP", "GPU_CHECK_SKIP", "GPU_CHECK_ONLY"]:
        if k not in env:
            full.pop(k, None)
    t = time.monotonic()
    p = subprocess.run([sys.executable, SELF], env=full, timeout=deadline + 120)
    wall = time.monotonic() - t
    log("rehearsal run: exit %d after %.0f s (deadline %d s)" % (p.returncode, wall, deadline))
    return wall


def check_deadline_run(out, deadline, wall):
    problems = []
    try:
        with open(os.path.join(out, RESULT)) as f:
            steps = {r["name"]: r for r in json.load(f)["steps"]}
    except (OSError, ValueError, KeyError) as e:
        return ["deadline run: %s unreadable: %s" % (RESULT, e)]
    if wall > deadline + 5:
        problems.append("deadline run: took %.0f s, past its %d s deadline" % (wall, deadline))
    op = steps.get("op_parity", {})
    if op.get("status") != "timeout" or op.get("cap_s", deadline) > deadline - RESERVE_S:
        problems.append("deadline run: the hung op_parity is %s with cap %s (deadline %d s)" % (
            op.get("status"), op.get("cap_s"), deadline))
    model = steps.get("model_parity", {})
    if model.get("status") != "skipped" or "not enough time" not in model.get("reason", ""):
        problems.append("deadline run: model_parity is %s (%s), not skipped for time" % (
            model.get("status"), model.get("reason")))
    print("gpu-check: deadline run: " + ", ".join("%s %s" % (n, r.get("status")) for n, r in steps.items()))
    return problems


REHEARSE_FAIL = "backward_parity"


def check_rehearsal(out, deadline, hang, wall):
    problems = []
    if wall > deadline + 5:
        problems.append("the run took %.0f s, past its %d s deadline" % (wall, deadline))
    files = []
    for dirpath, dirs, names in os.walk(out):
        depth = os.path.relpath(dirpath, out).count(os.sep) + (0 if dirpath == out else 1)
        files += [(depth, n) for n in names]
        for n in names + dirs:
            if not NAME_OK.match(n):
                problems.append("%s: a name the device tool does not bring back" % n)
    if len(files) > MAX_OUT_FILES:
        problems.append("%d files under $OUT (at most %d)" % (len(files), MAX_OUT_FILES))
    if any(d > 2 for d, _ in files):
        problems.append("files deeper than 2 folders under $OUT")
    try:
        with open(os.path.join(out, RESULT)) as f:
            rec = json.load(f)
    except (OSError, ValueError) as e:
        return problems + ["%s unreadable: %s" % (RESULT, e)]
    steps = {r["name"]: r for r in rec.get("steps", [])}
    if list(steps) != [s.name for s in STEPS]:
        problems.append("steps recorded %s, expected %s" % (list(steps), [s.name for s in STEPS]))
    for name, r in steps.items():
        if r.get("status") not in ("ok", "failed", "timeout", "skipped"):
            problems.append("%s: status %s" % (name, r.get("status")))
        if r.get("status") in ("ok", "failed", "timeout") and not all(k in r for k in ["wall_s", "exit_code", "stderr_tail"]):
            problems.append("%s: wall time, exit code or stderr tail missing" % name)
        if r.get("status") == "skipped" and not r.get("reason"):
            problems.append("%s: skipped without a reason" % name)
    h = steps.get(hang, {})
    if h.get("status") != "timeout":
        problems.append("the hung step %s is %s, not timeout" % (hang, h.get("status")))
    elif h.get("pid") and session_pids(h["pid"]):
        problems.append("processes of the hung step are still running: %s" % session_pids(h["pid"]))
    f = steps.get(REHEARSE_FAIL, {})
    if f.get("status") != "failed" or f.get("retry", {}).get("status") != "ok" \
            or f["retry"].get("EXECCRITIC_CUDA_DISABLE") != PLAIN:
        problems.append("the failing step %s is %s, its retry on the plain paths %s" % (
            REHEARSE_FAIL, f.get("status"), f.get("retry")))
    names = [s.name for s in STEPS]
    later = [steps.get(n, {}) for n in names[names.index(hang) + 1:]] if hang in names else []
    if not any(r.get("status") == "ok" for r in later):
        problems.append("no step after the hung one ran to completion")
    if not rec.get("finished"):
        problems.append("the record is not marked finished")
    try:
        with tarfile.open(os.path.join(out, LOGS)) as tar:
            logged = set(os.path.basename(n) for n in tar.getnames())
        ran = [n for n, r in steps.items() if r.get("status") in ("ok", "failed", "timeout")]
        problems += ["no log of %s in %s" % (n, LOGS) for n in ran if n + ".err" not in logged]
    except (OSError, tarfile.TarError) as e:
        problems.append("%s unreadable: %s" % (LOGS, e))
    for s in STEPS:
        if s.bench and steps.get(s.name, {}).get("status") == "ok":
            for f in s.outputs:
                try:
                    with open(os.path.join(out, f)) as fh:
                        doc = json.load(fh)
                    if "phases" not in doc:  # a summary (h200-engine.json)
                        if not doc.get("fraction_of_limit"):
                            problems.append("%s: no fraction_of_limit" % f)
                        continue
                    bad = [p["name"] for p in doc["phases"] if p.get("status") != "ok"]
                    if bad or not doc["phases"]:
                        problems.append("%s: phases not ok: %s" % (f, bad or "none recorded"))
                except (OSError, ValueError) as e:
                    problems.append("%s of %s: %s" % (f, s.name, e))
    print("gpu-check: rehearsal record: " + ", ".join(
        "%s %s%s" % (n, r.get("status"), " %.1fs" % r["wall_s"] if "wall_s" in r else "") for n, r in steps.items()))
    print("gpu-check: rehearsal $OUT: " + ", ".join(sorted(n for _, n in files)))
    return problems


# ------------------------------------------------------------------ main

def main(argv):
    args = list(argv)
    if "-h" in args or "--help" in args:
        print(__doc__)
        return 0
    if "--snapshot" in args:
        return snapshot(args[args.index("--snapshot") + 1])
    if "--list" in args:
        for s in STEPS:
            needs = " (needs %s)" % ", ".join(s.needs) if s.needs else ""
            print("%-17s cap %3d s, runs with >= %3d s left%s: %s" % (s.name, s.cap, s.need_s, needs, s.what))
        return 0
    if "--build" in args:
        return build("--no-kernels" in args)
    if "--rehearse" in args:
        return rehearse()
    deadline = float(os.environ.get("GPU_CHECK_DEADLINE", DEFAULT_DEADLINE))
    if "--deadline" in args:
        deadline = float(args[args.index("--deadline") + 1])
    known = {"--deadline", "--no-kernels"}
    for a in args:
        if a.startswith("-") and a not in known:
            fail("unknown flag %s (see --help)" % a)
    return run(deadline)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
