#!/usr/bin/env bash
# CPU engine speed of two commits, side by side in one run (the non-regression check of a change):
#
#   bash scripts/bench_cpu_ab.sh BASE [HEAD] [--rounds N] [--write FILE]
#
# Builds `benches/model_cpu.rs` (release) at each commit in a scratch worktree, writes the benchmark
# model once (examples/bench_checkpoint.rs at HEAD: the shape of scripts/bench_cpu_vs_transformers.py,
# random weights, as an f32 and as a bf16 checkpoint), then runs the two binaries interleaved
# (order alternating per round, RAYON_NUM_THREADS=2) and prints per measure the median of each
# commit and the ratio HEAD / BASE. The machine is shared and noisy: read ratios, not absolutes.
# On a machine shared with builds: run them under `nice -n 19` and turn the kernel's autogroup
# scheduling off (`echo 0 > /proc/sys/kernel/sched_autogroup_enabled`, root), else nice has no effect
# across terminal sessions and the benchmark gets a fraction of the cores.
# --write appends the table to FILE (e.g. benches/results/cpu-engine-ab.md).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
base="" head=HEAD rounds=5 write=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --write) write=$2; shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) if [ -z "$base" ]; then base=$1; else head=$1; fi; shift ;;
  esac
done
[ -n "$base" ] || { echo "usage: bench_cpu_ab.sh BASE [HEAD] [--rounds N] [--write FILE]" >&2; exit 2; }
WORK=${AB_WORK:-/tmp/execcritic-ab}
export CARGO_TARGET_DIR=${AB_TARGET:-$WORK/target}
mkdir -p "$WORK"

build() { # commit -> path of its release model_cpu bench binary (copied to $WORK/bench-<sha>)
  local sha tree exe
  sha=$(git rev-parse --short "$1")
  if [ ! -x "$WORK/bench-$sha" ]; then
    tree="$WORK/tree-$sha"
    [ -d "$tree" ] || git worktree add --detach "$tree" "$sha" >&2
    exe=$(cd "$tree" && cargo bench --locked --bench model_cpu --no-run --message-format=json 2>/dev/null \
      | python3 -c 'import sys,json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "model_cpu":
        print(m["executable"])')
    [ -n "$exe" ] || { echo "build of $sha failed" >&2; exit 1; }
    cp "$exe" "$WORK/bench-$sha"
    git worktree remove --force "$tree" >&2
  fi
  echo "$WORK/bench-$sha"
}

A=$(build "$base"); B=$(build "$head")
for dt in f32 bf16; do
  [ -f "$WORK/model-$dt/config.json" ] || cargo run --locked --release --example bench_checkpoint -- "$WORK/model-$dt" "$dt" >&2
done

runs="$WORK/runs.jsonl"; : > "$runs"
for r in $(seq 1 "$rounds"); do
  for dt in f32 bf16; do
    if [ $((r % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
    for who in $order; do
      bin=$A; [ "$who" = B ] && bin=$B
      line=$(RAYON_NUM_THREADS=2 "$bin" "$WORK/model-$dt" --prefill 512 --decode-steps 32 --prompt 64 | grep '^{' | tail -1)
      echo "{\"who\":\"$who\",\"dtype\":\"$dt\",\"round\":$r,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"r\":$line}" >> "$runs"
      echo "round $r $dt $who: $line" >&2
    done
  done
done

python3 - "$runs" "$(git rev-parse --short "$base")" "$(git rev-parse --short "$head")" "$rounds" "$write" <<'EOF'
import json, statistics, sys, datetime
runs, base, head, rounds, write = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
rows = [json.loads(l) for l in open(runs)]
keys = [("prefill 512 tokens (tok/s)", "prefill_tok_s"), ("decode batch 1 (tok/s)", "decode_b1_tok_s"),
        ("decode batch 8 (tok/s)", "decode_b8_tok_s")]
loads = [float(r["load"]) for r in rows]
out = [f"## {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC: `{head}` (HEAD) vs `{base}` (BASE), {rounds} interleaved rounds, "
       f"2 threads, load {min(loads):.1f}-{max(loads):.1f}", "",
       "| checkpoint | measure | BASE median | HEAD median | HEAD / BASE | per-round ratios |", "|---|---|---|---|---|---|"]
for dt in ("f32", "bf16"):
    for name, k in keys:
        a = {r["round"]: r["r"][k] for r in rows if r["dtype"] == dt and r["who"] == "A"}
        b = {r["round"]: r["r"][k] for r in rows if r["dtype"] == dt and r["who"] == "B"}
        ratios = [b[i] / a[i] for i in sorted(a) if i in b]
        ma, mb = statistics.median(a.values()), statistics.median(b.values())
        out.append(f"| {dt} | {name} | {ma:.1f} | {mb:.1f} | **{mb / ma:.3f}** | {', '.join(f'{x:.2f}' for x in ratios)} |")
text = "\n".join(out) + "\n"
print(text)
if write:
    with open(write, "a") as f:
        f.write("\n" + text)
EOF
