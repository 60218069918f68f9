#!/usr/bin/env python3
"""SWE-bench-layout images of real public projects, and their swebench 5.x rows.

For each project below: the release sdist from PyPI or tarball from npm (sha256 pinned) is the
repository at Base
(one root commit in `/testbed`); the fix is real — a fix between two consecutive releases
(Django 4.2.16 → 4.2.17: `strip_tags`; sympy 1.13.2 → 1.13.3: Wigner/Clebsch-Gordan) or, for
inflection, the PyPI suite's task 101 — split as SWE-bench splits it: the source files are the
gold patch, the test files the test patch. The image holds the repository and a conda-style
`activate` whose `testbed` env is the only place the project and its dependencies are importable
(as after `pip install -e .`; Django:
asgiref, sqlparse; sympy: mpmath, numpy), so a command outside the env has the wrong interpreter.

One JavaScript project, as SWE-bench Multilingual's JavaScript rows are: qs 6.14.0 with the fix of
6.14.1 (`arrayLimit` on `[]` notation, a decoder returning `null` for a key), its tests run by
tape (TAP output, `parse_log_tap`). Its image has no conda env: Node.js (the host's `node`, a
single binary needing only glibc and libstdc++) and the test dependencies installed by `npm ci`
from `data/official-real-qs/package-lock.json` at `/node_modules`, outside the repository.

The row's eval script is swebench's shape (conda activation, test files reset to Base, test
patch applied, the test command between the markers: Django's `tests/runtests.py --verbosity 2
--settings=test_sqlite --parallel 1 <module>`, sympy's `bin/test --verbose <file>` (the
repository's script, which the sdist lacks, written at Base; SWE-bench's `-C` left out for time), `pytest -rA`), and its
FAIL_TO_PASS / PASS_TO_PASS are found as SWE-bench's validation finds them: the eval script run on
Base and on gold, read by swebench's own parser — failing then passing, passing both times.

Writes `$EXECCRITIC_CACHE/official-real/tasks.jsonl` (default cache ~/.cache/execcritic) and
builds the images `execcritic-real-<project>:latest`. Needs docker, the image
`execcritic-pytest:latest` (scripts/ci-deps-harness.sh), network to PyPI the first time, and
swebench 5.0.2 (scripts/ci-deps-swebench.sh). Idempotent: a verified download is kept.

    python3 scripts/official-real-images.py
"""

import hashlib
import time
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("EXECCRITIC_CACHE", Path.home() / ".cache/execcritic")) / "official-real"
BASE_IMAGE = os.environ.get("EXECCRITIC_DOCKER_IMAGE", "execcritic-pytest:latest")

# file: (distribution, version, kind); sha256 pinned in data/official-real.lock.json
DOWNLOADS = {
    "Django-4.2.16.tar.gz": ("Django", "4.2.16", "sdist"),
    "Django-4.2.17.tar.gz": ("Django", "4.2.17", "sdist"),
    "sympy-1.13.2.tar.gz": ("sympy", "1.13.2", "sdist"),
    "sympy-1.13.3.tar.gz": ("sympy", "1.13.3", "sdist"),
    "inflection-0.5.1.tar.gz": ("inflection", "0.5.1", "sdist"),
    "asgiref-3.8.1-py3-none-any.whl": ("asgiref", "3.8.1", "wheel"),
    "sqlparse-0.5.3-py3-none-any.whl": ("sqlparse", "0.5.3", "wheel"),
    "mpmath-1.3.0-py3-none-any.whl": ("mpmath", "1.3.0", "wheel"),
    # The image's interpreter is CPython 3.11 on x86-64.
    "numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl": ("numpy", "1.26.4", "wheel"),
    "qs-6.14.0.tgz": ("qs", "6.14.0", "npm"),
    "qs-6.14.1.tgz": ("qs", "6.14.1", "npm"),
}
SHA256 = json.loads((ROOT / "data/official-real.lock.json").read_text())

PROJECTS = [
    {
        "id": "django__django-4217",
        "repo": "django/django",
        "image": "execcritic-real-django:latest",
        "base": "Django-4.2.16.tar.gz",
        "fixed": "Django-4.2.17.tar.gz",
        "source": ["django/utils/html.py"],
        "tests": ["tests/utils_tests/test_html.py"],
        "wheels": ["asgiref-3.8.1-py3-none-any.whl", "sqlparse-0.5.3-py3-none-any.whl"],
        "test_cmd": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 utils_tests.test_html",
        "parser": "parse_log_django",
        "problem": "strip_tags() is quadratic on inputs with many unbalanced '<' (CVE-2024-53907)",
    },
    {
        "id": "sympy__sympy-1133",
        "repo": "sympy/sympy",
        "image": "execcritic-real-sympy:latest",
        "base": "sympy-1.13.2.tar.gz",
        "fixed": "sympy-1.13.3.tar.gz",
        "source": ["sympy/physics/wigner.py"],
        "tests": ["sympy/physics/tests/test_clebsch_gordan.py"],
        "wheels": ["mpmath-1.3.0-py3-none-any.whl", "numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"],
        # bin/test is in sympy's repository, not in the sdist: SYMPY_BIN_TEST stands in for it,
        # so the command is SWE-bench's sympy command — less its `-C` (cache off), which makes
        # these tests take 215 s instead of seconds (measured, 2 cores).
        "files": {"bin/test": "SYMPY_BIN_TEST"},
        "test_cmd": "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test --verbose sympy/physics/tests/test_clebsch_gordan.py",
        "parser": "parse_log_sympy",
        "problem": "wigner_3j and clebsch_gordan give wrong results for some arguments",
    },
    {
        "id": "jpvanhal__inflection-101",
        "repo": "jpvanhal/inflection",
        "image": "execcritic-real-inflection:latest",
        "base": "inflection-0.5.1.tar.gz",
        "suite_task": "tests/fixtures/suites/pypi/inflection/tasks/jpvanhal__inflection-101",
        "wheels": [],
        "test_cmd": "pytest -rA test_inflection.py",
        "parser": "parse_log_pytest",
        "problem": "humanize() removes _id from the middle of words",
    },
    {
        "id": "ljharb__qs-6141",
        "repo": "ljharb/qs",
        "image": "execcritic-real-qs:latest",
        "base": "qs-6.14.0.tgz",
        "fixed": "qs-6.14.1.tgz",
        "source": ["lib/parse.js", "lib/utils.js"],
        "tests": ["test/parse.js", "test/stringify.js", "test/utils.js"],
        "wheels": [],
        "node_modules": "data/official-real-qs",
        "test_cmd": "node /node_modules/tape/bin/tape test/parse.js",
        "parser": "parse_log_tap",
        "problem": "qs.parse ignores arrayLimit for `a[]=` keys, and keeps a key a custom decoder turned into null",
    },
]

# sympy's `bin/test` as its repository has it, reduced to what SWE-bench's sympy command uses
# (`-C`: no cache; `--verbose`; paths): sympy's own runner, its result as the exit status.
SYMPY_BIN_TEST = """#!/usr/bin/env python
\"\"\"Run sympy's own test runner on the given paths (bin/test [-C] [--verbose] PATH...).\"\"\"
import os
import sys

args = sys.argv[1:]
if "-C" in args or "--no-cache" in args:
    os.environ["SYMPY_USE_CACHE"] = "no"
from sympy.testing.runtests import test

paths = [a for a in args if not a.startswith("-")]
sys.exit(not test(*paths, verbose="--verbose" in args or "-v" in args, colors=False))
"""

NODE_DOCKERFILE = """FROM {base}
COPY testbed /testbed
COPY node_modules /node_modules
COPY node /usr/local/bin/node
WORKDIR /testbed
"""

ACTIVATE = """conda() {
  if [ "$1" = activate ] && [ -d "/opt/miniconda3/envs/$2" ]; then
    export CONDA_DEFAULT_ENV="$2" PATH="/opt/miniconda3/envs/$2/bin:$PATH" PYTHONPATH="/opt/miniconda3/envs/$2/site:/testbed"
  else
    echo "conda: no environment $2" >&2; return 1
  fi
}
"""

DOCKERFILE = """FROM {base}
COPY testbed /testbed
COPY site /opt/miniconda3/envs/testbed/site
COPY activate /opt/miniconda3/bin/activate
RUN mkdir -p /opt/miniconda3/envs/testbed/bin \\
 && ln -s "$(command -v python3)" /opt/miniconda3/envs/testbed/bin/python \\
 && printf '#!/bin/sh\\nexec /opt/miniconda3/envs/testbed/bin/python -m pytest "$@"\\n' > /opt/miniconda3/envs/testbed/bin/pytest \\
 && chmod +x /opt/miniconda3/envs/testbed/bin/pytest
WORKDIR /testbed
"""


def sh(*args, cwd=None, check=True, capture=False, input=None):
    return subprocess.run(args, cwd=cwd, check=check, text=True, input=input,
                          stdout=subprocess.PIPE if capture else None,
                          stderr=subprocess.STDOUT if capture else None)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(name: str) -> Path:
    dist, version, kind = DOWNLOADS[name]
    path = CACHE / "downloads" / name
    want = SHA256.get(name)
    if want is None:
        sys.exit(f"official-real-images: {name} has no sha256 in data/official-real.lock.json")
    if path.exists() and sha256(path) == want:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "npm":
            sh("npm", "pack", "-q", f"{dist}@{version}", cwd=tmp, capture=True)
        else:
            flags = ["--no-binary", ":all:"] if kind == "sdist" else [
                "--only-binary", ":all:", "--python-version", "3.11", "--platform", "manylinux2014_x86_64"]
            sh(sys.executable, "-m", "pip", "download", "-q", "--no-deps", *flags, "-d", tmp, f"{dist}=={version}")
        got = Path(tmp) / name
        if sha256(got) != want:
            sys.exit(f"official-real-images: {name} has sha256 {sha256(got)}, expected {want}")
        shutil.move(str(got), path)
    return path


def unpack(sdist: Path, dest: Path):
    with tarfile.open(sdist) as t:
        top = t.getnames()[0].split("/")[0]
        t.extractall(dest.parent / "unpack", filter="data")
    shutil.move(str(dest.parent / "unpack" / top), dest)
    shutil.rmtree(dest.parent / "unpack")


def git(repo: Path, *args, capture=False):
    env = ["-c", "user.name=execcritic", "-c", "user.email=execcritic@localhost", "-c", "core.autocrlf=false",
           "-c", "gc.auto=0", "-c", "maintenance.auto=false"]
    return sh("git", *env, *args, cwd=repo, capture=capture)


def diff(repo: Path, paths):
    return git(repo, "diff", "--no-color", "HEAD", "--", *paths, capture=True).stdout


def eval_script(p, base_commit, test_files, test_patch):
    files = " ".join(test_files)
    activate = "" if "node_modules" in p else "source /opt/miniconda3/bin/activate\nconda activate testbed\n"
    return (
        f"#!/bin/bash\nset -uxo pipefail\n{activate}cd /testbed\n"
        f"git checkout {base_commit} {files}\n"
        f"git apply -v - <<'EOF_114329324912'\n{test_patch}\nEOF_114329324912\n"
        f": '>>>>> Start Test Output'\n{p['test_cmd']}\n: '>>>>> End Test Output'\n"
        f"git checkout {base_commit} {files}\n"
    )


def run_eval(image, script, patch):
    """The eval script in a container of `image` after `patch`, as swebench 5.x runs it."""
    body = script.replace("#!/bin/bash\n", "", 1)
    run = (
        "set -e\ncd /testbed\n"
        + (f"git apply - <<'EOF_PATCH'\n{patch}\nEOF_PATCH\n" if patch.strip() else "")
        + "set +e\ncat > /tmp/eval.sh <<'EOF_EVAL'\n#!/bin/bash\n" + body
        + "EOF_EVAL\nbash /tmp/eval.sh\nSWEBENCH_TEST_EXIT_CODE=$?\n"
        + "echo \">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE\"\n"
    )
    out = sh("docker", "run", "--rm", "--network", "none", image, "bash", "-c", run, check=False, capture=True)
    return out.stdout


T0 = time.time()


def log(msg):
    print(f"official-real-images: [{time.time() - T0:5.0f} s] {msg}", file=sys.stderr)


def main():
    spec = __import__("importlib.util").util.spec_from_file_location("oracle", ROOT / "scripts/swebench-oracle.py")
    oracle = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(oracle)
    registry = oracle.PARSER_REGISTRY
    rows = []
    for p in PROJECTS:
        with tempfile.TemporaryDirectory(prefix="official-real") as tmp:
            tmp = Path(tmp)
            repo = tmp / "testbed"
            unpack(fetch(p["base"]), repo)
            if "suite_task" in p:
                task = ROOT / p["suite_task"]
                git(repo.parent, "init", "-q", str(repo))
                sh("patch", "-s", "-p1", "-i", str(task / "bug.patch"), cwd=repo)
            else:
                git(repo.parent, "init", "-q", str(repo))
            for path, const in p.get("files", {}).items():
                (repo / path).parent.mkdir(parents=True, exist_ok=True)
                (repo / path).write_text(globals()[const])
                (repo / path).chmod(0o755)
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "-m", f"{p['repo']} at Base")
            base = git(repo, "rev-parse", "HEAD", capture=True).stdout.strip()
            if "suite_task" in p:
                gold = (task / "gold.patch").read_text()
                test_patch = (task / "test.patch").read_text()
                test_files = sorted({l[6:] for l in test_patch.splitlines() if l.startswith("+++ b/")})
            else:
                fixed = tmp / "fixed"
                unpack(fetch(p["fixed"]), fixed)
                for f in p["source"] + p["tests"]:
                    shutil.copy(fixed / f, repo / f)
                gold = diff(repo, p["source"])
                test_patch = diff(repo, p["tests"])
                git(repo, "checkout", "-q", "--", ".")
                test_files = p["tests"]
            if "node_modules" in p:
                deps = tmp / "deps"
                shutil.copytree(ROOT / p["node_modules"], deps)
                sh("npm", "ci", "-q", "--ignore-scripts", "--no-audit", "--no-fund", cwd=deps, capture=True)
                shutil.move(str(deps / "node_modules"), tmp / "node_modules")
                shutil.copy(os.path.realpath(shutil.which("node")), tmp / "node")
                (tmp / "Dockerfile").write_text(NODE_DOCKERFILE.format(base=BASE_IMAGE))
            else:
                site = tmp / "site"
                site.mkdir()
                for w in p["wheels"]:
                    zipfile.ZipFile(fetch(w)).extractall(site)
                (tmp / "activate").write_text(ACTIVATE)
                (tmp / "Dockerfile").write_text(DOCKERFILE.format(base=BASE_IMAGE))
            log(f"{p['id']}: building {p['image']}")
            sh("docker", "build", "-q", "--network", "none", "-t", p["image"], str(tmp), capture=True)
            log(f"{p['id']}: built")
        script = eval_script(p, base, test_files, test_patch)
        parse = registry[p["parser"]]
        logs = {}
        for name, patch in [("base", ""), ("gold", gold)]:
            logs[name] = run_eval(p["image"], script, patch)
            (CACHE / "logs").mkdir(parents=True, exist_ok=True)
            (CACHE / "logs" / f"{p['id']}-{name}.txt").write_text(logs[name])
        on_base = parse(logs["base"], None)
        on_gold = parse(logs["gold"], None)
        f2p = sorted(t for t, s in on_gold.items() if s == "PASSED" and on_base.get(t) in ("FAILED", "ERROR", None))
        p2p = sorted(t for t, s in on_gold.items() if s == "PASSED" and on_base.get(t) == "PASSED")
        if not f2p or not p2p:
            sys.exit(f"official-real-images: {p['id']}: FAIL_TO_PASS {f2p}, PASS_TO_PASS {len(p2p)} tests")
        rows.append({
            "repo": p["repo"], "instance_id": p["id"], "base_commit": base,
            "patch": gold, "test_patch": test_patch, "problem_statement": p["problem"],
            "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p,
            "image": p["image"], "eval_script": script,
            "log_parser": p["parser"], "eval_type": "pass_and_fail",
        })
        log(f"{p['id']}: {len(f2p)} FAIL_TO_PASS, {len(p2p)} PASS_TO_PASS")
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(CACHE / "tasks.jsonl")


if __name__ == "__main__":
    main()
