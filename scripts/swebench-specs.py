#!/usr/bin/env python3
"""Generate data/swebench-specs.json: the per-repository/version facts of swebench 4.x.

swebench 4.x rows carry only `repo` + `version`; the test command, eval commands, install
command and log parser live in the package's code (harness/constants/<language>.py
MAP_REPO_VERSION_TO_SPECS, harness/log_parsers MAP_REPO_TO_PARSER) — SWE-bench's Python
repositories and SWE-bench Multilingual's C/C++, Go, Java, JavaScript/TypeScript, PHP, Ruby
and Rust ones. This script reads
them from the published wheel (no network, no install) and writes one JSON table that the
crate embeds (`src/task/official/specs.rs`).

    pip download swebench==4.1.0 --no-deps -d /tmp/swb4
    python3 scripts/swebench-specs.py /tmp/swb4/swebench-4.1.0-py3-none-any.whl > data/swebench-specs.json

Every repository is written with its extension (MAP_REPO_TO_EXT): a Python repository's eval
script is `make_eval_script_list_py`, a JavaScript one's `make_eval_script_list_js`, any other's
`make_eval_script_list_common`; the crate reproduces all three.
"""

import hashlib
import json
import os
import sys
import types


def import_wheel(wheel):
    # Import swebench's submodules straight from the wheel, skipping the package
    # __init__ files (they import optional dependencies: bs4, modal, docker...).
    sys.path.insert(0, wheel)
    for name in ("swebench", "swebench.harness"):
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(wheel, *name.split("."))]
        sys.modules[name] = module


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: swebench-specs.py <swebench-4.x wheel>")
    wheel = sys.argv[1]
    import_wheel(wheel)
    from swebench.harness.constants import (
        END_TEST_OUTPUT,
        FAIL_ONLY_REPOS,
        MAP_REPO_TO_EXT,
        NON_TEST_EXTS,
        START_TEST_OUTPUT,
    )
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

    with open(wheel, "rb") as f:
        sha256 = hashlib.sha256(f.read()).hexdigest()
    base = os.path.basename(wheel)
    version = base.split("-")[1]
    repos = {}
    for repo in sorted(MAP_REPO_VERSION_TO_SPECS):
        ext = MAP_REPO_TO_EXT.get(repo)
        if ext is None:
            continue
        versions = {}
        for ver in sorted(MAP_REPO_VERSION_TO_SPECS[repo]):
            specs = MAP_REPO_VERSION_TO_SPECS[repo][ver]
            if ext == "py":
                # null = the key is absent (make_eval_script_list_py tests `"install" in specs`).
                versions[ver] = {
                    "test_cmd": specs.get("test_cmd"),
                    "eval_commands": specs.get("eval_commands", []),
                    "pre_install": specs.get("pre_install", []),
                    "install": specs.get("install"),
                    "python": specs.get("python"),
                }
            else:
                # make_eval_script_list_common: `get_test_cmds` (a string is one command) and
                # the `build` commands.
                test_cmd = specs.get("test_cmd")
                versions[ver] = {
                    "test_cmd": None,
                    "test_cmds": [test_cmd] if isinstance(test_cmd, str) else list(test_cmd or []),
                    "build": specs.get("build", []),
                    "eval_commands": [],
                    "pre_install": specs.get("pre_install", []),
                    "install": None,
                    "python": None,
                }
        parser = MAP_REPO_TO_PARSER.get(repo)
        repos[repo] = {
            "ext": ext,
            "parser": parser.__name__ if parser else None,
            "eval_type": "fail_only" if repo in FAIL_ONLY_REPOS else "pass_and_fail",
            "versions": versions,
        }
    out = {
        "source": {
            "package": "swebench",
            "version": version,
            "wheel": base,
            "wheel_sha256": sha256,
            "files": [
                "swebench/harness/constants/*.py (MAP_REPO_VERSION_TO_SPECS, MAP_REPO_TO_EXT)",
                "swebench/harness/log_parsers/__init__.py (MAP_REPO_TO_PARSER)",
                "swebench/harness/constants/__init__.py (NON_TEST_EXTS, FAIL_ONLY_REPOS, markers)",
            ],
            "generated_by": "python3 scripts/swebench-specs.py " + base
            + " > data/swebench-specs.json",
        },
        "start_test_output": START_TEST_OUTPUT,
        "end_test_output": END_TEST_OUTPUT,
        "non_test_exts": NON_TEST_EXTS,
        "repos": repos,
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=False, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
