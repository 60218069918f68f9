#!/usr/bin/env python3
"""Real `test_output.txt` logs for every parser of swebench 5.0.2's registry.

Each log is what a SWE-bench eval script prints when it runs the real runner of that parser's
repositories: a bash script (`set -uxo pipefail`, SWE-bench's markers, swebench 5.x's exit-code
record) whose test command is pytest (`-rA`, and the variants the specs use: astropy's
`-vv -o console_output_style=classic --tb=no`, seaborn's `--no-header`, colour), Django's own
test runner at verbosity 2, sympy's own runner (`SymPyTests`, verbose, as `bin/test -C
--verbose`), `cargo test` and `go test -v` — each on a small project whose tests pass, fail,
error, skip and xfail, with parametrised ids that hold spaces, brackets, slashes and `::`.

Writes `logs/real/<runner>.txt` under the fixture directory and appends one case per registry
name to `cases.json` (replacing earlier `real__*` cases); FAIL_TO_PASS/PASS_TO_PASS are the
failing and passing ids swebench itself reads from the log. Afterwards regenerate
`expected.json` with scripts/swebench-oracle.py (see the fixture README).

Needs: pytest, sympy, swebench 5.0.2 (scripts/ci-deps-swebench.sh), cargo, go, and Django
(`pip download django asgiref sqlparse` then `--django-wheels DIR`, or an importable django).

    python3 scripts/make-real-logs.py [--django-wheels DIR]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent.parent / "tests/fixtures/swebench_official"

PYTEST_MODULE = '''import pytest


def test_ok():
    assert 1 + 1 == 2


def test_fails():
    assert 1 + 1 == 3


@pytest.fixture
def broken():
    raise RuntimeError("fixture breaks")


def test_errors(broken):
    pass


@pytest.mark.skip(reason="not here")
def test_skipped():
    pass


@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False


@pytest.mark.parametrize("arg", ["simple", "a b - c::d", "x/y.py", "[1]", "t::u v"])
def test_param(arg):
    assert "-" not in arg


class TestGroup:
    @pytest.mark.parametrize("n", [1, 2])
    def test_nested(self, n):
        assert n == 1
'''

DJANGO_TESTS = '''from django.test import SimpleTestCase


class CalcTests(SimpleTestCase):
    def test_ok(self):
        self.assertEqual(1 + 1, 2)

    def test_fails(self):
        self.assertEqual(1 + 1, 3)

    def test_errors(self):
        raise ValueError("boom")

    def test_skipped(self):
        self.skipTest("not here")

    def test_docstring(self):
        """A test with a docstring
        on two lines."""
        self.assertTrue(True)

    def test_subtests(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertLess(i, 2)
'''

DJANGO_RUNNER = '''import sys
import django
from django.conf import settings
settings.configure(INSTALLED_APPS=[], DATABASES={})
django.setup()
from django.test.utils import get_runner
runner = get_runner(settings)(verbosity=2, parallel=1)
sys.exit(bool(runner.run_tests(["tests.test_calc"])))
'''

SYMPY_MODULE = '''def test_ok():
    assert 1 + 1 == 2


def test_fails():
    assert 1 + 1 == 3


def test_errors():
    raise ValueError("boom")


def test_also_ok():
    pass
'''

SYMPY_RUNNER = '''import sys
from sympy.testing.runtests import PyTestReporter, SymPyTests
reporter = PyTestReporter(verbose=True, colors=False)
tests = SymPyTests(reporter)
tests._testfiles.append("sympy/core/tests/test_calc.py")
sys.exit(0 if tests.test() else 1)
'''

CARGO_TOML = '''[package]
name = "calc"
version = "0.1.0"
edition = "2021"

[dependencies]
'''

CARGO_LIB = '''pub fn add(a: i32, b: i32) -> i32 {
    a - b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds() {
        assert_eq!(add(2, 3), 5);
    }

    #[test]
    fn subtracts_zero() {
        assert_eq!(add(2, 0), 2);
    }

    #[test]
    #[ignore]
    fn slow() {}

    mod nested {
        #[test]
        fn inner_ok() {}
    }
}
'''

GO_MOD = "module example.com/calc\n\ngo 1.19\n"
GO_TEST = '''package calc

import "testing"

func add(a, b int) int { return a - b }

func TestAdd(t *testing.T) {
	if add(2, 3) != 5 {
		t.Fatalf("add(2, 3) = %d", add(2, 3))
	}
}

func TestSubZero(t *testing.T) {
	if add(2, 0) != 2 {
		t.Fatal("no")
	}
}

func TestSkipped(t *testing.T) { t.Skip("not here") }

func TestTable(t *testing.T) {
	for _, c := range []struct{ name string; a, b, want int }{{"zero", 1, 0, 1}, {"one plus one", 1, 1, 2}} {
		t.Run(c.name, func(t *testing.T) {
			if add(c.a, c.b) != c.want {
				t.Errorf("got %d", add(c.a, c.b))
			}
		})
	}
}
'''


GTEST = r'''#include <gtest/gtest.h>
static int add(int a, int b) { return a + b; }
TEST(Calc, Adds) { EXPECT_EQ(add(1, 2), 3); }
TEST(Calc, Fails) { EXPECT_EQ(add(2, 2), 5); }
TEST(Calc, Skips) { GTEST_SKIP() << "not here"; }
TEST(Format, Pads) { EXPECT_EQ(std::string(3, ' ').size(), 3u); }
'''

DOCTEST = r'''#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
static int add(int a, int b) { return a + b; }
TEST_CASE("value to json") {
    SUBCASE("adds") { CHECK(add(1, 2) == 3); }
    SUBCASE("fails") { CHECK(add(2, 2) == 5); }
    SUBCASE("two checks") { CHECK(add(0, 0) == 0); CHECK(add(1, 1) == 2); }
}
TEST_CASE("parser") {
    SUBCASE("reads & writes") { CHECK(add(2, 3) == 5); }
}
'''

PHPUNIT = r'''<?php
namespace Tests\Unit;
use PHPUnit\Framework\TestCase;
final class CalcTest extends TestCase
{
    public function testAddsNumbers(): void { $this->assertSame(3, 1 + 2); }
    public function testFailsOnPurpose(): void { $this->assertSame(5, 2 + 2); }
    public function testSkipped(): void { $this->markTestSkipped('not here'); }
    /** @dataProvider pairs */
    public function testPairs(int $a, int $b): void { $this->assertSame($a, $b); }
    public function pairs(): array { return ['same' => [1, 1], 'other' => [1, 2]]; }
}
'''

MINITEST = r'''require "minitest/autorun"
# Jekyll's tests are shoulda contexts: names such as `test_: A site should render. `.
class CalcTest < Minitest::Test
  define_method("test_: Calc should add. ") { assert_equal 3, 1 + 2 }
  define_method("test_: Calc should fail. ") { assert_equal 5, 2 + 2 }
  def test_adds; assert_equal 3, 1 + 2; end
  def test_fails; assert_equal 5, 2 + 2; end
  def test_errors; raise "boom"; end
  def test_skips; skip "not here"; end
end
'''

TEST_UNIT = r'''require "test/unit"
class TestCalc < Test::Unit::TestCase
  def test_adds; assert_equal(3, 1 + 2); end
  def test_fails; assert_equal(5, 2 + 2); end
  def test_errors; raise "boom"; end
  def test_omits; omit("not here"); end
end
'''

RSPEC = r'''RSpec.describe "Calc" do
  it("adds") { expect(1 + 2).to eq(3) }
  it("fails") { expect(2 + 2).to eq(5) }
  context "with a context" do
    it("still adds") { expect(2 + 3).to eq(5) }
  end
end
'''


JEST_CALC = r'''const add = (a, b) => a + b;
describe("calc", () => {
  test("adds", () => { expect(add(1, 2)).toBe(3); });
  test("fails", () => { expect(add(2, 2)).toBe(5); });
  test.skip("skips", () => {});
  describe("nested", () => {
    test("still adds", () => { expect(add(2, 3)).toBe(5); });
  });
});
'''

JEST_OK = r'''test("parses", () => { expect(JSON.parse("[1]")).toEqual([1]); });
'''

MOCHA_SPEC = r'''const assert = require("assert");
describe("calc", function () {
  it("adds", function () { assert.strictEqual(1 + 2, 3); });
  it("fails", function () { assert.strictEqual(2 + 2, 5); });
  it.skip("skips", function () {});
  describe("nested", function () {
    it("still adds", function () { assert.strictEqual(2 + 3, 5); });
  });
});
'''

TAPE_SPEC = r'''const test = require("tape");
test("calc", function (t) {
  t.equal(1 + 2, 3, "adds");
  t.equal(2 + 2, 5, "fails");
  t.ok(true, "truthy");
  t.end();
});
test("skipped", { skip: true }, function (t) { t.end(); });
'''


def javascript_logs(tmp: Path) -> dict:
    """Real runs of Jest, Vitest, mocha and tape (versions pinned by data/real-logs-js), as the
    JavaScript repositories' eval scripts run them."""
    logs = {}
    js = tmp / "js"
    js.mkdir()
    shutil.copy(ROOT / "data/real-logs-js/package.json", js)
    shutil.copy(ROOT / "data/real-logs-js/package-lock.json", js)
    subprocess.run(["npm", "ci", "-q", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=js, check=True,
                   stdout=subprocess.DEVNULL)
    write(js, {"tests/calc.test.js": JEST_CALC, "tests/ok.test.js": JEST_OK, "spec/calc.spec.js": MOCHA_SPEC,
               "tap/calc.js": TAPE_SPEC})
    logs["jest_verbose"] = run_log(js, "./node_modules/.bin/jest --ci --verbose tests")
    logs["jest"] = run_log(js, "./node_modules/.bin/jest --ci tests")
    # JEST_JSON_JQ_TRANSFORM: one `[STATUS] <describe blocks> <title>` line per assertion.
    logs["jest_json"] = run_log(
        js, "./node_modules/.bin/jest --ci --json tests 2>/dev/null | jq -r '.testResults[].assertionResults[] | "
        "\"[\\(.status | ascii_upcase)] \\((.ancestorTitles + [.title]) | join(\" \"))\"'")
    logs["vitest"] = run_log(js, "./node_modules/.bin/vitest run --reporter=verbose --globals tests")
    logs["mocha"] = run_log(js, "./node_modules/.bin/mocha spec")
    logs["tape"] = run_log(js, "node ./node_modules/.bin/tape tap/calc.js")
    return logs


def multilingual_logs(tmp: Path) -> dict:
    """Real runs of the C/C++, PHP and Ruby runners SWE-bench Multilingual's repositories use
    (Debian's googletest, doctest-dev, phpunit, ruby-minitest, ruby-test-unit, ruby-rspec, jq)."""
    logs = {}
    gt = tmp / "gtest"
    write(gt, {"calc_test.cc": GTEST})
    logs["googletest"] = run_log(gt, "g++ -o calc_test calc_test.cc -lgtest -lgtest_main -pthread && ./calc_test")
    dt = tmp / "doctest"
    write(dt, {"calc_test.cc": DOCTEST})
    logs["doctest"] = run_log(dt, "g++ -o calc_test calc_test.cc && ./calc_test -s -r=xml")
    php = tmp / "php"
    write(php, {"tests/CalcTest.php": PHPUNIT})
    logs["phpunit"] = run_log(php, "phpunit --testdox --colors=never tests")
    rb = tmp / "rb"
    write(rb, {"test/calc_test.rb": MINITEST, "test/test_calc.rb": TEST_UNIT, "spec/calc_spec.rb": RSPEC})
    logs["minitest"] = run_log(rb, "ruby test/calc_test.rb -v --seed 1")
    logs["ruby_unit"] = run_log(rb, "ruby test/test_calc.rb -v")
    # The eval scripts turn RSpec's JSON into one `<description> - <status>` line per example
    # (rubocop's spec in swebench 4.1.0, verbatim but for the spec file).
    logs["rspec_transformed_json"] = run_log(
        rb,
        "rspec spec/calc_spec.rb --no-color --format json | sed -n '/^{/,$p' | \\\n"
        "  jq -r '.examples | group_by(.description) | .[] |\n"
        "    if any(select(.status == \"failed\")) then\n"
        "      (.[0] | \"\\(.description) - failed\")\n"
        "    else\n"
        "      (.[0] | \"\\(.description) - \\(.status)\")\n"
        "    end'",
    )
    return logs


def eval_script(workdir: Path, command: str, env: str = "") -> str:
    """A SWE-bench eval script in swebench 5.x's run form around `command`."""
    return (
        "#!/bin/bash\nset -uxo pipefail\n"
        f"cd {workdir}\n{env}"
        ": '>>>>> Start Test Output'\n"
        f"{command}\n"
        "SWEBENCH_TEST_EXIT_CODE=$?\n"
        ": '>>>>> End Test Output'\n"
        'echo ">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE"\n'
    )


def run_log(workdir: Path, command: str, env: str = "") -> str:
    script = workdir / "eval.sh"
    script.write_text(eval_script(workdir, command, env))
    out = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    # The project's temporary path would differ on every run: name it as SWE-bench does.
    return out.stdout.decode("utf-8", "replace").replace(str(workdir), "/testbed")


def write(root: Path, files: dict):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--django-wheels", help="directory of Django, asgiref and sqlparse wheels")
    ap.add_argument(
        "--multilingual-only",
        action="store_true",
        help="only the C/C++, PHP and Ruby logs (keeps the other real logs and their cases)",
    )
    args = ap.parse_args()
    # swebench's registry, loaded as scripts/swebench-oracle.py loads it (exits without 5.0.2).
    import importlib.util
    spec = importlib.util.spec_from_file_location("oracle", Path(__file__).parent / "swebench-oracle.py")
    oracle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(oracle)
    registry = oracle.PARSER_REGISTRY

    logs = {}
    with tempfile.TemporaryDirectory(prefix="reallogs") as tmp:
        tmp = Path(tmp)
        logs.update(multilingual_logs(tmp))
        logs.update(javascript_logs(tmp))
        if not args.multilingual_only:
            logs.update(python_go_rust_logs(tmp, args))

    out_dir = FIXTURES / "logs/real"
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in logs.items():
        (out_dir / f"{name}.txt").write_text(text)
    for name in ("django", "sympy", "cargo", "gotest", "pytest_ra", "pytest_astropy", "pytest_seaborn", "pytest_color"):
        if name not in logs:
            logs[name] = (out_dir / f"{name}.txt").read_text()

    # Which real log each registry name reads: the format its repositories' specs produce.
    log_of = {
        "parse_log_django": "django",
        "parse_log_sympy": "sympy",
        "parse_log_cargo": "cargo",
        "parse_log_gotest": "gotest",
        "parse_log_astropy": "pytest_astropy",
        "parse_log_pytest_v2": "pytest_color",
        "parse_log_seaborn": "pytest_seaborn",
        "parse_log_googletest": "googletest",
        "parse_log_doctest": "doctest",
        "parse_log_phpunit": "phpunit",
        "parse_log_minitest": "minitest",
        "parse_log_ruby_unit": "ruby_unit",
        "parse_log_rspec_transformed_json": "rspec_transformed_json",
        "parse_log_jest": "jest_verbose",
        "parse_log_calypso": "jest_verbose",
        "parse_log_jest_json": "jest_json",
        "parse_log_carbon": "jest",
        "parse_log_react_pdf": "jest",
        "parse_log_grommet": "jest",
        "parse_log_vitest": "vitest",
        "parse_log_highlightjs": "mocha",
        "parse_log_eslint": "mocha",
        "parse_log_tap": "tape",
    }
    cases = [c for c in json.loads((FIXTURES / "cases.json").read_text()) if not c["id"].startswith("real__")]
    # The names with a real runner here: the Python parsers, cargo's, go's and those above.
    ours = [n for n, f in registry.items() if f.__module__.endswith(".python")] + [
        n for n in log_of if not n.startswith("parse_log_django") and n not in ("parse_log_sympy", "parse_log_astropy", "parse_log_pytest_v2", "parse_log_seaborn")
    ]
    for name in sorted(set(ours)):
        log = log_of.get(name, "pytest_ra")
        status = registry[name](logs[log], None)
        passed = [t for t, s in status.items() if s in ("PASSED", "XFAIL")]
        failed = [t for t, s in status.items() if s in ("FAILED", "ERROR")]
        # eslint's parser records failures only.
        if not failed or (not passed and name != "parse_log_eslint"):
            sys.exit(f"{name} on logs/real/{log}.txt: no passing or no failing test ({status})")
        cases.append({
            "id": f"real__{name}",
            "parser": name,
            "log_file": f"logs/real/{log}.txt",
            "fail_to_pass": failed[:2],
            "pass_to_pass": passed[:3],
            "eval_type": "pass_and_fail",
        })
    (FIXTURES / "cases.json").write_text(json.dumps(cases, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(logs)} real logs, {len(set(ours))} registry names", file=sys.stderr)


def python_go_rust_logs(tmp: Path, args) -> dict:
    logs = {}
    if True:
        py = tmp / "py"
        write(py, {"tests/__init__.py": "", "tests/test_calc.py": PYTEST_MODULE})
        plain = "PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -p no:cacheprovider"
        logs["pytest_ra"] = run_log(py, f"{plain} -rA tests/test_calc.py")
        logs["pytest_astropy"] = run_log(py, f"{plain} -rA -vv -o console_output_style=classic --tb=no tests/test_calc.py")
        logs["pytest_seaborn"] = run_log(py, f"{plain} --no-header -rA tests/test_calc.py")
        logs["pytest_color"] = run_log(py, f"{plain} -rA --color=yes tests/test_calc.py")

        dj = tmp / "dj"
        write(dj, {"tests/__init__.py": "", "tests/test_calc.py": DJANGO_TESTS, "runtests.py": DJANGO_RUNNER})
        env = ""
        if args.django_wheels:
            site = tmp / "djsite"
            wheels = sorted(str(w) for w in Path(args.django_wheels).glob("*.whl"))
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), *wheels], check=True)
            env = f"export PYTHONPATH={site}\n"
        logs["django"] = run_log(dj, "python3 runtests.py", env)

        sy = tmp / "sy"
        write(sy, {"sympy/core/tests/test_calc.py": SYMPY_MODULE, "bin_test.py": SYMPY_RUNNER})
        logs["sympy"] = run_log(sy, "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' python3 bin_test.py")

        rs = tmp / "rs"
        write(rs, {"Cargo.toml": CARGO_TOML, "src/lib.rs": CARGO_LIB})
        logs["cargo"] = run_log(rs, "cargo test --offline", f"export CARGO_TARGET_DIR={tmp}/rs-target\n")

        go = tmp / "go"
        write(go, {"go.mod": GO_MOD, "calc_test.go": GO_TEST})
        logs["gotest"] = run_log(go, "go test -v ./...", f"export GOCACHE={tmp}/gocache GOFLAGS=-mod=mod\n")
    return logs


if __name__ == "__main__":
    main()
