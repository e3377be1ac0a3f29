#!/bin/sh
# Build the port's planner with the system C compiler when it is missing or older than its sources, then
# run it with this script's arguments. The binary lands beside the sources (ignored by git); a build
# writes a temporary file first, so runs started at once never see half a binary.
set -eu
dir=$(cd "$(dirname "$0")" && pwd)
bin="$dir/planner"
if [ ! -x "$bin" ] || [ "$dir/planner.c" -nt "$bin" ] || [ "$dir/trace.c" -nt "$bin" ] || [ "$dir/port.h" -nt "$bin" ]; then
  tmp="$bin.$$"
  ${CC:-cc} -O2 -std=c99 -Wall -o "$tmp" "$dir/planner.c" "$dir/trace.c"
  mv -f "$tmp" "$bin"
fi
exec "$bin" "$@"
