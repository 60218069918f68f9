#!/usr/bin/env python3
"""The other error of the `cargo test` guard, measured on real code: does an honest test keep
its outcome when the harness judges it? The Rust counterpart of guard_sweep_go.py (whose grading
and report it uses).

For each crate given (a directory, e.g. an unpacked crates.io package under
~/.cargo/registry/src), this script
  1. copies it into a git repository with one root commit,
  2. builds its test targets (`cargo test --offline --no-run`), runs each test binary plainly
     (`<binary> --test-threads=1`, in the package directory, as cargo does) and keeps every
     test's outcome (ok, FAILED, ignored) under the runner's node ids (`<package>/lib::path`,
     `<package>/test/<name>::path`, `<package>/bin/<name>::path`),
  3. writes one task per test target (`FAIL_TO_PASS` = its tests, at most 60 per task) and grades
     the empty patch with `execcritic grade` (local sandbox, the guarded run: the build of the
     files as written, the rewrite staged behind a stub, renamed copies, look-alikes, one process
     per copy), and
  4. compares each id's guarded status with its plain outcome.

The guarded build is offline with no cargo home of the host's. A crate with dependencies gets
the task environment a user would give it: `environment_setup` runs `cargo vendor
--versioned-dirs /env/cargo-vendor` once, with network (crates.io), and every guarded build
reads its dependencies from there (docs/harness.md, "Dependencies").

Run (as root, for the local sandbox's throw-away runs):
  cargo build --release
  scripts/guard_sweep_rust.py ~/.cargo/registry/src/*/heck-0.5.0 ... \
      [--bin target/release/execcritic] [--work /tmp/guard-sweep-rust] [--write benches/results/guard-sweep.md]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from guard_sweep_go import TEST_PATCH, arguments, commit_root, grade_and_report  # noqa: E402

TASK_SIZE = 60


def run(cmd, cwd, check=True, **kw):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} in {cwd} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def make_repo(src, work, name):
    """A git repository with the crate as its one root commit, and a bare clone for the task."""
    tree = os.path.join(work, "trees", name)
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(src, tree, symlinks=True, ignore=shutil.ignore_patterns("target"))
    with open(os.path.join(tree, ".gitignore"), "w") as f:
        f.write("/target\n")
    return tree, commit_root(tree, work, name, f"{name} as packaged")


def plain_outcomes(tree):
    """(package, {node id: pass|fail|skip}) of each test binary run plainly."""
    built = run(["cargo", "test", "--offline", "--no-run", "--message-format=json"], tree, check=False, timeout=1800)
    if built.returncode != 0:
        return None, built.stderr[-600:]
    out, package = {}, None
    for line in built.stdout.splitlines():
        try:
            v = json.loads(line)
        except ValueError:
            continue
        if v.get("reason") != "compiler-artifact" or not v.get("profile", {}).get("test") or not v.get("executable"):
            continue
        kind, tname = v["target"]["kind"][0], v["target"]["name"]
        package = v["package_id"]
        target = {"lib": "lib", "test": f"test/{tname}", "bin": f"bin/{tname}"}.get(kind)
        if target is None:
            continue
        r = run([v["executable"], "--test-threads=1"], tree, check=False, timeout=1800)
        for m in re.finditer(r"^test (\S+) \.\.\. (ok|FAILED|ignored)", r.stdout, re.M):
            out[(target, m.group(1))] = {"ok": "pass", "FAILED": "fail", "ignored": "skip"}[m.group(2)]
    return package, out


def main():
    a = arguments("crates")
    os.makedirs(a.work, exist_ok=True)
    version = run(["rustc", "--version"], a.work).stdout.strip()
    all_tasks, plain, skipped = [], {}, []
    started = time.time()
    for src in a.crates:
        src = os.path.abspath(src.rstrip("/"))
        name = os.path.basename(src)
        tree, head = make_repo(src, a.work, name)
        meta = json.loads(run(["cargo", "metadata", "--offline", "--no-deps", "--format-version", "1"], tree).stdout)
        pkg = meta["packages"][0]["name"]
        has_deps = bool(meta["packages"][0]["dependencies"])
        _, found = plain_outcomes(tree)
        if not isinstance(found, dict) or not found:
            skipped.append(name)
            continue
        outcomes = {f"{pkg}/{target}::{path}": o for (target, path), o in found.items()}
        plain[name] = (name, outcomes)
        by_target = {}
        for node in sorted(outcomes):
            by_target.setdefault(node.split("::", 1)[0], []).append(node)
        for target, nodes in by_target.items():
            for i in range(0, len(nodes), TASK_SIZE):
                tid = f"{name}__{target.split('/', 1)[1].replace('/', '_')}__{i // TASK_SIZE}"
                all_tasks.append({
                    "instance_id": tid, "repo": f"sweep/{name}", "base_commit": head, "patch": "", "test_patch": TEST_PATCH,
                    "problem_statement": "guard sweep: every test as it is", "hints_text": "", "created_at": "2026-12-07T00:00:00Z",
                    "version": "sweep", "FAIL_TO_PASS": nodes[i:i + TASK_SIZE], "PASS_TO_PASS": [], "environment_setup_commit": head,
                    "repo_path": f"repos/{name}.git", "test_cmd": "cargo test", "runner": "cargo",
                })
                if has_deps:
                    all_tasks[-1]["environment_setup"] = {
                        "commands": ["cargo vendor --versioned-dirs /env/cargo-vendor > /dev/null"], "cache_key": f"sweep-{name}"}
    if skipped:
        print(f"skipped (no test that builds offline): {', '.join(skipped)}", file=sys.stderr)
    grade_and_report(
        a, all_tasks, plain, started, "## Run: the `cargo test` guard on real crates, every test as it is", version,
        f"one task per test target (at most {TASK_SIZE} ids each); plain outcome: each test binary of "
        "`cargo test --offline --no-run` run as `<binary> --test-threads=1` in the package directory; "
        "ids: libtest's tests of the lib, integration-test and bin targets (doctests are not ids)")


if __name__ == "__main__":
    main()
