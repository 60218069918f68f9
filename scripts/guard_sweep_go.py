#!/usr/bin/env python3
"""The other error of the `go test` guard, measured on real code: does an honest test keep its
outcome when the harness judges it?

For each Go module given (a directory, e.g. a Debian golang-*-dev package unpacked with
`dpkg-deb -x`), this script
  1. copies it into a git repository with one root commit (a go.mod is written where the package
     ships none: `module <import path>`),
  2. runs plain `go test -json -count=1 ./...` there (vet as go test runs it; the guarded build vets the files as written) (offline, GOFLAGS=-mod=mod GOPROXY=off) and
     keeps every top-level test's and every depth-1 subtest's outcome (pass, fail, skip),
  3. writes one task per top-level test (`FAIL_TO_PASS` = that test) and one per test with
     subtests (`FAIL_TO_PASS` = its depth-1 subtests) and grades the empty patch with
     `execcritic grade` (local sandbox, the guarded run: renamed copies, look-alikes, one process
     per copy), and
  4. compares each id's guarded status with its plain outcome.

An honest test should come out as it does plainly: a plain pass PASSED, a plain failure FAILED.
Anything else is the guard's cost on real code — a false failure, a false `tampered`, or a
harness error (which is never a verdict, but leaves the test ungradable) — and is listed with its
reason. Prints a markdown report (and appends it to --write).

Run (as root, for the local sandbox's throw-away runs):
  cargo build --release
  apt-get download golang-github-spf13-pflag-dev ... && dpkg-deb -x <deb> /tmp/x
  scripts/guard_sweep_go.py /tmp/x/usr/share/gocode/src/github.com/spf13/pflag ... \
      [--bin target/release/execcritic] [--work /tmp/guard-sweep] [--write benches/results/guard-sweep.md]
"""
import argparse
import collections
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time

# Grading applies the task's test patch (an instance always has one): a file the tests never read.
TEST_PATCH = ("diff --git a/testdata/guard-sweep.txt b/testdata/guard-sweep.txt\nnew file mode 100644\n"
              "--- /dev/null\n+++ b/testdata/guard-sweep.txt\n@@ -0,0 +1 @@\n+every test as it is\n")
# cgo as `go test` has it by default (the guard builds in the same context).
ENV = dict(os.environ, GOFLAGS="-mod=mod", GOPROXY="off", GOTOOLCHAIN="local")


def run(cmd, cwd, check=True, **kw):
    r = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} in {cwd} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def import_path(src):
    """The module path: go.mod's, else the path under .../gocode/src/ (Debian's layout)."""
    mod = os.path.join(src, "go.mod")
    if os.path.exists(mod):
        for line in open(mod):
            if line.startswith("module "):
                return line.split()[1].strip('"'), True
    marker = "/gocode/src/"
    if marker in src:
        return src.split(marker, 1)[1].rstrip("/"), False
    sys.exit(f"{src}: no go.mod and not under a gocode/src tree: cannot tell its import path")


def make_repo(src, work, name):
    """A git repository with the module as its one root commit, and a bare clone for the task."""
    tree = os.path.join(work, "trees", name)
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(src, tree, symlinks=True)
    path, has_mod = import_path(src)
    if not has_mod:
        with open(os.path.join(tree, "go.mod"), "w") as f:
            f.write(f"module {path}\n\ngo 1.13\n")
    return tree, path, commit_root(tree, work, name, f"{path} as packaged")


def commit_root(tree, work, name, message):
    """Commit `tree` as a new repository's one root commit and clone it bare to
    `<work>/repos/<name>.git` (the task's repo_path): the commit's hash."""
    git = ["git", "-c", "user.name=sweep", "-c", "user.email=sweep@localhost", "-c", "commit.gpgsign=false"]
    run(["git", "init", "-q"], tree)
    run(git + ["add", "-A"], tree)
    run(git + ["commit", "-q", "-m", message], tree)
    head = run(["git", "rev-parse", "HEAD"], tree).stdout.strip()
    bare = os.path.join(work, "repos", f"{name}.git")
    shutil.rmtree(bare, ignore_errors=True)
    run(["git", "clone", "-q", "--bare", tree, bare], work)
    return head


def is_test_name(name):
    """`go test`'s rule for a test function (examples, benchmarks and fuzz targets are not ids)."""
    return name.startswith("Test") and (len(name) == 4 or not name[4].islower())


def plain_outcomes(tree, module):
    """{node id: pass|fail|skip} of a plain `go test -json -count=1 ./...`: top-level tests and
    depth-1 subtests (ids as the runner writes them: `./dir::TestX`, `./dir::TestX/case`)."""
    r = run(["go", "test", "-json", "-count=1", "./..."], tree, check=False, timeout=1800)
    out = {}
    for line in r.stdout.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        test, action = ev.get("Test"), ev.get("Action")
        if not test or action not in ("pass", "fail", "skip") or test.count("/") > 1 or not is_test_name(test.split("/")[0]):
            continue
        rel = ev["Package"][len(module):].lstrip("/") if ev["Package"].startswith(module) else None
        if rel is None:
            continue
        out[f"./{rel}::{test}" if rel else f".::{test}"] = action
    return out


def tasks_for(name, head, outcomes):
    """One task per top-level test, and one per test with subtests (its depth-1 subtests)."""
    groups = collections.defaultdict(list)
    for node in outcomes:
        pkg, test = node.split("::", 1)
        parent = test.split("/", 1)[0]
        groups[(pkg, parent, "/" in test)].append(node)
    tasks = []
    for (pkg, parent, sub), nodes in sorted(groups.items()):
        tid = f"{name}__{pkg.strip('./').replace('/', '_') or 'root'}__{parent}{'__subtests' if sub else ''}"
        tasks.append({
            "instance_id": tid, "repo": f"sweep/{name}", "base_commit": head, "patch": "", "test_patch": TEST_PATCH,
            "problem_statement": "guard sweep: every test as it is", "hints_text": "", "created_at": "2026-12-07T00:00:00Z",
            "version": "sweep", "FAIL_TO_PASS": sorted(nodes), "PASS_TO_PASS": [], "environment_setup_commit": head,
            "repo_path": f"repos/{name}.git", "test_cmd": "go test", "runner": "go",
        })
    return tasks


def arguments(what):
    """The command line both sweeps take (`what`: the positional arguments' name)."""
    ap = argparse.ArgumentParser()
    ap.add_argument(what, nargs="+")
    ap.add_argument("--bin", default="target/release/execcritic")
    ap.add_argument("--work", default="/tmp/guard-sweep")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--write", default=None)
    ap.add_argument("--report-only", action="store_true", help="report on the grade results already in --work")
    return ap.parse_args()


def grade_and_report(a, all_tasks, plain, started, title, version, method):
    """Grade every task's empty patch with `execcritic grade`, compare each id's guarded status
    with its plain outcome (`plain`: {name: (module, {id: pass|fail|skip})}), print the markdown
    report and append it to --write. `title` heads it, `version` names the toolchain, `method`
    says how tasks and plain outcomes were made."""
    binary = os.path.abspath(a.bin)
    rows, problems = [], []
    tasks_path = os.path.join(a.work, "tasks.jsonl")
    with open(tasks_path, "w") as f:
        f.writelines(json.dumps(t) + "\n" for t in all_tasks)
    preds = os.path.join(a.work, "predictions.jsonl")
    with open(preds, "w") as f:
        f.writelines(json.dumps({"instance_id": t["instance_id"], "model_patch": ""}) + "\n" for t in all_tasks)
    out = os.path.join(a.work, "grade")
    graded_at = time.time()
    if not a.report_only:
        shutil.rmtree(out, ignore_errors=True)
        g = subprocess.run([binary, "grade", "--tasks", tasks_path, "--predictions", preds, "--out", out,
                            "--workers", str(a.workers)], capture_output=True, text=True)
        if not os.path.exists(os.path.join(out, "results.jsonl")):
            sys.exit(f"execcritic grade wrote no results ({g.returncode}):\n{g.stderr[-3000:]}")
    grade_s = time.time() - graded_at
    results = [json.loads(l) for l in open(os.path.join(out, "results.jsonl")) if l.strip()]
    by_task = {r["instance_id"]: r for r in results}
    for name, (module, outcomes) in plain.items():
        c = collections.Counter()
        for t in (t for t in all_tasks if t["repo"] == f"sweep/{name}"):
            r = by_task.get(t["instance_id"], {})
            err = r.get("error_kind")
            tampered = r.get("tampered") or []
            for node in t["FAIL_TO_PASS"]:
                want = {"pass": "PASSED", "fail": "FAILED", "skip": "SKIPPED"}[outcomes[node]]
                kind = "subtest" if "/" in node.split("::", 1)[1] else "test"
                c[f"{kind}s"] += 1
                c[f"plain_{outcomes[node]}"] += 1
                if err:
                    c["error"] += 1
                    problems.append((node, outcomes[node], f"harness error: {err}"))
                    continue
                got = (r.get("tests") or {}).get(node, "absent")
                if tampered:
                    c["tampered"] += 1
                    problems.append((node, outcomes[node], f"tampered: {json.dumps(tampered)[:300]}"))
                elif got == want:
                    c["same"] += 1
                else:
                    c["differs"] += 1
                    problems.append((node, outcomes[node], f"guarded {got}"))
        rows.append((name, module, c))
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    commit = run(["git", "rev-parse", "--short", "HEAD"], os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    lines = [
        title,
        "",
        f"- date: {when}, commit `{commit}`; {version}; `execcritic grade` of the empty patch, local sandbox, "
        f"{len(all_tasks)} tasks, {a.workers} workers"
        + ("" if a.report_only else f", {grade_s:.0f} s (whole run {time.time() - started:.0f} s)"),
        f"- {method}",
        "",
        "| module | tests | subtests | plain pass / fail / skip | same outcome guarded | differs | tampered | harness error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, module, c in rows:
        lines.append(f"| {module} | {c['tests']} | {c['subtests']} | {c['plain_pass']} / {c['plain_fail']} / {c['plain_skip']} "
                     f"| {c['same']} | {c['differs']} | {c['tampered']} | {c['error']} |")
    if problems:
        # One line per kind of difference (names in backquotes, hex run names and numbers folded).
        kinds = collections.OrderedDict()
        for node, was, why in problems:
            key = (was, re.sub(r"TestX[0-9a-f]{16}", "TestX…", re.sub(r"`[^`]*`", "`…`", why))[:300])
            kinds.setdefault(key, []).append(node)
        lines += ["", "Ids that did not keep their outcome, by kind (plain outcome: what the guarded run said):", ""]
        for (was, why), nodes in kinds.items():
            shown = ", ".join(f"`{n}`" for n in nodes[:3]) + (f" and {len(nodes) - 3} more" if len(nodes) > 3 else "")
            lines.append(f"- {len(nodes)} id{'s' if len(nodes) > 1 else ''} ({was}: {why}): {shown}")
    report = "\n".join(lines) + "\n"
    print(report)
    if a.write:
        with open(a.write, "a") as f:
            f.write("\n" + report)




def main():
    a = arguments("modules")
    os.makedirs(a.work, exist_ok=True)
    go = run(["go", "version"], a.work).stdout.strip()
    all_tasks, plain = [], {}
    started = time.time()
    for src in a.modules:
        src = os.path.abspath(src.rstrip("/"))
        name = os.path.basename(src)
        tree, module, head = make_repo(src, a.work, name)
        outcomes = plain_outcomes(tree, module)
        plain[name] = (module, outcomes)
        all_tasks += tasks_for(name, head, outcomes)
    grade_and_report(
        a, all_tasks, plain, started, "## Run: the `go test` guard on real modules, every test as it is", go,
        "one task per top-level test and one per test with subtests (its depth-1 subtests); "
        "plain outcome: `go test -json -count=1 ./...` on the same tree (go test's default vet checks; the guarded build runs them on the files as written); "
        "ids: `Test` functions and their depth-1 subtests (examples, benchmarks, fuzz targets are not ids)")


if __name__ == "__main__":
    main()
