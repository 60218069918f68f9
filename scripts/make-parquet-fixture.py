#!/usr/bin/env python3
"""Write tests/fixtures/tasks/swebench-sample.{jsonl,parquet}: two records in the Hugging Face
SWE-bench dataset's column layout (FAIL_TO_PASS / PASS_TO_PASS as JSON-encoded strings,
snappy-compressed, like the dataset's own Parquet files). Needs pyarrow."""
import json, pathlib
import pyarrow as pa, pyarrow.parquet as pq

out = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "tasks"
rows = []
for k in (1, 2):
    rows.append({
        "repo": "octo/widgets",
        "instance_id": f"octo__widgets-{k}",
        "base_commit": f"{k:040x}",
        "patch": f"diff --git a/w.py b/w.py\n--- a/w.py\n+++ b/w.py\n@@ -1 +1 @@\n-x = {k}\n+x = {k + 1}\n",
        "test_patch": "diff --git a/test_w.py b/test_w.py\n--- a/test_w.py\n+++ b/test_w.py\n@@ -1 +1,2 @@\n import w\n+def test_x(): assert w.x\n",
        "problem_statement": f"Widget {k} is off by one.\nIt should be {k + 1}.",
        "hints_text": "",
        "created_at": "2024-01-0%dT00:00:00Z" % k,
        "version": "1.0",
        "FAIL_TO_PASS": json.dumps(["test_w.py::test_x"]),
        "PASS_TO_PASS": json.dumps([] if k == 1 else ["test_w.py::test_y"]),
        "environment_setup_commit": f"{k:040x}",
        "difficulty": "<15 min fix",
    })
out.mkdir(parents=True, exist_ok=True)
(out / "swebench-sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
pq.write_table(pa.Table.from_pylist(rows), out / "swebench-sample.parquet", compression="snappy")
