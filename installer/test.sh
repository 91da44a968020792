#!/usr/bin/env bash
# Installs what is missing, builds, starts a one-node Slurm cluster on localhost
# (installer/slurm-localhost.sh, stopped again on exit) and runs every test once with ctest.
# Each stage prints its wall and CPU seconds (`fragscope: stage ...`).
#
# By default (FRAGSCOPE_CI_ASAN=full) every test that the `asan` preset builds runs there,
# sanitized: the `asan` preset (clang 14, ASan + UBSan at -O1, no GUI) builds the engine, storage,
# use-case and CLI tests (the CLI tests drive the sanitized fragscope-cli) and the libFuzzer targets,
# each fuzzed for 5 s from its corpus in tests/fuzz/corpus. The `ci` preset (`dev` in build/ci) is
# built without those suites (FRAGSCOPE_CORE_TESTS=OFF) and runs the rest: the GUI offscreen,
# Slurm sweeps, packaging, style, and python/tests with pytest as the one ctest test
# python.fragscope_record (its exit 5 "no tests" counts as a pass). Building each suite once is
# what makes the sanitized stage affordable within CI's 30 minutes on 2 cores. =readers builds
# every test in build/ci and only the engine's reader tests and the fuzz targets sanitized; =fuzz
# only the fuzz targets sanitized; =0 no sanitized stage (build/ci then runs everything
# unsanitized, the quickest way to run every test).
# Exits non-zero on any failure. Extra arguments go to build/ci's ctest (e.g. -L engine).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

asan_mode="${FRAGSCOPE_CI_ASAN:-full}"
case "$asan_mode" in
  full | readers | fuzz | 0) ;;
  *)
    echo "FRAGSCOPE_CI_ASAN=$asan_mode: expected full, readers, fuzz or 0" >&2
    exit 2
    ;;
esac
core_tests=ON
[ "$asan_mode" = full ] && core_tests=OFF

fragscope_stage packages fragscope_install_packages "${FRAGSCOPE_BUILD_PACKAGES[@]}"
cd "$FRAGSCOPE_ROOT"
# The `ci` preset is `dev` (build/ci) with line tables instead of full debug information, which
# compiles the GUI and its tests ~15 % faster; backtraces keep their files and lines. Configured
# every time: an earlier build/ci may hold the other FRAGSCOPE_CORE_TESTS.
fragscope_stage dev-configure cmake --preset ci -DFRAGSCOPE_CORE_TESTS="$core_tests" >/dev/null
fragscope_stage dev-build cmake --build --preset ci --parallel "$(nproc)"
cd "$FRAGSCOPE_ROOT"
export QT_QPA_PLATFORM=offscreen

# The `slurm` tests submit to a real Slurm: munged, slurmctld and slurmd on this machine, their
# files in a temporary folder, stopped by the trap whether the tests pass or fail. Where the
# daemons cannot start, the tests say SKIPPED and why.
slurm_dir="$(mktemp -d "${TMPDIR:-/tmp}/fragscope-slurm-XXXXXX")"
trap 'installer/slurm-localhost.sh stop "$slurm_dir"; rm -rf "$slurm_dir"' EXIT
slurm_status=0
slurm_env="$(installer/slurm-localhost.sh start "$slurm_dir")" || slurm_status=$?
if [ "$slurm_status" -eq 0 ]; then
  eval "$slurm_env"
  echo "fragscope: local Slurm cluster up (SLURM_CONF=$SLURM_CONF)"
elif [ "$slurm_status" -eq 77 ]; then
  echo "fragscope: SKIPPING the slurm tests: the Slurm daemons cannot start here (reason above)"
else
  exit "$slurm_status"
fi
fragscope_stage dev-ctest ctest --preset ci --parallel "$(nproc)" --timeout 600 "$@"

# The sanitized stage: one `asan` build serves the libFuzzer targets and the sanitized tests.
# Measured for =readers at -j1 (load 6-9): the fuzz targets' sanitized build 433 CPU-s, the two
# reader test binaries 95 CPU-s more, their 98 tests 46 CPU-s.
if [ "$asan_mode" != 0 ]; then
  cd "$FRAGSCOPE_ROOT"
  if [ ! -f build/asan/CMakeCache.txt ]; then
    fragscope_stage asan-configure cmake --preset asan >/dev/null
  fi
  if [ "$asan_mode" = full ]; then
    asan_targets=()
    # style and packaging need the ci build (its compile database, the GUI in the package); the
    # Python and Slurm tests ran there.
    asan_tests=(-LE "style|packaging|python|slurm")
  elif [ "$asan_mode" = fuzz ]; then
    asan_targets=(--target fuzz_all)
    asan_tests=(-L fuzz)
  else
    asan_targets=(--target engine_core_test engine_snapshot_test fuzz_all)
    # Test binaries this stage did not build register a *_NOT_BUILT placeholder: not run.
    asan_tests=(-L "engine|fuzz" -E "_NOT_BUILT")
  fi
  fragscope_stage asan-build cmake --build build/asan --parallel "$(nproc)" "${asan_targets[@]}"
  # The preset sets ASAN_OPTIONS/UBSAN_OPTIONS: leaks fail, any undefined behaviour fails; a fuzz
  # target fails on any crash, sanitizer report or hang it finds.
  fragscope_stage asan-ctest ctest --preset asan --parallel "$(nproc)" --timeout 900 "${asan_tests[@]}"
fi
echo "fragscope: CI done in $SECONDS s wall, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
