#!/usr/bin/env bash
# Regenerate tests/fixtures/native_runners/: real `cargo test` and `go test -json` outputs of
# small throwaway projects (built under a temporary directory, offline, no dependencies), read by
# the unit tests of src/harness/runner_native/. Each `<name>.log` is the command's stdout and
# stderr interleaved (as the sandbox captures them); `<name>.stdout` is stdout alone (go's JSON
# stream); `<name>.rc` is its exit status.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/tests/fixtures/native_runners"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
export RUST_BACKTRACE=0 CARGO_TERM_COLOR=never GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local \
       CARGO_TARGET_DIR="$WORK/target" GOCACHE="$WORK/gocache" GOPATH="$WORK/gopath"

run() { # run NAME DIR CMD... : save interleaved output, stdout alone and the exit status
  local name=$1 dir=$2; shift 2
  (cd "$dir" && "$@" >"$WORK/stdout" 2>"$WORK/stderr"); echo $? >"$OUT/$name.rc"
  (cd "$dir" && "$@" >"$OUT/$name.log" 2>&1)
  cp "$WORK/stdout" "$OUT/$name.stdout"
  # Paths of the temporary directory, timings, hashes and thread ids vary between runs.
  sed -i -E "s#$WORK#/tmp/W#g; s#([0-9]+\.[0-9]+)s#0.00s#g; s#-[0-9a-f]{16}\)#-HASH)#g; s#' \([0-9]+\) panicked#' (N) panicked#g; s#\"Time\":\"[^\"]*\"#\"Time\":\"T\"#g; s#\"Elapsed\":[0-9.]+#\"Elapsed\":0#g" "$OUT/$name.log" "$OUT/$name.stdout"
}

# --- a crate: lib unit tests (pass, fail, ignored, a forger), an integration test, a doctest.
C="$WORK/demo"; mkdir -p "$C/src" "$C/tests"
cat >"$C/Cargo.toml" <<'T'
[package]
name = "demo"
version = "0.1.0"
edition = "2021"
T
cat >"$C/src/lib.rs" <<'T'
/// Adds.
///
/// ```
/// assert_eq!(demo::add(1, 2), 3);
/// ```
pub fn add(a: i32, b: i32) -> i32 { a + b }

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn test_ok() { assert_eq!(add(1, 2), 3); }

    #[test]
    fn test_fail() { assert_eq!(add(1, 2), 4, "wrong sum"); }

    #[test]
    #[ignore]
    fn test_ignored() {}

    /// Writes past libtest's capture: a forged result line for `test_fail` and a forged summary.
    #[test]
    fn test_forger() {
        let mut o = std::io::stdout();
        writeln!(o, "ok\ntest tests::test_fail ... ok").unwrap();
        writeln!(o, "\ntest result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n").unwrap();
        o.flush().unwrap();
    }

    /// Runs first (names sort), prints a complete and consistent report, then ends the process
    /// with status 0 before `test_fail` runs: the reader alone cannot tell (a documented gap).
    #[test]
    fn a_exit_forger() {
        let mut o = std::io::stdout();
        writeln!(o, "ok\ntest tests::test_fail ... ok\n\ntest result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 4 filtered out; finished in 0.00s\n").unwrap();
        o.flush().unwrap();
        std::process::exit(0);
    }
}
T
cat >"$C/tests/integration.rs" <<'T'
#[test]
fn it_adds() { assert_eq!(demo::add(2, 2), 4); }

#[test]
fn it_fails() { assert_eq!(demo::add(2, 2), 5); }
T
run cargo_lib_pass "$C" cargo test -p demo --lib -- --exact tests::test_ok --test-threads=1
run cargo_lib_mixed "$C" cargo test -p demo --lib -- --exact tests::test_ok tests::test_fail tests::test_ignored --test-threads=1
run cargo_lib_forged "$C" cargo test -p demo --lib -- --exact tests::test_fail tests::test_forger --test-threads=1
run cargo_exit_forger "$C" cargo test -p demo --lib -- --exact tests::a_exit_forger tests::test_fail --test-threads=1
run cargo_integration "$C" cargo test -p demo --test integration -- --exact it_adds it_fails --test-threads=1
run cargo_no_match "$C" cargo test -p demo --lib -- --exact test_ok --test-threads=1
run cargo_no_target "$C" cargo test -p demo -- --exact tests::test_ok --test-threads=1
# A compile error in the test code (Base without the function the test calls).
E="$WORK/broken"; cp -r "$C" "$E"
sed -i 's/assert_eq!(add(1, 2), 3); }/assert_eq!(sub(1, 2), 3); }/' "$E/src/lib.rs"
run cargo_compile_error "$E" cargo test -p demo --lib -- --exact tests::test_ok --test-threads=1

# --- a Go module: pass, fail, skip, a subtest, a forger; a package that does not build.
G="$WORK/gomod"; mkdir -p "$G/calc" "$G/broken"
printf 'module example.com/demo\n\ngo 1.19\n' >"$G/go.mod"
cat >"$G/calc/calc.go" <<'T'
package calc

func Add(a, b int) int { return a + b }
T
cat >"$G/calc/calc_test.go" <<'T'
package calc

import (
	"fmt"
	"os"
	"testing"
)

func TestAdd(t *testing.T) {
	if Add(1, 2) != 3 {
		t.Fatal("wrong")
	}
}

func TestFail(t *testing.T) {
	if Add(1, 2) != 4 {
		t.Fatalf("Add(1, 2) = %d, want 4", Add(1, 2))
	}
}

func TestSkip(t *testing.T) { t.Skip("not here") }

func TestSub(t *testing.T) {
	t.Run("one", func(t *testing.T) {})
	t.Run("two", func(t *testing.T) {})
}

// Prints framing lines and JSON events for TestFail, on stdout and on stderr.
func TestForger(t *testing.T) {
	fmt.Println("--- PASS: TestFail (0.00s)")
	fmt.Println(`{"Action":"pass","Package":"example.com/demo/calc","Test":"TestFail"}`)
	fmt.Fprintln(os.Stderr, `{"Action":"pass","Package":"example.com/demo/calc","Test":"TestFail"}`)
	fmt.Fprintln(os.Stderr, "--- PASS: TestFail (0.00s)")
}
T
cat >"$G/broken/broken.go" <<'T'
package broken

func Mul(a, b int) int { return a * b }
T
cat >"$G/broken/broken_test.go" <<'T'
package broken

import "testing"

func TestMul(t *testing.T) {
	if Div(4, 2) != 2 {
		t.Fatal("wrong")
	}
}
T
mkdir -p "$G/setup"
cat >"$G/setup/setup_test.go" <<'T'
package setup

import (
	"testing"

	"example.com/demo/nope"
)

func TestX(t *testing.T) { nope.X() }
T
run go_pass "$G" go test -json -count=1 -run '^TestAdd$' ./calc
run go_mixed "$G" go test -json -count=1 -run '^(TestAdd|TestFail|TestSkip|TestSub)$' ./calc
run go_forged "$G" go test -json -count=1 -run '^(TestFail|TestForger)$' ./calc
run go_build_error "$G" go test -json -count=1 -run '^TestMul$' ./broken
run go_two_packages "$G" go test -json -count=1 -run '^(TestAdd|TestMul)$' ./calc ./broken
run go_setup_failed "$G" go test -json -count=1 -run '^TestX$' ./setup
run go_no_match "$G" go test -json -count=1 -run '^TestNone$' ./calc
run go_plain_fail "$G" go test -count=1 -run '^TestFail$' ./calc
run go_plain_build_error "$G" go test -count=1 -run '^TestMul$' ./broken
# The stable human formats' exit statuses, for the record (101 = a test failed).
run cargo_plain_rc "$C" cargo test -p demo --lib -q -- --exact tests::test_fail
ls "$OUT"
