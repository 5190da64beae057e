#!/usr/bin/env bash
# The wheels as released (scripts/release/wheels: the sdist, the core wheel built from it in an isolated build, the
# torch wheel with the adapter for the project's torch), installed with pip into a bare Debian root and checked there
# as a user would (scripts/release/install-check), with the emulated cluster up for its two-node case.
#   usage: wheel_install.sh <source dir> <work dir>
set -euo pipefail
src=$(realpath "$1") work=$2
rm -rf "$work" && mkdir -p "$work"
"$src/scripts/release/wheels" --out "$work/dist"
exec "$src/test/cluster/with_cluster.sh" 2 "$src/scripts/release/install-check" "$work/dist"
