#!/usr/bin/env bash
# The sanitizer step of CI for the emulated CUDA device (docs/cuda.md, "Sanitizers"): builds the
# kernels (kernels/*.cu and the broken fixtures of tests/fixtures/emu) with AddressSanitizer and
# then ThreadSanitizer (stable Rust: only the C++ part is instrumented; the sanitizer runtime is
# linked as a shared library and preloaded), and for each
#   1. runs the emulator's kernel tests (tests/emu_device.rs): no finding allowed;
#   2. runs the deliberately broken kernel (off-by-one index under ASan, removed __syncthreads
#      under TSan, and under TSan cp.async staging without the __syncthreads after the wait)
#      and requires the sanitizer to report it in that kernel.
# Exits non-zero on a finding in step 1 or a miss in step 2. Uses the normal target dir (only
# this crate is rebuilt, twice); the next plain `cargo build` rebuilds it once more.
# Usage: scripts/emu-sanitize.sh [address] [thread]   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
# The dev and test profiles strip debug info; a report must name the kernel's source file.
export CARGO_PROFILE_DEV_STRIP=none CARGO_PROFILE_TEST_STRIP=none
fail=0

# The emu_device test binary. Its artifact is picked by target name: the same build also lists
# the `execcritic` binary (integration tests get it), in an order that varies from build to build.
test_binary() {
    cargo test --locked --test emu_device --no-run --message-format=json 2>/dev/null |
        sed -n '/"name":"emu_device"/s/.*"executable":"\([^"]*\)".*/\1/p' | tail -1
}

# Sanitizer reports that concern the emulated C++ code: an access stack (not a thread-creation
# stack) with a frame in kernels/ or tests/fixtures/emu/. Stable Rust cannot instrument its
# standard library, so its futex/atomic handoffs (the test harness's channel, a Vec allocated on a
# rayon worker and freed by the caller) show up as ThreadSanitizer reports about Rust frames only;
# those are not findings about the kernels.
cxx_reports() {
    awk '/(ERROR|WARNING): (Address|Thread)Sanitizer/ {inrep = 1; hit = 0; acc = 1; next}
         inrep && /^  (Thread T|Location is|Address 0x)/ {acc = 0}
         inrep && acc && /(kernels\/|fixtures\/emu\/)/ {hit = 1}
         inrep && /^SUMMARY: (Address|Thread)Sanitizer/ {if (hit) n++; inrep = 0}
         END {print n + 0}' "$1"
}

expect_report() { # name, log, pattern, kernel
    if grep -q "$3" "$2" && grep -q "$4" "$2" && [ "$(cxx_reports "$2")" -gt 0 ]; then
        echo "emu-sanitize: $1: caught ($3 in $4)"
    else
        echo "emu-sanitize: $1: NOT caught (no '$3' naming $4); log:" >&2
        tail -40 "$2" >&2
        fail=1
    fi
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
sanitizers=("$@")
[ ${#sanitizers[@]} -gt 0 ] || sanitizers=(address thread)
for san in "${sanitizers[@]}"; do
    case $san in address | thread) ;; *) echo "emu-sanitize: unknown sanitizer $san" >&2; exit 2 ;; esac
    echo "emu-sanitize: building the emulated kernels with -fsanitize=$san"
    export EXECCRITIC_EMU_SANITIZE=$san
    cargo test --locked --test emu_device --no-run
    bin=$(test_binary)
    [ -x "$bin" ] || { echo "emu-sanitize: no test binary" >&2; exit 1; }
    if [ "$san" = address ]; then
        rt=$(gcc -print-file-name=libasan.so)
        export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=23
        broken=sanitize_off_by_one pattern="ERROR: AddressSanitizer: heap-buffer-overflow" kernel=broken_off_by_one
    else
        rt=$(gcc -print-file-name=libtsan.so)
        export TSAN_OPTIONS=exitcode=23:halt_on_error=0
        broken=sanitize_missing_sync pattern="ThreadSanitizer: data race" kernel=broken_missing_sync
    fi
    echo "emu-sanitize: $san: kernel tests (no finding allowed)"
    # The exit status is not the verdict: TSan sets it for any report, including Rust-only ones.
    LD_PRELOAD="$rt" "$bin" --test-threads=1 >"$log" 2>&1 || true
    cxx=$(cxx_reports "$log")
    total=$(grep -cE "(ERROR|WARNING): (Address|Thread)Sanitizer" "$log" || true)
    if ! grep -q "test result: ok" "$log"; then
        echo "emu-sanitize: $san: the kernel tests failed or were aborted:" >&2
        tail -80 "$log" >&2
        fail=1
    elif [ "$cxx" -gt 0 ]; then
        echo "emu-sanitize: $san: $cxx sanitizer report(s) about the emulated kernels:" >&2
        grep -E -A40 "(ERROR|WARNING): (Address|Thread)Sanitizer" "$log" | head -160 >&2
        fail=1
    else
        grep "test result" "$log"
        echo "emu-sanitize: $san: no report about the kernels ($((total - cxx)) about uninstrumented Rust frames only, not counted)"
    fi
    echo "emu-sanitize: $san: deliberately broken kernel $kernel"
    LD_PRELOAD="$rt" "$bin" --ignored --exact "$broken" --test-threads=1 >"$log" 2>&1 || true
    expect_report "$san" "$log" "$pattern" "$kernel"
    if [ "$san" = thread ]; then
        echo "emu-sanitize: thread: cp.async staging without the __syncthreads after the wait"
        LD_PRELOAD="$rt" "$bin" --ignored --exact sanitize_cp_async_missing_sync --test-threads=1 >"$log" 2>&1 || true
        expect_report "$san cp.async" "$log" "ThreadSanitizer: data race" broken_cp_async
    fi
done
unset EXECCRITIC_EMU_SANITIZE
exit $fail
