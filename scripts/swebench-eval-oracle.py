#!/usr/bin/env python3
"""Expected eval scripts for tests/task_formats.rs, written by swebench itself.

For every row of a swebench 4.x task file, writes into <outdir>:
  <instance_id>.eval.sh  swebench 4.x's TestSpec.eval_script (make_eval_script_list for the
                         row with the row's MAP_REPO_VERSION_TO_SPECS entry), read from the wheel
  <instance_id>.run.sh   that script as swebench 5.x runs it (parse_eval_script +
                         record_test_exit_code of the installed swebench 5.x)

    pip download swebench==4.1.0 --no-deps -d /tmp/swb4        # 4.x wheel
    pip install swebench==5.0.2                                  # 5.x, installed
    python3 scripts/swebench-eval-oracle.py /tmp/swb4/swebench-4.1.0-py3-none-any.whl \\
        tests/fixtures/task_formats/swebench4.jsonl tests/fixtures/task_formats/expected

The 4.x scripts are made in this process (swebench imported from the wheel, package
__init__ files skipped); the 5.x run forms in a child process with the installed swebench.
"""

import json
import os
import subprocess
import sys
import types

RUN_FORM = """
import importlib.util, json, os, sys, types
root = importlib.util.find_spec("swebench").submodule_search_locations[0]
for name in ("swebench", "swebench.harness"):  # skip the __init__ files (optional deps)
    module = types.ModuleType(name)
    module.__path__ = [os.path.join(root, *name.split(".")[1:])]
    sys.modules[name] = module
from swebench.harness.utils import parse_eval_script, record_test_exit_code
from swebench.types import TestSpec
out = {}
for iid, script in json.load(sys.stdin).items():
    spec = TestSpec(instance_id=iid, image="", repo="", version="", FAIL_TO_PASS=[],
                    PASS_TO_PASS=[],
                    eval_script_list=record_test_exit_code(parse_eval_script(script)))
    out[iid] = spec.eval_script
json.dump(out, sys.stdout)
"""


def import_wheel(wheel):
    sys.path.insert(0, wheel)
    for name in ("swebench", "swebench.harness"):
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(wheel, *name.split("."))]
        sys.modules[name] = module


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: swebench-eval-oracle.py <swebench-4.x wheel> <rows.jsonl> <outdir>")
    wheel, rows_path, outdir = sys.argv[1:]
    env = dict(os.environ)
    import_wheel(wheel)
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
    from swebench.harness.test_spec.create_scripts import make_eval_script_list
    from swebench.harness.test_spec.test_spec import TestSpec

    os.makedirs(outdir, exist_ok=True)
    scripts = {}
    with open(rows_path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for row in rows:
        specs = MAP_REPO_VERSION_TO_SPECS[row["repo"]][row["version"]]
        lines = make_eval_script_list(
            row, specs, "testbed", "/testbed", row["base_commit"], row["test_patch"]
        )
        spec = TestSpec(
            instance_id=row["instance_id"], repo=row["repo"], version=row["version"],
            repo_script_list=[], eval_script_list=lines, env_script_list=[],
            arch="x86_64", FAIL_TO_PASS=[], PASS_TO_PASS=[], language="py",
            docker_specs={}, namespace=None,
        )
        scripts[row["instance_id"]] = spec.eval_script
    run_forms = json.loads(
        subprocess.run(
            [sys.executable, "-c", RUN_FORM], input=json.dumps(scripts), env=env,
            capture_output=True, text=True, check=True, cwd="/",
        ).stdout
    )
    for iid, script in scripts.items():
        with open(os.path.join(outdir, f"{iid}.eval.sh"), "w") as f:
            f.write(script)
        with open(os.path.join(outdir, f"{iid}.run.sh"), "w") as f:
            f.write(run_forms[iid])
        print(iid)


if __name__ == "__main__":
    main()
