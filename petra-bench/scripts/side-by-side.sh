#!/usr/bin/env bash
# The dissertation's 32 micro-benchmark cells, petra-bench beside the C++ reference harness built
# by you (PETRA-Non-Pmem's bench/main.cc: `trans`, and `transRomulus`, `transOneFile` from the
# same harness), systems interleaved in each repetition; prints the medians and the ratios.
#
# Usage: side-by-side.sh NAME=BINARY... (e.g. petra=~/cpp/trans romuluslr=~/cpp/transRomulus)
#        side-by-side.sh --table RAW.tsv (the table again, from the raw results of a run)
#
# Each BINARY takes the harness's arguments, SET_TYPE THREADS TEST_SIZE TX_SIZE KEY_RANGE INSERT%
# DELETE% [UPDATE%], and prints its "Wall Time: Ns"; this script runs it in a scratch directory
# (it writes output.txt there) and removes the pool files it leaves in /dev/shm before each run
# (it reloads them otherwise). petra-bench runs the same cells as `petra-bench lftt`, which does
# the harness's work (its prefill, ranges, mixes, tx sizes); both sides are scored by what the
# harness's time gives: THREADS * TEST_SIZE transactions run (committed or aborted) per second.
#
# The cells: set types 0 list (key range 10 000), 1 skiplist, 2 MDList, 3 hash map (1 000 000);
# mixes 40/40/20 and 10/10/80 (the map 40/30/10/20 and 10/10/5/75); threads 1 and 2; transaction
# sizes 1 and 4. The map's UPDATE% is the 8th argument: the published `trans` reads only 7
# (its `argc > 8` line is commented out), so build it with that line restored.
#
# Environment: REPS (repetitions, default 3), TXS (TEST_SIZE, transactions per thread, default
# 20000), CELLS (the set types to run, default "0 1 2 3"), SKIP (NAME:SET_TYPE pairs not to run,
# e.g. "onefile:3"), SHM_FILES (what the C++ binaries leave in /dev/shm, default the harness's:
# Trans*, the four Romulus engines' *_shared files, ponefilelf_shared), MODE (petra-bench's
# --mode, default durable), OUT (the raw results, default side-by-side-RAW.tsv in the current
# directory).
#
# transRomulus maps its heap at a fixed address without MAP_FIXED and crashes at start when
# address randomisation put a library there (a few starts in a hundred): give it as a wrapper
# that runs `setarch -R transRomulus "$@"`.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,30p' "$0"; exit 2; }

# table RAW SYSTEMS: the medians per cell and system of the raw results RAW, and petra-bench over
# each C++ system (with the geometric mean of each ratio over the cells both ran).
table() {
    awk -F'\t' -v systems="$2" '
NR == 1 { next }
{
    key = $3 SUBSEP $7 SUBSEP $4 SUBSEP $5
    if (!(key in seen)) { seen[key] = 1; keys[++nk] = key }
    if ($8 != "nan") { n[key, $2]++; v[key, $2, n[key, $2]] = $8 }
}
function median(key, s,    m, i, j, t, a) {
    m = n[key, s]
    if (m == 0) return -1
    for (i = 1; i <= m; i++) a[i] = v[key, s, i]
    for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}
END {
    ns = split(systems, sys, " ")
    split("list skiplist mdlist hashmap", sname, " ")
    printf "%-9s %-12s %3s %3s", "structure", "mix", "thr", "tx"
    for (i = 1; i <= ns; i++) printf " %12s", sys[i]
    for (i = 2; i <= ns; i++) printf " %14s", "/" sys[i]
    printf "\n"
    for (k = 1; k <= nk; k++) {
        split(keys[k], f, SUBSEP)
        printf "%-9s %-12s %3s %3s", sname[f[1] + 1], f[2], f[3], f[4]
        r = median(keys[k], sys[1])
        for (i = 1; i <= ns; i++) { m = median(keys[k], sys[i]); if (m < 0) printf " %12s", "-"; else printf " %12.0f", m }
        for (i = 2; i <= ns; i++) {
            m = median(keys[k], sys[i])
            if (m <= 0 || r <= 0) { printf " %14s", "-"; continue }
            printf " %14.2f", r / m
            lg[i] += log(r / m); cnt[i]++
        }
        printf "\n"
    }
    printf "%-31s", "geometric mean of the ratios"
    for (i = 1; i <= ns; i++) printf " %12s", ""
    for (i = 2; i <= ns; i++) if (cnt[i]) printf " %14.2f", exp(lg[i] / cnt[i]); else printf " %14s", "-"
    printf "\n"
}' "$1"
}

if [ "$1" = --table ]; then
    raw=${2:?usage: side-by-side.sh --table RAW.tsv}
    # The systems in the order of their first run, petra-bench first.
    table "$raw" "petra-bench $(awk -F'\t' 'NR > 1 && $2 != "petra-bench" && !seen[$2]++ { printf "%s ", $2 }' "$raw")"
    exit
fi
reps=${REPS:-3}
txs=${TXS:-20000}
cells=${CELLS:-0 1 2 3}
skip=" ${SKIP:-} "
shm_files=${SHM_FILES:-Trans* romuluslr_shared romulus_shared romuluslog_shared romulusni_shared ponefilelf_shared}
mode=${MODE:-durable}
names=(petra-bench)
declare -A bin
for arg in "$@"; do
    name=${arg%%=*}
    path=${arg#*=}
    [ "$name" != "$arg" ] && [ -x "$path" ] || { echo "not NAME=EXECUTABLE: $arg" >&2; exit 2; }
    names+=("$name")
    bin[$name]=$(realpath "$path")
done
out=${OUT:-$PWD/side-by-side-RAW.tsv}
root=$(cd "$(dirname "$0")/../.." && pwd)
(cd "$root" && cargo build --release -q -p petra-bench)
bench=$root/target/release/petra-bench
work=$(mktemp -d)
trap 'rm -rf "$work"; for f in $shm_files; do rm -f /dev/shm/$f; done' EXIT

echo "# $(date -u +%FT%TZ) petra-bench at $(git -C "$root" rev-parse --short HEAD), $(nproc) cores, load$(uptime | sed 's/.*load average//')"
echo "# $reps repetitions, $txs transactions per thread, petra-bench --mode $mode; raw results in $out"
printf 'rep\tsystem\tset_type\tthreads\ttx_size\tkey_range\tmix\ttx_per_sec\n' >"$out"

# One run of `system` on a cell; prints transactions run per second.
run() {
    local system=$1 st=$2 threads=$3 tx=$4 range=$5 mix=$6
    if [ "$system" = petra-bench ]; then
        # shellcheck disable=SC2086
        "$bench" lftt "$st" "$threads" "$txs" "$tx" "$range" $mix --mode "$mode" | tail -1 |
            sed -E 's/.*: ([0-9.]+) transactions per second$/\1/'
    else
        for f in $shm_files; do rm -f /dev/shm/$f; done
        local wall
        # shellcheck disable=SC2086
        wall=$(cd "$work" && timeout 900 "${bin[$system]}" "$st" "$threads" "$txs" "$tx" "$range" $mix |
            sed -nE 's/.*Wall Time: ([0-9.e+-]+)s.*/\1/p')
        for f in $shm_files; do rm -f /dev/shm/$f; done
        [ -n "$wall" ] || { echo "$system $st $threads $tx $range $mix: no Wall Time" >&2; echo nan; return; }
        awk -v n=$((threads * txs)) -v w="$wall" 'BEGIN { printf "%.0f\n", n / w }'
    fi
}

for rep in $(seq "$reps"); do
    echo "# repetition $rep" >&2
    # The systems take turns: each repetition starts with the next one.
    order=("${names[@]:$(((rep - 1) % ${#names[@]}))}" "${names[@]:0:$(((rep - 1) % ${#names[@]}))}")
    for st in $cells; do
        if [ "$st" = 0 ]; then range=10000; else range=1000000; fi
        if [ "$st" = 3 ]; then mixes=("40 30 10" "10 10 5"); else mixes=("40 40" "10 10"); fi
        for mix in "${mixes[@]}"; do
            # shellcheck disable=SC2086
            label="${mix// //}/$((100 - ($(echo $mix | tr ' ' '+'))))"
            for threads in 1 2; do
                for tx in 1 4; do
                    for system in "${order[@]}"; do
                        case "$skip" in *" $system:$st "*) continue ;; esac
                        tps=$(run "$system" "$st" "$threads" "$tx" "$range" "$mix")
                        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$system" "$st" "$threads" "$tx" "$range" \
                            "$label" "$tps" >>"$out"
                    done
                done
            done
        done
    done
done

table "$out" "${names[*]}"
