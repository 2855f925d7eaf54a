#!/usr/bin/env bash
# Side-by-side benchmark of kernel variants in one device call: each variant is a csrc/ tree (the working
# tree's or a saved copy) plus extra nvcc flags. All variants build in parallel, each in its own copy of the
# repository, then run (one after the other, same GPU, same process layout) the quick decode benchmark and,
# unless SNAPMLA_VARIANT_TESTS is empty, a correctness test file. Prints one table with each variant's time
# per case and its ratio to the first variant, and writes all of it as one JSON, $OUT/bench_variants_<time>.json
# (the device call brings back at most 8 files: per-variant builds stay in $SNAPMLA_VARIANT_DIR/variant_<name>/
# (default /tmp), their logs in .../variant_out_<name>/, build logs of
# failed builds are copied to $OUT).
#   SNAPMLA_VARIANTS="name:csrc_dir:flags:env;..."  csrc_dir "." = this tree's csrc, "+file.patch" = this tree
#                                               with a patch applied (patch -p1),
#                                               "@other" = the build of variant `other` (no build of its own,
#                                               e.g. to compare run-time settings), else a path to a csrc copy
#                                               (e.g. under .out/, carried); flags e.g. -DSNAPMLA_TRACE_PHASES;
#                                               env (optional): space-separated VAR=value set for the variant's
#                                               tests and benchmark, e.g. SNAPMLA_FORCE_SPLIT=264
#   SNAPMLA_VARIANT_TESTS="tests/test_decode_kernel_gpu.py" (default), SNAPMLA_VARIANT_TEST_NAMES="a b" (run the
#   tests for these variants only; default: all), SNAPMLA_VARIANT_CASES="" (bench_decode --cases substring;
#   default: --quick), SNAPMLA_GIT_REV (recorded in the JSON),
#   SNAPMLA_VARIANT_NCU="name:case" (after the rounds: ncu's warp samples per SASS instruction of variant `name`'s
#   decode kernel on one bench_decode case, $OUT/ncu_source_<name>.csv, summarised per loop by
#   tools/profile/ncu_hotspots.py --loops),
#   SNAPMLA_VARIANT_ROUNDS=2 (default): the variants' benchmarks run in rounds, each starting one variant later
#   (A B C, B C A, C A B, ...), and the table takes each variant's fastest round per case. One round in variant
#   order was biased: on 2026-12-01 the first variant ran up to 16 % slower than an identical second one (GPU
#   clocks settling), and fixed-order rounds kept a slot bias of ~4 % (the rounds loop says where).
#   SNAPMLA_VARIANT_WARMUP=1 (default) runs the first variant's benchmark once more before the rounds, unrecorded.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
VDIR=${SNAPMLA_VARIANT_DIR:-/tmp}  # where the variants' copies and outputs go (tools/tests/test_bench_variants.py: a temp dir)
source tools/device/device_env.sh
IFS=';' read -ra VARIANTS <<< "${SNAPMLA_VARIANTS:?set SNAPMLA_VARIANTS}"
if [ -n "${SNAPMLA_VARIANT_NCU:-}" ] && [[ ";$SNAPMLA_VARIANTS" != *";${SNAPMLA_VARIANT_NCU%%:*}:"* ]]; then
  echo "SNAPMLA_VARIANT_NCU: no variant ${SNAPMLA_VARIANT_NCU%%:*} in SNAPMLA_VARIANTS"; exit 1
fi
tests=${SNAPMLA_VARIANT_TESTS-tests/test_decode_kernel_gpu.py}
jobs_each=$(( 16 / ${#VARIANTS[@]} )); [ $jobs_each -lt 1 ] && jobs_each=1
t0=$(date +%s)
names=()
declare -A build_of env_of  # variant -> the variant whose build it runs; variant -> its environment settings
for v in "${VARIANTS[@]}"; do
  IFS=':' read -r name src flags envs <<< "$v"
  names+=("$name")
  env_of[$name]=${envs:-}
  # An earlier call's results on a warm machine must not stand in for a variant that fails to patch or build now.
  rm -rf "$VDIR/variant_out_$name"
  if [[ $src == @* ]]; then build_of[$name]=${src#@}; continue; fi
  build_of[$name]=$name
  dir=$VDIR/variant_$name
  rm -rf "$dir"; mkdir -p "$dir"
  tar -C "$ROOT" --exclude=./build --exclude=./.git --exclude=./.out --exclude=./.whl -cf - . | tar -C "$dir" -xf -
  if [[ $src == +* ]]; then
    # "+path.patch": this tree with the patch applied (an experiment kept as a patch, since
    # branches do not survive between machines).
    ( cd "$dir" && patch -s -p1 < "$ROOT/${src#+}" ) || { echo "PATCH FAILED: $name"; continue; }
  elif [ "$src" != "." ]; then rm -rf "$dir/csrc"; cp -r "$ROOT/$src" "$dir/csrc"; fi
  ( cd "$dir" && NVCC_APPEND_FLAGS="$flags" MAX_JOBS=$jobs_each NVCC_THREADS=1 \
      python3 setup.py build_ext --inplace > "$dir/build.log" 2>&1 \
      || { echo "BUILD FAILED: $name"; cp "$dir/build.log" "$OUT/build_$name.log"; } ) &
done
wait
echo "builds: $(( $(date +%s) - t0 )) s"
for name in "${names[@]}"; do
  [ "${build_of[$name]}" = "$name" ] || continue
  grep -E "error:|bytes spill" "$VDIR/variant_$name/build.log" | grep -v " 0 bytes spill" | head -5
done
built=()
for name in "${names[@]}"; do
  dir=$VDIR/variant_${build_of[$name]}
  [ -n "$(ls "$dir"/snapmla_ext/_C*.so 2>/dev/null)" ] || { echo "$name: no build"; continue; }
  built+=("$name")
  mkdir -p "$VDIR/variant_out_$name"  # emptied when the variant list was read
  if [ -n "$tests" ] && { [ -z "${SNAPMLA_VARIANT_TEST_NAMES:-}" ] || [[ " $SNAPMLA_VARIANT_TEST_NAMES " == *" $name "* ]]; }; then
    # shellcheck disable=SC2086
    ( cd "$dir" && env ${env_of[$name]} timeout 300 python3 -m pytest -q -p no:cacheprovider -x $tests \
        > "$VDIR/variant_out_$name/tests.log" 2>&1 )
    echo "$name tests: $(tail -1 "$VDIR/variant_out_$name/tests.log")"
  fi
done
if [ -n "${SNAPMLA_VARIANT_CASES:-}" ]; then bargs="--cases ${SNAPMLA_VARIANT_CASES}"; else bargs="--quick"; fi
bargs="$bargs ${SNAPMLA_VARIANT_BENCH_ARGS:-}"
run_bench() {  # variant name, output folder
  # The copy has no .git: the JSON records the variant as its revision.
  # shellcheck disable=SC2086
  ( cd "$VDIR/variant_${build_of[$1]}" && env ${env_of[$1]} SNAPMLA_GIT_REV="${SNAPMLA_GIT_REV:-unknown}+variant:$1" \
      timeout 300 python3 bench/bench_decode.py $bargs --out "$2" >> "$VDIR/variant_out_$1/bench.log" 2>&1 )
}
[ "${SNAPMLA_VARIANT_WARMUP:-1}" = "1" ] && [ ${#built[@]} -gt 0 ] && run_bench "${built[0]}" "$VDIR/variant_out_warmup"
# Round r starts at built variant r (A B C, B C A, C A B, ...): no variant keeps one slot of every round. On
# 2026-12-08 (H100) a case whose code no variant changed ran 1.04x faster in the fourth slot of both rounds.
for (( round = 0; round < ${SNAPMLA_VARIANT_ROUNDS:-2}; ++round )); do
  for (( i = 0; i < ${#built[@]}; ++i )); do
    name=${built[$(( (i + round) % ${#built[@]} ))]}
    run_bench "$name" "$VDIR/variant_out_$name/round_$round"
  done
done
if [ -n "${SNAPMLA_VARIANT_NCU:-}" ]; then
  IFS=':' read -r ncu_name ncu_case <<< "$SNAPMLA_VARIANT_NCU"
  csv=$OUT/ncu_source_$ncu_name.csv
  # shellcheck disable=SC2086
  ( cd "$VDIR/variant_${build_of[$ncu_name]}" && env ${env_of[$ncu_name]} timeout 200 ncu --clock-control none \
      --kernel-name regex:snapmla_decode_fp8 --launch-skip 3 --launch-count 1 --section SourceCounters \
      --section WarpStateStats --page source --csv --print-source sass \
      python3 bench/bench_decode.py --cases "$ncu_case" > "$csv" 2>&1 )
  python3 tools/profile/ncu_hotspots.py "$csv" --top 10 --loops || echo "ncu of $ncu_name: no source CSV ($csv)"
fi
python3 - "$OUT" "$VDIR" "${SNAPMLA_VARIANTS}" "${names[@]}" <<'PY'
import glob, json, os, sys, time
out, vdir, spec, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
res, rounds, runs = {}, {}, {}
for n in names:
    for f in sorted(glob.glob(f"{vdir}/variant_out_{n}/round_*/bench_decode_*.json")):
        run = json.load(open(f))
        runs.setdefault(n, []).append(run)
        for r in run["results"]:
            rounds.setdefault(n, {}).setdefault(r["name"], []).append(r["us"])
    if n in rounds:
        res[n] = {c: min(v) for c, v in rounds[n].items()}
if not res:
    sys.exit("no results")
base = names[0]
cases = list(next(iter(res.values())).keys())
print("fastest round per case (all rounds in brackets), ratio = baseline / variant")
print(f"{'case':<30}" + "".join(f"{n:>30}" for n in names))
for c in cases:
    row = f"{c:<30}"
    for n in names:
        us = res.get(n, {}).get(c)
        b = res.get(base, {}).get(c)
        every = "/".join(f"{x:.0f}" for x in rounds.get(n, {}).get(c, []))
        row += f"{'-':>30}" if us is None else f"{us:>9.1f} ({(b / us if b else 0):4.2f}x) [{every}]".rjust(30)
    print(row)
path = os.path.join(out, time.strftime("bench_variants_%Y%m%dT%H%M%SZ.json", time.gmtime()))
json.dump({"variants": spec, "baseline": base, "fastest_us": res, "rounds_us": rounds, "runs": runs}, open(path, "w"),
          indent=1)
print("wrote", path)
PY
