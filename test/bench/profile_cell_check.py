#!/usr/bin/env python3
"""scripts/bench/profile-cell accounts for a call's time: two ranks on two cores spin while they wait, so each rank's CPU
per call, summed over every kind of sample, must come to about the call's time (neither a fraction of it nor a
multiple: the runs' difference, the in-place half and each sample's period all enter that sum), and a one-node
allreduce's samples must land in copying and reducing.

  profile_cell_check.py SOURCE_DIR BUILD_DIR

Exits 77 (skipped) where perf cannot sample (not installed, or perf_event_paranoid forbids it)."""
import os
import re
import shutil
import subprocess
import sys

source, build = sys.argv[1], sys.argv[2]
if not shutil.which("perf") or subprocess.run(["perf", "record", "-q", "-o", "/dev/null", "--", "true"],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
    print("perf cannot sample here: skipped")
    sys.exit(77)
out = subprocess.run([sys.executable, os.path.join(source, "scripts", "bench", "profile-cell"), "allreduce", "32K",
                      "--seconds", "0.4"], env=dict(os.environ, BUILD_DIR=build), check=True,
                     stdout=subprocess.PIPE, text=True).stdout
print(out)
head = re.search(r"([\d.]+) µs per call in the profiled run \(([\d.]+) in place\)", out)
assert head, "no headline"
out_of_place, in_place = float(head.group(1)), float(head.group(2))
rows = {}
for line in out.splitlines():
    cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
    if len(cells) == 3 and re.fullmatch(r"[\d.]+", cells[1]):
        rows[cells[0]] = [float(c) for c in cells[1:]]
total = rows.get("on a core, all kinds")
assert total, "no total row"
low, high = 0.3 * min(out_of_place, in_place), 1.3 * max(out_of_place, in_place) + 1.0
for rank, cpu in enumerate(total):
    assert low <= cpu <= high, f"rank {rank}: {cpu} us of CPU per call, the calls took {out_of_place}/{in_place} us"
for kind in ("copying", "reducing"):
    assert kind in rows and min(rows[kind]) > 0, f"no '{kind}' samples on some rank: {rows.get(kind)}"
print(f"ok: {total} us of CPU per call per rank, calls of {out_of_place}/{in_place} us")
