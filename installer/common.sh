# Shared by installer/*.sh: install missing Debian packages, configure and build a preset.
# Sourced, not run.
set -euo pipefail

FRAGSCOPE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Everything the build, the tests and the GUI need, as Debian 12 package names.
FRAGSCOPE_BUILD_PACKAGES=(
  build-essential cmake ninja-build pkg-config git python3
  zlib1g-dev libzstd-dev libsqlite3-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  qt6-base-dev qt6-svg-dev libqcustomplot-dev libqcustomplot2.1-qt6 libgl1-mesa-dev
  clang clang-format clang-tidy-14 libclang-rt-14-dev lld
  xvfb xauth dpkg-dev file
  python3-pytest
  slurm-wlm munge
)

fragscope_sudo() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Installs only what dpkg says is missing, so a second run costs a few milliseconds.
fragscope_install_packages() {
  local missing=()
  local pkg
  for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  echo "fragscope: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! fragscope_sudo apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    fragscope_sudo apt-get update -q
    fragscope_sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
}

# Sets FRAGSCOPE_CHILDREN_TICKS to the clock ticks (user+sys) of this shell's finished children,
# from /proc, without a subshell (which would have no children of its own).
fragscope_children_ticks() {
  local stat fields
  read -r stat <"/proc/$BASHPID/stat"
  read -r -a fields <<<"${stat##*) }"
  FRAGSCOPE_CHILDREN_TICKS=$((fields[13] + fields[14]))
}

# fragscope_stage NAME COMMAND...: runs COMMAND and prints its wall and CPU seconds and the load, so
# a CI log shows what each stage costs (CI's time is reasoned in CPU-seconds over its cores). A
# failing COMMAND ends the script (set -e holds inside it: no `||` here to suspend it).
fragscope_stage() {
  local name="$1"
  shift
  local start=$SECONDS ticks0
  fragscope_children_ticks
  ticks0=$FRAGSCOPE_CHILDREN_TICKS
  "$@"
  fragscope_children_ticks
  echo "fragscope: stage $name: $((SECONDS - start)) s wall," \
    "$(((FRAGSCOPE_CHILDREN_TICKS - ticks0) / $(getconf CLK_TCK))) CPU-s," \
    "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
}

fragscope_build() {
  local preset="$1"
  shift
  cd "$FRAGSCOPE_ROOT"
  if [ ! -f "build/$preset/CMakeCache.txt" ]; then
    cmake --preset "$preset" "$@"
  fi
  cmake --build --preset "$preset" --parallel "$(nproc)"
}
