#!/bin/sh
# Parse + timeline of a large snapshot in FragScope vs python3's pickle.load alone, CPU seconds
# and peak RSS (the machine may be shared, so CPU time is the fair measure).
# usage: compare_with_python.sh FRAGSCOPE_BENCH_BINARY SNAPSHOT.pickle
set -eu
bench=$1
snap=$2
size=$(stat -c %s "$snap")
echo "file: $snap ($size bytes)"
/usr/bin/time -f "python3 pickle.load: %U user + %S sys s, peak RSS %M KiB" \
  python3 -c "import pickle,sys; pickle.load(open(sys.argv[1],'rb'))" "$snap"
FRAGSCOPE_LARGE_SNAPSHOT=$snap /usr/bin/time \
  -f "fragscope parse+timeline: %U user + %S sys s, peak RSS %M KiB" \
  "$bench" --benchmark_filter=BM_LargeSnapshot >/dev/null
