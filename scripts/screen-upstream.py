#!/usr/bin/env python3
"""Measure the false-refusal rate of the static tamper screen on REAL upstream fix commits.

Every patch screened here is the source part of a fix that was merged upstream, so every
refusal by `execcritic screen` is a false refusal (a legitimate change refused).

What it does, per git mirror (a bare repository, e.g. one made by the `fetch` tool under
/work/.mirror/OWNER+NAME/repo):

1. Walks first-parent history from HEAD, newest first. A non-merge commit is diffed against its
   parent; a merge commit (a merged pull request) against its FIRST parent, i.e. the PR's net
   change.
2. Keeps commits that look like fixes: the subject (for a merge: the subject plus the first
   non-empty body line, which holds the PR title) matches FIX_RE, case-insensitively:
   a word starting with fix / bug / regress / issue (fix, fixes, fixed, bugfix, bugs,
   regression, issue-123 ...), or `closes|resolves #N`.
3. Splits the diff the way SWE-bench splits `patch` from `test_patch`: a file is a TEST file
   when a path component is `test`, `tests` or `testing`, or its name is `test_*.py`,
   `*_test.py` or `conftest.py` (either side of a rename). The commit is kept only when it
   touches at least one non-test `.py` file; the screened patch holds ALL non-test files
   (code, docs, changelog, configuration), as SWE-bench's gold `patch` does.
4. Skips (and counts) source diffs that are binary or larger than --max-bytes (200 KB), and
   checks that each source diff applies to the parent with `git apply --check --cached` against
   a temporary index (`GIT_INDEX_FILE=tmp git read-tree PARENT`; no work tree is needed).
5. Takes the newest --n such commits per project (default 60), writes each source patch to
   --work/patches/PROJECT/SHA.diff and screens them with `execcritic screen`, 100 per call.
6. Writes one JSON line per commit to --out (default --work/results.jsonl) and prints a
   Markdown summary (per project: screened, refused, rate; every refusal with its class, path,
   detail and the rule of src/harness/tamper.rs behind it), also written to --summary if given.
   For a refused configuration file it also reads the parent's copy of that file and names the
   INI/TOML sections the hunks really change (`true_sections`), which the screen cannot see when
   a hunk's context starts below its section header.

Run from the repository root (stdlib only, Python 3.11):

    python3 scripts/screen-upstream.py --n 60 /work/.mirror/*/repo

Options: --bin (default target/debug/execcritic), --work (default /tmp/screen-upstream),
--out, --summary, --max-bytes. Exit status 0 even when patches are refused (the count is the
measurement); 2 on a usage or tool error.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIX_RE = re.compile(r"\b(fix\w*|bug\w*|regress\w*|issue\w*)|\b(close[sd]?|resolve[sd]?)\s+#\d+", re.I)
TEST_DIRS = {"test", "tests", "testing"}

# Which rule of src/harness/tamper.rs each class comes from (for the "why" of a refusal).
RULES = {
    "unsafe_path": "path_rules: path_problem() -> absolute / `..` / not a plain relative path",
    "git_path": "path_rules: path_problem() -> inside .git",
    "runner_config": "path_rules: file named pytest.ini/.pytest.ini, or config_rules: a changed "
    "line of pyproject.toml/setup.cfg/tox.ini in a section whose header contains `pytest`, or "
    "matching the runner-keys regex outside any section / in a section header",
    "conftest": "screen_candidate: a conftest.py anywhere",
    "startup_hook": "path_rules: *.pth, sitecustomize*/usercustomize* name or component",
    "plugin_entry_point": "config_rules: a changed line matching `pytest11` (or in a pytest11 "
    "section) of setup.py/setup.cfg/pyproject.toml/tox.ini",
    "package_metadata": "path_rules: a component ending in .egg-info/.dist-info/.egg-link",
    "bytecode": "path_rules: __pycache__ component or *.pyc/*.pyo",
    "binary_patch": "path_rules: FileChange.binary",
    "symlink": "path_rules: a file mode other than 100644/100755",
    "test_checkout": "path_rules: .gitattributes / .gitmodules",
}


def git(gd: str, *args: str, env: dict | None = None, text: bool = True, check: bool = True,
        stdin: bytes | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, GIT_LITERAL_PATHSPECS="1", LC_ALL="C")
    if env:
        e.update(env)
    return subprocess.run(["git", "--git-dir", gd, *args], capture_output=True, env=e,
                          text=text if stdin is None else False, check=check, input=stdin)


def is_test(path: str) -> bool:
    comps = path.split("/")
    name = comps[-1]
    return (any(c in TEST_DIRS for c in comps[:-1])
            or name == "conftest.py"
            or (name.startswith("test_") and name.endswith(".py"))
            or name.endswith("_test.py"))


def project_name(gd: str) -> str:
    p = Path(gd).resolve()
    name = p.parent.name if p.name in ("repo", ".git") else p.name
    return name.replace("+", "/")


def changed_paths(gd: str, parent: str, commit: str) -> list[list[str]]:
    """[[status, path...], ...] from `git diff --name-status -M -z` (renames give two paths)."""
    out = git(gd, "diff", "--name-status", "-M", "-z", parent, commit, text=False).stdout
    parts = out.decode("utf-8", "surrogateescape").split("\0")
    res, i = [], 0
    while i < len(parts) and parts[i]:
        st = parts[i]
        n = 2 if st[0] in "RC" else 1
        res.append([st, *parts[i + 1:i + 1 + n]])
        i += 1 + n
    return res


def walk(gd: str):
    """Yield (sha, first_parent, is_merge, title) along first-parent history, newest first."""
    p = subprocess.Popen(["git", "--git-dir", gd, "log", "--first-parent", "-z",
                          "--format=%H%x1f%P%x1f%s%x1f%b", "HEAD"],
                         stdout=subprocess.PIPE, env=dict(os.environ, LC_ALL="C"))
    buf = b""
    try:
        while True:
            chunk = p.stdout.read(1 << 16)
            if not chunk:
                break
            buf += chunk
            *recs, buf = buf.split(b"\0")
            for r in recs:
                yield parse_rec(r)
        if buf.strip():
            yield parse_rec(buf)
    finally:
        p.kill()
        p.wait()


def parse_rec(r: bytes):
    sha, parents, subj, body = r.decode("utf-8", "replace").lstrip("\n").split("\x1f", 3)
    ps = parents.split()
    title = subj
    if len(ps) > 1:
        first = next((l.strip() for l in body.splitlines() if l.strip()), "")
        title = f"{subj} | {first}" if first else subj
    return sha, (ps[0] if ps else None), len(ps) > 1, title


def collect(gd: str, n: int, max_bytes: int, pdir: Path, stats: dict) -> list[dict]:
    """The newest n fix commits of one mirror whose source diff applies; patches in pdir."""
    pdir.mkdir(parents=True, exist_ok=True)
    recs = []
    for sha, parent, merge, title in walk(gd):
        if len(recs) >= n:
            break
        stats["walked"] += 1
        if parent is None or not FIX_RE.search(title):
            continue
        stats["fix_subject"] += 1
        files = changed_paths(gd, parent, sha)
        src = [f for f in files if not any(is_test(p) for p in f[1:])]
        if not any(p.endswith(".py") for f in src for p in f[1:]):
            stats["no_source_py"] += 1
            continue
        paths = sorted({p for f in src for p in f[1:]})
        diff = git(gd, "diff", "-M", "--no-color", "--no-ext-diff", parent, sha, "--", *paths,
                   text=False).stdout
        if len(diff) > max_bytes:
            stats["too_large"] += 1
            continue
        if re.search(rb"^(Binary files .* differ|GIT binary patch)$", diff, re.M):
            stats["binary"] += 1
            continue
        with tempfile.TemporaryDirectory() as td:
            env = {"GIT_INDEX_FILE": os.path.join(td, "index")}
            git(gd, "read-tree", parent, env=env)
            ap = git(gd, "apply", "--check", "--cached", "-", env=env, check=False, stdin=diff)
        if ap.returncode != 0:
            stats["apply_fail"] += 1
            print(f"  apply --check failed {sha[:10]}: {ap.stderr.decode()[:200]}", file=sys.stderr)
            continue
        pf = pdir / f"{sha}.diff"
        pf.write_bytes(diff)
        recs.append({"project": project_name(gd), "commit": sha, "parent": parent,
                     "merge": merge, "subject": title[:200], "files": paths,
                     "test_files_dropped": sum(1 for f in files if f not in src),
                     "bytes": len(diff), "patch": str(pf)})
    return recs


def screen(binary: str, recs: list[dict], gds: dict) -> None:
    """Screen every patch. A patch that changes a configuration file is screened with its
    parent as Base (`--repo --rev`: a hunk's section is read from the parent's file, as the gate
    reads it from its sandbox); the rest 100 per call."""
    by_patch = {r["patch"]: r for r in recs}
    calls = []
    plain = [r for r in recs if not any(p.rsplit("/", 1)[-1] in BASE_READ for p in r["files"])]
    for i in range(0, len(plain), 100):
        calls.append(([r["patch"] for r in plain[i:i + 100]], []))
    for r in recs:
        if r not in plain:
            calls.append(([r["patch"]], ["--repo", gds[r["project"]], "--rev", r["parent"]]))
    for batch, base in calls:
        p = subprocess.run([binary, "screen", *base, *batch], capture_output=True, text=True)
        if p.returncode not in (0, 1):
            sys.exit(f"execcritic screen failed ({p.returncode}): {p.stderr[-2000:]}")
        for line in p.stdout.splitlines():
            if not line.startswith("{"):
                continue
            j = json.loads(line)
            r = by_patch[j["patch"]]
            r.update(result=j["result"], **{k: j.get(k) for k in ("class", "path", "detail")})
    for r in recs:
        if "result" not in r:
            sys.exit(f"no screen result for {r['patch']}")


# The files whose Base text the screen reads (`CONFIG_FILES` in src/harness/tamper.rs).
BASE_READ = {"pyproject.toml", "setup.cfg", "tox.ini", "setup.py"}
CONFIG_FILES = {"pyproject.toml", "setup.cfg", "tox.ini", "setup.py", "pytest.ini", ".pytest.ini"}
HEADER_RE = re.compile(r"^\s*\[+\s*([^\]]*?)\s*\]+")


def true_sections(gd: str, r: dict) -> list[str] | None:
    """For a refused configuration file: the INI/TOML sections its hunks really change, read from
    the parent's copy of the file (a hunk's own context often starts below its section header,
    which the screen cannot see). None when the file is new or not a configuration file."""
    path = r.get("path") or ""
    if path.rsplit("/", 1)[-1] not in CONFIG_FILES:
        return None
    blob = git(gd, "show", f"{r['parent']}:{path}", check=False)
    if blob.returncode != 0:
        return None
    old = blob.stdout.splitlines()
    text = Path(r["patch"]).read_text(errors="replace")
    sec = re.search(rf"(?ms)^diff --git a/{re.escape(path)} .*?(?=^diff --git |\Z)", text)
    found = []
    for h in re.finditer(r"(?ms)^(@@ -(\d+)(?:,\d+)? .*?)(?=^@@ |\Z)", sec.group(0) if sec else ""):
        n = int(h.group(2)) - 1  # 0-based index of the hunk's first old line
        cur = "(none: top of file)"
        for line in old[:max(n, 0)]:
            m = HEADER_RE.match(line)
            if m:
                cur = f"[{m.group(1)}]"
        # headers inside the hunk itself, old side
        for line in h.group(1).splitlines()[1:]:
            m = HEADER_RE.match(line[1:]) if line[:1] in " -+" else None
            if m:
                cur = f"[{m.group(1)}]"
            if line[:1] in "-+" and cur not in found:
                found.append(cur)
    return found


def upper95(k: int, n: int) -> float:
    """One-sided 95% upper bound on a rate: rule of three at k=0, else Clopper-Pearson."""
    if n == 0:
        return float("nan")
    if k == 0:
        return 3 / n
    if k == n:
        return 1.0
    lo, hi = k / n, 1.0
    for _ in range(60):  # bisection: P(X <= k | p) = 0.05
        mid = (lo + hi) / 2
        cdf = sum(math.comb(n, i) * mid**i * (1 - mid) ** (n - i) for i in range(k + 1))
        lo, hi = (mid, hi) if cdf > 0.05 else (lo, mid)
    return hi


def summary(recs: list[dict], per: dict, heads: dict) -> str:
    out = ["| project | mirror HEAD | walked | fix subjects | skipped (no .py / binary / large / "
           "apply) | screened | refused | unparseable | rate |", "|---|---|---|---|---|---|---|---|---|"]
    for proj, st in per.items():
        rs = [r for r in recs if r["project"] == proj]
        ref = sum(r["result"] == "refused" for r in rs)
        unp = sum(r["result"] == "unparseable" for r in rs)
        rate = f"{(ref + unp) / len(rs):.1%}" if rs else "-"
        out.append(f"| {proj} | {heads[proj]} | {st['walked']} | {st['fix_subject']} | "
                   f"{st['no_source_py']} / {st['binary']} / {st['too_large']} / {st['apply_fail']} | "
                   f"{len(rs)} | {ref} | {unp} | {rate} |")
    n = len(recs)
    bad = [r for r in recs if r["result"] != "ok"]
    out.append("")
    out.append(f"Overall: {n} commits over {len(per)} projects, {len(bad)} refused or unparseable "
               f"({len(bad) / n:.2%}); one-sided 95% upper bound {upper95(len(bad), n):.2%}."
               if n else "Overall: nothing screened.")
    out.append("")
    if bad:
        out.append("| project | commit | result | class | path | detail | sections really changed "
                   "(parent file) | rule (tamper.rs) | subject |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for r in bad:
            esc = lambda s: str(s or "").replace("|", "\\|").replace("\n", " ")
            out.append(f"| {r['project']} | {r['commit'][:10]} | {r['result']} | {r.get('class')} | "
                       f"`{esc(r.get('path'))}` | {esc(r.get('detail'))} | "
                       f"{esc(', '.join(r.get('true_sections') or []) or 'n/a')} | "
                       f"{esc(RULES.get(r.get('class') or '', 'diff parser'))} | {esc(r['subject'])} |")
    else:
        out.append("No refusals.")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mirrors", nargs="+", help="bare git dirs (e.g. /work/.mirror/*/repo)")
    ap.add_argument("--n", type=int, default=60, help="fix commits per project")
    ap.add_argument("--bin", default="target/debug/execcritic")
    ap.add_argument("--work", default="/tmp/screen-upstream")
    ap.add_argument("--out", default=None, help="JSON lines (default WORK/results.jsonl)")
    ap.add_argument("--summary", default=None, help="also write the Markdown summary here")
    ap.add_argument("--max-bytes", type=int, default=200_000)
    a = ap.parse_args()
    if not os.access(a.bin, os.X_OK):
        print(f"no executable {a.bin}", file=sys.stderr)
        sys.exit(2)
    work = Path(a.work)
    recs, per, heads = [], {}, {}
    t0 = time.time()
    for gd in a.mirrors:
        proj = project_name(gd)
        heads[proj] = git(gd, "rev-parse", "HEAD").stdout.strip()
        st = dict(walked=0, fix_subject=0, no_source_py=0, binary=0, too_large=0, apply_fail=0)
        t = time.time()
        rs = collect(gd, a.n, a.max_bytes, work / "patches" / proj.replace("/", "+"), st)
        per[proj] = st
        print(f"{proj}: {len(rs)} commits collected in {time.time() - t:.1f}s {st}", file=sys.stderr)
        recs += rs
    gds = {project_name(gd): gd for gd in a.mirrors}
    screen(a.bin, recs, gds)
    for r in recs:
        if r["result"] == "refused":
            r["true_sections"] = true_sections(gds[r["project"]], r)
    out = Path(a.out) if a.out else work / "results.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    s = summary(recs, per, heads)
    if a.summary:
        Path(a.summary).write_text(s)
    print(s)
    print(f"results: {out}; {time.time() - t0:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
