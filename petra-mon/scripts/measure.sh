#!/usr/bin/env bash
# petra-mon's costs beside node_exporter's, on this machine's /proc (docs/petra-mon.md):
#   cpu      the daemon's CPU time per sample set (SECONDS of sampling every 100 ms, no scrapes)
#   scrape   the time and CPU per scrape of petra-mon's page and of node_exporter's (N scrapes each)
#   push     remote write catching up: MINUTES of 100 ms samples pushed to a local Prometheus
# Needs release builds (cargo build --release -p petra-mon --bins --examples), curl, and Debian's
# prometheus and prometheus-node-exporter packages. Everything listens on loopback only.
set -euo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
SECONDS_RUN=${SECONDS_RUN:-60}
N=${N:-200}
MINUTES=${MINUTES:-10}
bin=target/release
tmp=$(mktemp -d /dev/shm/petra-measure.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
ticks=$(getconf CLK_TCK)

# CPU seconds (user + system) of process $1 so far.
cpu() { awk -v t="$ticks" '{ printf "%.4f", ($14 + $15) / t }' "/proc/$1/stat"; }

wait_http() { for _ in $(seq 100); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; return 1; }

if [[ $what == cpu || $what == all ]]; then
    "$bin/petra-mon" --store "$tmp/cpu.pool" --interval-ms 100 --listen off --log-level warn &
    pid=$!
    sleep "$SECONDS_RUN"
    used=$(cpu "$pid")
    kill -TERM "$pid"; wait "$pid"
    sets=$("$bin/petra-ls" "$tmp/cpu.pool" --json | python3 -c 'import json,sys; print(sum(s["latest"]["generation"] for s in json.load(sys.stdin)))')
    echo "cpu: petra-mon stored $sets sample sets in ${SECONDS_RUN} s using ${used} s of CPU: $(python3 -c "print(f'{$used / $sets * 1e6:.1f}')") us per set"
fi

if [[ $what == scrape || $what == all ]]; then
    "$bin/petra-mon" --store "$tmp/scrape.pool" --interval-ms 1000 --listen 127.0.0.1:19464 --log-level warn &
    mon=$!
    prometheus-node-exporter --web.listen-address=127.0.0.1:19100 --log.level=warn 2>/dev/null &
    ne=$!
    wait_http http://127.0.0.1:19464/metrics; wait_http http://127.0.0.1:19100/metrics
    sleep 2
    for target in "petra-mon $mon 19464" "node_exporter $ne 19100"; do
        set -- $target
        series=$(curl -s "http://127.0.0.1:$3/metrics" | grep -vc '^#')
        before=$(cpu "$2")
        times=$(for _ in $(seq "$N"); do curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$3/metrics"; done | sort -n)
        after=$(cpu "$2")
        median=$(echo "$times" | sed -n "$((N / 2))p")
        echo "scrape: $1, $series series: median $(python3 -c "print(f'{$median * 1e3:.2f}')") ms per scrape (curl), $(python3 -c "print(f'{($after - $before) / $N * 1e3:.2f}')") ms of its CPU per scrape (${N} scrapes)"
    done
fi

if [[ $what == push || $what == all ]]; then
    "$bin/examples/mon-bench" fill --store "$tmp/push.pool" --minutes "$MINUTES" --interval-ms 100
    printf 'global:\n  scrape_interval: 1m\n' > "$tmp/prometheus.yml"
    prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
        --web.listen-address=127.0.0.1:19090 --web.enable-remote-write-receiver --log.level=warn 2>/dev/null &
    wait_http http://127.0.0.1:19090/-/ready
    "$bin/examples/mon-bench" push --store "$tmp/push.pool" --url http://127.0.0.1:19090/api/v1/write
fi
