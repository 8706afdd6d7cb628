#!/usr/bin/env bash
# The durability policies on one disk, beside redb: petra-bench kv (fillrandom, overwrite) and
# metrics at 1 and 2 threads under process, periodic (1 s) and immediate, and redb with
# durability immediate, the runs alternating in each repetition, with the disk's own fdatasync
# latency measured in the same run. Usage: durability.sh DIR [REPS] (DIR on the disk to measure;
# give a directory on ext4 or xfs, not /dev/shm, to measure what syncs cost).
set -euo pipefail
dir=${1:?usage: durability.sh DIR [REPS]}
reps=${2:-3}
# Keys (or samples) per run: the immediate runs wait for the disk at every write, so fewer.
num=${NUM:-1000000}
num_sync=${NUM_SYNC:-5000}
samples=${SAMPLES:-100000}
samples_sync=${SAMPLES_SYNC:-3000}
cd "$(dirname "$0")/../.."
cargo build --release -q -p petra-bench
bench=target/release/petra-bench
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) on $(df -T "$dir" | awk 'NR==2 {print $2}') ($dir), $(nproc) cores"
for rep in $(seq "$reps"); do
    echo "# repetition $rep"
    $bench fsync --dir "$dir" --writes 2000
    for threads in 1 2; do
        for policy in process periodic; do
            $bench kv --dir "$dir" --benchmarks fillrandom,overwrite --num "$num" --threads "$threads" \
                --durability "$policy" | grep -v '^engine,'
        done
        $bench kv --dir "$dir" --benchmarks fillrandom,overwrite --num "$num_sync" --threads "$threads" \
            --durability immediate | grep -v '^engine,'
        $bench kv --dir "$dir" --benchmarks fillrandom,overwrite --num "$num_sync" --threads "$threads" \
            --engine redb-immediate | grep -v '^engine,'
        sets=$threads
        $bench metrics --dir "$dir" --sets "$sets" --threads "$threads" --samples "$samples" --reads 1000 \
            --ranges 10 --range-len 100 --engine petra --durability process,periodic | grep -v '^engine'
        $bench metrics --dir "$dir" --sets "$sets" --threads "$threads" --samples "$samples_sync" --reads 1000 \
            --ranges 10 --range-len 100 --engine petra,redb-immediate --durability immediate | grep -v '^engine'
    done
done
