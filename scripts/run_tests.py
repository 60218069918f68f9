#!/usr/bin/env python3
"""Runs the test binaries `cargo test --no-run` built, several at a time (scripts/test.sh).

`cargo test` runs its test binaries one after another. Most of ours wait on sandboxes, pytest
and git far more than they compute (the CI-sized `demo train` keeps about 45 % of two cores
busy), so one binary at a time leaves the machine half idle: this runner keeps `--jobs` binaries
(default 2, `EXECCRITIC_TEST_JOBS`) in flight, longest expected first, each run as `cargo test`
runs it (working directory the package root, `CARGO` and `CARGO_MANIFEST_DIR` set). Each
binary's output is kept in its own log and printed whole when it finishes, so outputs never
interleave; a summary lists every binary with its wall time, and the exit status is 1 if any
failed. Ctrl-C stops every running binary (its process group) before exiting.

Usage: run_tests.py CARGO_JSON [-- ARGS passed to every test binary]
where CARGO_JSON holds the output of `cargo test --no-run --message-format=json`.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

# Wall seconds of the longest binaries in a CI run (fresh clone, 2 cores, one at a time): the
# scheduling order only (longest first), never a limit. Binaries not named here count as short.
EXPECTED_SECONDS = {
    "train_demo": 1457,
    "harness_redteam": 557,
    "harness_native_guard": 417,
    "harness_suite": 166,
    "eval_cli": 127,
    "train_grpo_device": 101,
    "official_real_docker": 76,
    "official_pro_docker": 62,
    "harness_gates": 62,
    "harness_kill": 45,
    "official_eval_docker": 44,
    "train_sft_calls": 43,
    "agents_cli": 43,
    "harness_sandbox": 37,
    "harness_attacks": 36,
    "suite_tasks": 28,
    "harness_classify": 26,
    "fuzz": 24,
    "harness_environment": 23,
    "agents_repair": 20,
}
SHORT = 5


def test_binaries(cargo_json):
    """(name, executable) of every test target cargo built, from its JSON messages."""
    out = []
    with open(cargo_json) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
                continue
            if not msg.get("profile", {}).get("test"):
                continue
            target = msg["target"]
            kind = target["kind"][0]
            name = target["name"] if kind == "test" else f"{target['name']} ({kind})"
            out.append((name, msg["executable"]))
    return out


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    binaries = test_binaries(argv[1])
    if not binaries:
        print(f"run_tests: no test binaries in {argv[1]}", file=sys.stderr)
        return 2
    jobs = max(1, int(os.environ.get("EXECCRITIC_TEST_JOBS", "2")))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, CARGO_MANIFEST_DIR=root, CARGO=os.environ.get("CARGO", "cargo"))
    queue = sorted(binaries, key=lambda b: -EXPECTED_SECONDS.get(b[0], SHORT))
    logs = tempfile.mkdtemp(prefix="execcritic-tests-")
    print(f"run_tests: {len(queue)} test binaries, {jobs} at a time (logs in {logs})", flush=True)
    running, results = {}, []
    t_start = time.monotonic()
    try:
        while queue or running:
            while queue and len(running) < jobs:
                name, exe = queue.pop(0)
                log_path = os.path.join(logs, name.replace(" ", "_").replace("(", "").replace(")", "") + ".log")
                log = open(log_path, "w")
                proc = subprocess.Popen(
                    [exe] + extra, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True)
                running[proc.pid] = (name, proc, log, log_path, time.monotonic())
                print(f"run_tests: started {name}", flush=True)
            pid, status = os.wait()
            if pid not in running:
                continue
            name, proc, log, log_path, t0 = running.pop(pid)
            proc.returncode = os.waitstatus_to_exitcode(status)
            log.close()
            secs = time.monotonic() - t0
            results.append((name, proc.returncode, secs))
            print(f"\n──── {name}: exit {proc.returncode} after {secs:.0f} s ────", flush=True)
            with open(log_path, errors="replace") as f:
                sys.stdout.write(f.read())
            sys.stdout.flush()
    except KeyboardInterrupt:
        for _, proc, _, _, _ in running.values():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        print("run_tests: interrupted", file=sys.stderr)
        return 130
    failed = [r for r in results if r[1] != 0]
    print(f"\nrun_tests: {len(results)} binaries in {time.monotonic() - t_start:.0f} s wall "
          f"({sum(r[2] for r in results):.0f} s summed), {len(failed)} failed")
    for name, rc, secs in sorted(results, key=lambda r: -r[2]):
        mark = "FAILED" if rc != 0 else "ok"
        print(f"  {secs:7.0f} s  {mark:6}  {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
