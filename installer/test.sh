#!/usr/bin/env bash
# Installs what is missing, builds the `dev` preset, starts a one-node Slurm cluster on localhost
# (installer/slurm-localhost.sh, stopped again on exit) and runs every test with ctest (engine,
# storage, CLI, GUI offscreen, Slurm sweeps, packaging, style, and python/tests with pytest as the
# one ctest test python.fragscope_record: its exit 5 "no tests" counts as a pass). Then the `asan`
# preset (clang 14, ASan + UBSan): each libFuzzer target fuzzed briefly from its seed corpus (see
# below). Each stage prints its wall and CPU seconds (`fragscope: stage ...`).
# Exits non-zero on any failure. Extra arguments go to the dev ctest (e.g. -L engine).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fragscope_stage packages fragscope_install_packages "${FRAGSCOPE_BUILD_PACKAGES[@]}"
cd "$FRAGSCOPE_ROOT"
fragscope_stage dev-build fragscope_build dev
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
fragscope_stage dev-ctest ctest --preset dev --parallel "$(nproc)" --timeout 600 "$@"

# The `asan` preset (clang 14, ASan + UBSan at -O1, no GUI): one build serves the libFuzzer targets
# and the sanitized tests. By default (FRAGSCOPE_CI_ASAN=readers) it builds the fuzz targets
# (snapshot reader, allocator config, experiment files, Hugging Face config.json, recording stats,
# env.json), fuzzes each for 5 s from its corpus in tests/fuzz/corpus, and runs sanitized the
# engine's reader and input tests (pickle VM, hostile and bomb pickles, segment state, bounded JSON,
# FIFOs). Measured at -j1 (load 6-9): the fuzz targets' sanitized build 433 CPU-s, the two reader
# test binaries 95 CPU-s more, their 98 tests 46 CPU-s. =fuzz leaves the reader tests out; =1 adds
# every storage test (durability, kill -9, concurrency stress, full disk, migrations: storage_test
# alone is ~680 CPU-s to build sanitized, more than CI's 30 minutes leave); =full builds the whole
# preset and runs every test sanitized; =0 skips the stage. What the sanitized stage leaves out
# runs once, unsanitized, above.
asan_mode="${FRAGSCOPE_CI_ASAN:-readers}"
if [ "$asan_mode" != 0 ]; then
  cd "$FRAGSCOPE_ROOT"
  if [ ! -f build/asan/CMakeCache.txt ]; then
    fragscope_stage asan-configure cmake --preset asan >/dev/null
  fi
  if [ "$asan_mode" = full ]; then
    asan_targets=()
    asan_tests=(-LE "style|packaging")
  elif [ "$asan_mode" = fuzz ]; then
    asan_targets=(--target fuzz_all)
    asan_tests=(-L fuzz)
  elif [ "$asan_mode" = readers ]; then
    asan_targets=(--target engine_core_test engine_snapshot_test fuzz_all)
    # Test binaries this stage did not build register a *_NOT_BUILT placeholder: not run.
    asan_tests=(-L "engine|fuzz" -E "_NOT_BUILT")
  else
    asan_targets=(--target storage_test engine_core_test engine_snapshot_test fuzz_all)
    asan_tests=(-L "storage|engine|fuzz" -E "_NOT_BUILT")
  fi
  fragscope_stage asan-build cmake --build build/asan --parallel "$(nproc)" "${asan_targets[@]}"
  # The preset sets ASAN_OPTIONS/UBSAN_OPTIONS: leaks fail, any undefined behaviour fails; a fuzz
  # target fails on any crash, sanitizer report or hang it finds.
  fragscope_stage asan-ctest ctest --preset asan --parallel "$(nproc)" --timeout 900 "${asan_tests[@]}"
fi
echo "fragscope: CI done in $SECONDS s wall, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
