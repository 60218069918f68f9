#!/usr/bin/env bash
# The sanitizer step of CI for the emulated CUDA device (docs/cuda.md, "Sanitizers"): builds the
# kernels (kernels/*.cu and the broken fixtures of tests/fixtures/emu, the sources build.rs lists)
# as one shared library with AddressSanitizer and then ThreadSanitizer (stable Rust: only the C++
# part is instrumented; the sanitizer runtime is preloaded), and for each runs the emu_device test
# binary — built once, as every test run builds it — against that library
# (EXECCRITIC_EMU_LIBRARY, loaded at start as a device loads a module):
#   1. the emulator's kernel tests (tests/emu_device.rs): no finding allowed;
#   2. the deliberately broken kernel (off-by-one index under ASan, removed __syncthreads under
#      TSan, and under TSan cp.async staging without the __syncthreads after the wait): the
#      sanitizer must report it in that kernel.
# Exits non-zero on a finding in step 1 or a miss in step 2. Only the kernels are compiled here
# (target/emu-sanitize/<sanitizer>/); this crate is not rebuilt.
# Usage: scripts/emu-sanitize.sh [address] [thread]   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
fail=0

# The emu_device test binary and this crate's build-script output directory (which holds the
# generated kernel units and their list), from cargo's messages. The binary is picked by target
# name: the same build also lists the `execcritic` binary, in an order that varies from build to
# build.
cargo test --locked --test emu_device --no-run --message-format=json 2>/dev/null >"$CARGO_TARGET_DIR/emu-sanitize.json"
read -r bin out_dir < <(python3 - "$CARGO_TARGET_DIR/emu-sanitize.json" <<'PY'
import json, sys
bin_, out = "", ""
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "emu_device" and m.get("executable"):
        bin_ = m["executable"]
    if m.get("reason") == "build-script-executed" and "execcritic" in m.get("package_id", ""):
        out = m["out_dir"]
print(bin_ or "-", out or "-")
PY
)
[ -x "$bin" ] || { echo "emu-sanitize: no emu_device test binary" >&2; exit 1; }
[ -f "$out_dir/emu_sources.txt" ] || { echo "emu-sanitize: no kernel list in the build output ($out_dir)" >&2; exit 1; }

# The kernels as one shared library with -fsanitize=$1, compiled like build.rs's static library
# (same units, includes, C++17, -O2) plus debug info (a report must name the kernel's file), the
# OS-thread engine (fibers hide the threads from the sanitizers) and -Bsymbolic (the library's
# own kernels, never the binary's linked copies).
build_library() { # sanitizer, output
    local dir
    dir=$(dirname "$2")/obj
    mkdir -p "$dir"
    rm -f "$dir"/*.o
    export EMU_OBJ_DIR=$dir
    export EMU_CXXFLAGS="-std=c++17 -O2 -g -fPIC -fsanitize=$1 -fno-omit-frame-pointer -DEMU_OS_THREADS=1 -Ikernels/emu -Ikernels -I$out_dir"
    # One compiler per core; each line is "<n> <source>" (paths without blanks, as cargo's).
    nl -ba -w1 -s' ' "$out_dir/emu_sources.txt" |
        xargs -P "$(nproc)" -L 1 sh -c 'g++ $EMU_CXXFLAGS -c "$1" -o "$EMU_OBJ_DIR/$0.o"'
    g++ -shared "-fsanitize=$1" -Wl,-Bsymbolic -o "$2" "$dir"/*.o -lpthread
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
    lib="$CARGO_TARGET_DIR/emu-sanitize/$san/libexeccritic_emu.so"
    mkdir -p "$(dirname "$lib")"
    build_library "$san" "$lib"
    export EXECCRITIC_EMU_LIBRARY EXECCRITIC_EMU_EXPECT_SANITIZER=$san
    EXECCRITIC_EMU_LIBRARY=$(realpath "$lib")
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
unset EXECCRITIC_EMU_LIBRARY EXECCRITIC_EMU_EXPECT_SANITIZER
exit $fail
