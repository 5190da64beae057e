#!/usr/bin/env bash
# The start-up link probe against a link of known rate and delay (with_cluster.sh shapes it from CLUSTER_RATE and
# CLUSTER_DELAY): 2 emulated nodes x 1 rank; the probe's bandwidth must be 75-105% of the shaped rate (TCP/IP headers
# take ~4%) and its latency 0.8-3x the one-way delay (plus the stacks' own).
#   usage: link_probe_check.sh LAUNCH WORKER
set -euo pipefail
launch=$1
worker=$2
out=$("$launch" -n 2 --ranks-per-node 1 --netns hc --tcp-store --timeout 120 -x HIERCOLL_FABRIC_PROVIDER=tcp \
  -x HIERCOLL_TIMEOUT_MS=60000 -- "$worker" choices 2>&1)
python3 - "$CLUSTER_RATE" "$CLUSTER_DELAY" "$out" <<'PY'
import re, sys
rate, delay, out = sys.argv[1:]
units = {"kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8}
value, unit = re.fullmatch(r"([0-9.]+)([kmg]bit)", rate).groups()
rate_gbps = float(value) * units[unit] / 1e9
value, unit = re.fullmatch(r"([0-9.]+)(us|ms|s)", delay).groups()
delay_us = float(value) * {"us": 1, "ms": 1e3, "s": 1e6}[unit]
# Communicator::tuning() as the worker prints it: the cost model's figures, the probe's where it ran.
m = re.search(r"TUNING rank=0 net_us=(\S+) net_gbps=(\S+) probed=1", out)
if not m:
    sys.exit("no probed TUNING line from rank 0 in the output:\n" + out)
latency, bandwidth = float(m.group(1)), float(m.group(2))
print(f"link probe: latency {latency:.0f} us ({latency / delay_us:.2f} x the {delay_us:.0f} us delay), "
      f"bandwidth {bandwidth:.4f} GB/s ({bandwidth / rate_gbps:.2f} x the {rate_gbps:.4f} GB/s rate)")
choices = set(re.findall(r"CHOICES[a-z ]+", out))
ok = 0.75 <= bandwidth / rate_gbps <= 1.05 and 0.8 <= latency / delay_us <= 3 and len(choices) == 1
sys.exit(0 if ok else "outside the bounds, or ranks chose differently: " + str(choices) + "\n" + out)
PY
