#!/usr/bin/env bash
# The layering of lib/ is enforced by the build: each layer compiles against build/lib/layers/<folder>/, a
# directory of links to the folders it may see (lib/CMakeLists.txt). This test shows the enforcement works: for
# every layer and every other folder that has a header, a file including that header must compile exactly when
# the folder is below the layer in the architecture lib/CMakeLists.txt states (its HIERCOLL_SEES_ table, which it
# writes to build/lib/layers.txt), and fail ("No such file") when it is above or beside it.
#   check.sh SOURCE_DIR BUILD_DIR CXX
set -euo pipefail
src=$1 build=$2 cxx=$3
views=$build/lib/layers
[ -d "$views/engine" ] || { echo "no layer views under $views"; exit 1; }
table=$build/lib/layers.txt
[ -s "$table" ] || { echo "no layer table $table"; exit 1; }
declare -A below=()
while IFS=: read -r layer seen; do
  below[$layer]=$(echo $seen)
done <"$table"
[ "${#below[@]}" -ge 10 ] || { echo "the layer table $table lists ${#below[@]} layers"; exit 1; }
failures=0 checks=0
for view in "$views"/*/; do
  layer=$(basename "$view")
  for folder_dir in "$src"/lib/*/; do
    folder=$(basename "$folder_dir")
    header=$(cd "$folder_dir" && ls -1 *.hpp 2>/dev/null | head -1) || true
    [ -n "$header" ] || continue
    [ "$folder" = "$layer" ] && continue
    [ -n "${below[$layer]+set}" ] || { echo "layer $layer is not in this test's architecture"; exit 1; }
    expected=refused
    [[ " ${below[$layer]} " == *" $folder "* ]] && expected=compiles
    if echo "#include \"$folder/$header\"" | "$cxx" -std=c++17 -fsyntax-only -I "$view" -I "$src/include" \
         -x c++ - 2>/dev/null; then got=compiles; else got=refused; fi
    checks=$((checks + 1))
    if [ "$got" != "$expected" ]; then
      echo "layer $layer including $folder/$header: $got, expected $expected"
      failures=$((failures + 1))
    fi
  done
done
echo "$checks layer/folder pairs checked, $failures wrong"
[ "$failures" = 0 ] && [ "$checks" -gt 50 ]
