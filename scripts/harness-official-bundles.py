#!/usr/bin/env python3
"""Write each task's official tests as a Test bundle (DIR/<instance_id>/{test.patch,test_command,
test_contract.json}) and a gold predictions file, for trying `execcritic audit` / `grade`:

    python3 scripts/harness-official-bundles.py TASKS.jsonl OUT_DIR
    execcritic audit --tasks TASKS.jsonl --bundles OUT_DIR/bundles --out OUT_DIR/audit
    execcritic grade --tasks TASKS.jsonl --predictions OUT_DIR/gold.jsonl --out OUT_DIR/grade
"""
import json, os, re, shlex, sys

def tests_list(v):
    return json.loads(v) if isinstance(v, str) else v

def label(n):  # Django "test_x (mod.Class)" -> "mod.Class.test_x"
    m = re.match(r"^(\w+) \(([\w.]+)\)$", n.strip())
    if not m:
        return n
    name, inner = m.groups()
    return inner if inner.endswith("." + name) else f"{inner}.{name}"

def main(tasks_path, out):
    tasks = [json.loads(l) for l in open(tasks_path) if l.strip()]
    os.makedirs(os.path.join(out, "bundles"), exist_ok=True)
    with open(os.path.join(out, "gold.jsonl"), "w") as gold:
        for t in tasks:
            added = set(re.findall(r"^\+\s*(?:async\s+)?def\s+(test\w*)\s*\(", t["test_patch"], re.M))
            func = lambda n: re.split(r"[.:]", label(n))[-1].split("[")[0]
            nodes = tests_list(t["FAIL_TO_PASS"]) + [n for n in tests_list(t["PASS_TO_PASS"]) if func(n) in added]
            runner = t.get("runner", "pytest")
            if runner == "django":
                nodes = [label(n) for n in nodes]
                cmd = "python3 tests/runtests.py --verbosity 2 " + " ".join(shlex.quote(n) for n in nodes)
            else:
                cmd = "python3 -m pytest " + " ".join(shlex.quote(n) for n in nodes)
            d = os.path.join(out, "bundles", t["instance_id"])
            os.makedirs(d, exist_ok=True)
            open(os.path.join(d, "test.patch"), "w").write(t["test_patch"])
            open(os.path.join(d, "test_command"), "w").write(cmd + "\n")
            contract = {"entrypoint": "official tests", "trigger": "see issue", "expected_output": "tests pass",
                        "issue_evidence": [t["problem_statement"].splitlines()[0]], "alternative_hypotheses": ["none"],
                        "non_assertions": ["none"], "test_nodes": nodes}
            json.dump(contract, open(os.path.join(d, "test_contract.json"), "w"), indent=1)
            gold.write(json.dumps({"instance_id": t["instance_id"], "model_name_or_path": "gold", "model_patch": t["patch"]}) + "\n")

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
