#!/usr/bin/env python3
"""Differential oracle: SWE-bench's own answers for execcritic's official-grading tests.

Reads a JSON list of cases from the file named by argv[1] (or stdin) and writes to stdout a JSON
list, one result per case, in order. A case:

    {"id": str, "parser": str, "log": str,
     "fail_to_pass": [str], "pass_to_pass": [str], "eval_type": "pass_and_fail"|"fail_only",
     "model_patch": str|null (optional, default "diff"),
     "version": str (optional, default "")}

The parser reads a TestSpec whose `instance_id` is the case's id and whose `version` is the
case's (four JavaScript and Ruby parsers choose a format by them).

(or "log_file": a path relative to the cases file instead of "log").

A result:

    {"id": str,
     "parse": {"map": [[test, status], ...]} | {"raised": ExceptionName},
     "tests_report": {...} | null, "resolution": str | null,
     "report_json": str | {"raised": ExceptionName},
     "classification": [reason, tier] | null}

- `parse` is PARSER_REGISTRY[parser](log) on the raw log, as an ordered list of pairs;
- `tests_report`/`resolution` are get_eval_tests_report/get_resolution_status on that map;
- `report_json` is json.dumps(get_eval_report(...), indent=4) with the log written to a file
  byte for byte (swebench reads it back in text mode, so CR/CRLF become LF);
- `classification` is infra_failure.classify_text(log).

With `--run-summary SPEC.json` it instead writes {"summary": text}: the run summary
make_run_report writes for the synthetic run SPEC describes (see run_summary below).

Requires swebench==5.0.2 (see scripts/ci-deps-swebench.sh); exits 3 when it is missing.
"""
import json
import os
import sys
import tempfile
import types


def _load_harness_without_its_init():
    """`swebench/harness/__init__.py` imports the Modal and Docker runners, whose dependencies a
    `--no-deps` install lacks; grading needs none of them, so load the package's modules alone."""
    import swebench

    harness = types.ModuleType("swebench.harness")
    harness.__path__ = [os.path.join(os.path.dirname(swebench.__file__), "harness")]
    sys.modules["swebench.harness"] = harness


try:
    import swebench

    try:
        import swebench.harness  # noqa: F401
    except ImportError:
        _load_harness_without_its_init()
    from swebench.harness import grading
    from swebench.harness.constants import EvalType
    from swebench.harness.infra_failure import classify_text
    from swebench.harness.log_parsers import PARSER_REGISTRY
except Exception as exc:  # pragma: no cover - environment check
    print(f"swebench-oracle: swebench not importable: {exc}", file=sys.stderr)
    sys.exit(3)

if getattr(swebench, "__version__", None) != "5.0.2":
    print(f"swebench-oracle: need swebench 5.0.2, found {swebench.__version__}", file=sys.stderr)
    sys.exit(3)


def raised(exc):
    return {"raised": type(exc).__name__}


def test_spec(case):
    return types.SimpleNamespace(instance_id=case["id"], version=case.get("version", ""))


def run_case(case, workdir):
    parser = PARSER_REGISTRY[case["parser"]]
    result = {"id": case["id"], "tests_report": None, "resolution": None}
    gold = {
        "FAIL_TO_PASS": case["fail_to_pass"],
        "PASS_TO_PASS": case["pass_to_pass"],
    }
    eval_type = EvalType(case["eval_type"])
    try:
        status_map = parser(case["log"], test_spec(case))
        result["parse"] = {"map": [[k, v] for k, v in status_map.items()]}
        report = grading.get_eval_tests_report(status_map, gold, eval_type=eval_type)
        result["tests_report"] = report
        result["resolution"] = grading.get_resolution_status(report)
    except Exception as exc:
        result["parse"] = raised(exc)

    log_path = os.path.join(workdir, "test_output.txt")
    with open(log_path, "w", encoding="utf-8", newline="") as f:
        f.write(case["log"])
    spec = types.SimpleNamespace(
        instance_id=case["id"],
        version=case.get("version", ""),
        log_parser=case["parser"],
        FAIL_TO_PASS=case["fail_to_pass"],
        PASS_TO_PASS=case["pass_to_pass"],
        eval_type=case["eval_type"],
    )
    prediction = {"instance_id": case["id"], "model_patch": case.get("model_patch", "diff")}
    try:
        report = grading.get_eval_report(spec, prediction, log_path, include_tests_status=True)
        result["report_json"] = json.dumps(report, indent=4)
    except Exception as exc:
        result["report_json"] = raised(exc)
    result["classification"] = classify_text(case["log"])
    return result


def run_summary(spec):
    """make_run_report (no docker client) over a synthetic run directory:
    {"dataset": [id], "predictions": {id: patch|null}, "reports": {id: report.json text},
     "test_outputs": {id: test_output.txt text}}; returns the summary file's text."""
    from swebench.harness import reporting
    from swebench.harness.constants import RUN_EVALUATION_LOG_DIR

    model = "org/model"
    predictions = {
        iid: {"instance_id": iid, "model_patch": patch, "model_name_or_path": model}
        for iid, patch in spec["predictions"].items()
    }
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as workdir:
        os.chdir(workdir)
        try:
            for kind, name in (("reports", "report.json"), ("test_outputs", "test_output.txt")):
                for iid, text in spec.get(kind, {}).items():
                    d = RUN_EVALUATION_LOG_DIR / "run" / model.replace("/", "__") / iid
                    d.mkdir(parents=True, exist_ok=True)
                    (d / name).write_text(text)
            dataset = [{"instance_id": iid} for iid in spec["dataset"]]
            path = reporting.make_run_report(predictions, dataset, "run", None, workdir)
            with open(path) as f:
                return f.read()
        finally:
            os.chdir(cwd)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--run-summary":
        with open(sys.argv[2], encoding="utf-8") as f:
            spec = json.load(f)
        import contextlib
        with contextlib.redirect_stdout(sys.stderr):
            text = run_summary(spec)
        json.dump({"summary": text}, sys.stdout)
        return
    source = open(sys.argv[1], encoding="utf-8") if len(sys.argv) > 1 else sys.stdin
    cases = json.load(source)
    base = os.path.dirname(os.path.abspath(sys.argv[1])) if len(sys.argv) > 1 else "."
    for case in cases:
        if "log_file" in case:
            with open(os.path.join(base, case["log_file"]), encoding="utf-8", newline="") as f:
                case["log"] = f.read()
    import contextlib
    # swebench's parsers may print (maven and gradle warn, parse_log_next_v2 prints every
    # failure): stdout carries the answers alone.
    with tempfile.TemporaryDirectory() as workdir, contextlib.redirect_stdout(sys.stderr):
        results = [run_case(case, workdir) for case in cases]
    json.dump(results, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
