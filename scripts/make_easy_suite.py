#!/usr/bin/env python3
"""Generate the `easy` task suite under tests/fixtures/suites/easy/ (committed; rerun to rebuild).

One tiny real Python project (`calc`) with two bug families a small model can learn in minutes:

* `ops`: a helper in calc/ops.py subtracts instead of adding (`return a - b` for `a + b`);
* `limits`: a check in calc/limits.py excludes its limit (`value < limit` for `value <= limit`).

The initial tree holds every bug (so no fixed file version exists before a task's Base); each task
fixes one of them (gold.patch, one line) and adds a real pytest test (test.patch) that fails on the
bug and passes with the fix; the problem statement names the function and the family's symptom. The suite builder (`task::suite::build_suite`) replays
this history into a git repository exactly as for the bundled suite.

    python3 scripts/make_easy_suite.py [OUT_DIR]
"""
import os
import shutil
import subprocess
import sys
import tempfile

OPS = [  # (function, a, b)
    ("add", "a", "b"), ("total", "price", "tax"), ("shift", "pos", "offset"),
    ("grow", "size", "extra"), ("merge_count", "left", "right"),
]
LIMITS = [  # (function, value, limit)
    ("fits", "size", "cap"), ("allowed", "age", "limit"), ("in_budget", "cost", "budget"),
    ("within", "value", "top"), ("under_quota", "used", "quota"),
]
# Task order interleaves the families; the last two (one per family) are the demo's held-back tasks.
ORDER = [("ops", 0), ("limits", 0), ("ops", 1), ("limits", 1), ("ops", 2), ("limits", 2),
         ("ops", 3), ("limits", 3), ("ops", 4), ("limits", 4)]


def ops_source(fixed):
    out = ['"""Small arithmetic helpers."""\n']
    for name, a, b in OPS:
        op = "+" if name in fixed else "-"
        out.append(f'\n\ndef {name}({a}, {b}):\n    """The sum of {a} and {b}."""\n    return {a} {op} {b}\n')
    return "".join(out)


def limits_source(fixed):
    out = ['"""Inclusive limit checks."""\n']
    for name, v, lim in LIMITS:
        op = "<=" if name in fixed else "<"
        out.append(f'\n\ndef {name}({v}, {lim}):\n    """True when {v} is at most {lim} (the limit is allowed)."""\n'
                   f'    return {v} {op} {lim}\n')
    return "".join(out)


def ops_test(names):
    out = ['from calc import ops\n\n\ndef test_imports():\n    assert callable(ops.add)\n']
    for i, (name, _, _) in enumerate(OPS):
        if name in names:
            x, y = 2 + i, 5 + 2 * i
            out.append(f"\n\ndef test_{name}():\n    assert ops.{name}({x}, {y}) == {x + y}\n")
    return "".join(out)


def limits_test(names):
    out = ['from calc import limits\n\n\ndef test_imports():\n    assert callable(limits.fits)\n']
    for i, (name, _, _) in enumerate(LIMITS):
        if name in names:
            n = 3 + i
            out.append(f"\n\ndef test_{name}():\n    assert limits.{name}({n}, {n})\n"
                       f"    assert limits.{name}({n - 1}, {n})\n    assert not limits.{name}({n + 1}, {n})\n")
    return "".join(out)


def problem(family, idx):
    if family == "ops":
        name, a, b = OPS[idx]
        x, y = 2 + idx, 5 + 2 * idx
        return (f"calc.ops.{name} subtracts instead of adding\n\n"
                f"`{name}({x}, {y})` returns {x - y}, but it should return the sum {x + y}.\n")
    name, v, lim = LIMITS[idx]
    n = 3 + idx
    return (f"calc.limits.{name} rejects a value equal to its limit\n\n"
            f"`{name}({n}, {n})` returns False, but the limit is inclusive: it should return True.\n")


def git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def write(root, rel, text):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(text)


def diff(work):
    git(work, "add", "-A")
    d = git(work, "diff", "--cached", "--no-color", "--full-index")
    git(work, "commit", "-q", "-m", "step")
    return d


def toml_list(items):
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "suites", "easy")
    shutil.rmtree(out, ignore_errors=True)
    proj = os.path.join(out, "calc")
    tree = os.path.join(proj, "tree")
    files = {
        "calc/__init__.py": '"""calc: tiny helpers (the easy demo suite)."""\n',
        "calc/ops.py": ops_source(set()),
        "calc/limits.py": limits_source(set()),
        "tests/test_ops.py": ops_test(set()),
        "tests/test_limits.py": limits_test(set()),
        "pyproject.toml": '[project]\nname = "calc"\nversion = "1.0.0"\nrequires-python = ">=3.8"\n',
        "README.md": "# calc\n\nTiny arithmetic and limit helpers.\n",
    }
    for rel, text in files.items():
        write(tree, rel, text)
    write(out, "suite.toml", 'name = "easy"\nprojects = ["calc"]\n')
    ids = [f"calc__calc-{i + 1}" for i in range(len(ORDER))]
    write(proj, "project.toml",
          'repo = "execcritic-suite/calc"\nversion = "1.0"\nrunner = "pytest"\n'
          'test_cmd = "python3 -m pytest -rA"\nimage = "execcritic-suite:latest"\n'
          'start_date = 1720000000\ninitial_message = "calc 1.0.0"\n'
          f"tasks = {toml_list(ids)}\n")
    with tempfile.TemporaryDirectory() as work:
        shutil.copytree(tree, work, dirs_exist_ok=True)
        git(work, "init", "-q")
        git(work, "-c", "user.name=g", "-c", "user.email=g@g", "commit", "-q", "--allow-empty", "-m", "x")
        os.environ.update(GIT_AUTHOR_NAME="g", GIT_AUTHOR_EMAIL="g@g", GIT_COMMITTER_NAME="g",
                          GIT_COMMITTER_EMAIL="g@g")
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", "initial")
        tested = {"ops": set(), "limits": set()}
        for tid, (family, idx) in zip(ids, ORDER):
            name = (OPS if family == "ops" else LIMITS)[idx][0]
            src_rel = f"calc/{family}.py"
            make = ops_source if family == "ops" else limits_source
            tested[family].add(name)
            write(work, src_rel, make(tested[family]))
            gold = diff(work)
            write(work, f"tests/test_{family}.py", (ops_test if family == "ops" else limits_test)(tested[family]))
            test = diff(work)
            tdir = os.path.join(proj, "tasks", tid)
            write(tdir, "gold.patch", gold)
            write(tdir, "test.patch", test)
            write(tdir, "task.toml",
                  f'created_at = "2024-07-{10 + ids.index(tid):02d}T10:00:00Z"\n'
                  f'fix_message = "Fix {family}.{name} ({tid})"\n'
                  f'problem_statement = """\n{problem(family, idx)}"""\n'
                  f'FAIL_TO_PASS = ["tests/test_{family}.py::test_{name}"]\n'
                  f'PASS_TO_PASS = ["tests/test_{family}.py::test_imports"]\n')


if __name__ == "__main__":
    main()
