#!/usr/bin/env bash
# The sanitizer step of CI for the emulated CUDA device (docs/cuda.md, "Sanitizers"): builds the
# kernels (kernels/*.cu and the broken fixtures of tests/fixtures/emu) with AddressSanitizer and
# then ThreadSanitizer (stable Rust: only the C++ part is instrumented; the sanitizer runtime is
# linked as a shared library and preloaded), and for each
#   1. runs the emulator's kernel tests (tests/emu_device.rs): no finding allowed;
#   2. runs the deliberately broken kernel (off-by-one index under ASan, removed __syncthreads
#      under TSan) and requires the sanitizer to report it in that kernel.
# Exits non-zero on a finding in step 1 or a miss in step 2. Uses the normal target dir (only
# this crate is rebuilt, twice); the next plain `cargo build` rebuilds it once more.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
fail=0

test_binary() {
    cargo test --locked --test emu_device --no-run --message-format=json 2>/dev/null |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1
}

expect_report() { # name, log, pattern, kernel
    if grep -q "$3" "$2" && grep -q "$4" "$2"; then
        echo "emu-sanitize: $1: caught ($3 in $4)"
    else
        echo "emu-sanitize: $1: NOT caught (no '$3' naming $4); log:" >&2
        tail -40 "$2" >&2
        fail=1
    fi
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
for san in address thread; do
    echo "emu-sanitize: building the emulated kernels with -fsanitize=$san"
    export EXECCRITIC_EMU_SANITIZE=$san
    cargo test --locked --test emu_device --no-run
    bin=$(test_binary)
    [ -x "$bin" ] || { echo "emu-sanitize: no test binary" >&2; exit 1; }
    if [ "$san" = address ]; then
        rt=$(gcc -print-file-name=libasan.so)
        export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=23
        broken=sanitize_off_by_one pattern="AddressSanitizer: heap-buffer-overflow" kernel=broken_off_by_one
    else
        rt=$(gcc -print-file-name=libtsan.so)
        export TSAN_OPTIONS=exitcode=23:halt_on_error=0
        broken=sanitize_missing_sync pattern="ThreadSanitizer: data race" kernel=broken_missing_sync
    fi
    echo "emu-sanitize: $san: kernel tests (no finding allowed)"
    if ! LD_PRELOAD="$rt" "$bin" --test-threads=1 >"$log" 2>&1; then
        echo "emu-sanitize: $san: finding or failure in the kernel tests:" >&2
        tail -60 "$log" >&2
        fail=1
    elif grep -q "Sanitizer" "$log"; then
        echo "emu-sanitize: $san: sanitizer report in the kernel tests:" >&2
        grep -A30 "Sanitizer" "$log" | head -60 >&2
        fail=1
    else
        grep "test result" "$log"
    fi
    echo "emu-sanitize: $san: deliberately broken kernel $kernel"
    LD_PRELOAD="$rt" "$bin" --ignored --exact "$broken" --test-threads=1 >"$log" 2>&1 || true
    expect_report "$san" "$log" "$pattern" "$kernel"
done
unset EXECCRITIC_EMU_SANITIZE
exit $fail
