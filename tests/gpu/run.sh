#!/usr/bin/env bash
# Builds and runs loom's CUDA tests and benchmarks on a machine with an NVIDIA GPU that has the
# CUDA toolkit, CMake, Ninja and a C++ compiler but none of loom's library packages and no
# package registry. Run from anywhere inside the repository:
#
#   tests/gpu/run.sh [STAGE...]      STAGE: build test bench engine moe sdpa profile
#                                    (default: all but profile)
#
# Stages, so that a run fits a machine's time limit in parts (the build folder is reused):
#   build   unpack the packages, configure, build the gpu tests and every benchmark below
#   test    ctest -L gpu
#   bench   every bench/kernels/cuda_*_bench (Google Benchmark JSON)
#   engine  loom_engine_bench on a random-weight Llama-3-8B shape (made once, in the build
#           folder): decode at batch 1/8/64/256 and prefill in 4096-token steps, CUDA backend
#   moe     loom_engine_bench on a random-weight Mixtral-shaped checkpoint (mixtral-mini, made
#           once, in the build folder): batch 1 and 8 with every expert on the device, then with
#           the expert cache holding 50 % and 25 % of the routed experts, missing experts loaded
#           (never) or computed on the host where the cost model says so (auto), and at 25 %
#           always on the host
#   sdpa    bench/kernels/sdpa_attention.py: PyTorch's scaled_dot_product_attention on the
#           attention benchmarks' shapes (skipped when torch is missing)
#   profile Nsight Compute (ncu) on the engine stage's model decoding at batch 1: every kernel's
#           GPU time, summed by kernel name (tests/gpu/ncu_summary.py), to show where a decode
#           step goes; needs the engine stage's checkpoint (or LOOM_GPU_ENGINE_MODEL)
#
# It unpacks the Debian packages that tests/gpu/fetch-debs.sh downloaded (.gpu-deps/, carried
# with the working tree) into a private prefix with `dpkg -x` (nothing is installed system-wide),
# configures a Release build with -DLOOM_CUDA=ON against that prefix, builds the gpu tests and
# the CUDA benchmarks, runs `ctest -L gpu` and every bench/kernels/cuda_*_bench, and writes into
# $OUT (or bench/results/gpu when OUT is unset):
#   summary.md     device, copy bandwidth, test counts and one row per benchmark
#   summary.json   the same as data
#   run.log        everything this script printed
#   ctest-gpu.xml  JUnit report of the gpu tests
#   <bench>.json   Google Benchmark's JSON output of each CUDA benchmark
#   engine-decode.json, engine-prefill.json   loom_engine_bench reports
#   engine-moe-<residency>-<host compute>.json  the moe stage's loom_engine_bench reports
#   engine-moe-0-host-routed.json    all resident, without grouped experts (or graphs)
#   sdpa.json      the PyTorch comparison
#
# Environment (all optional):
#   LOOM_GPU_DEPS            folder of .deb files            (default: .gpu-deps)
#   LOOM_GPU_BUILD_DIR       build folder                    (default: build/gpu)
#   LOOM_CUDA_ARCHITECTURES  CUDA architectures              (default: 90)
#   LOOM_BUILD_JOBS          parallel build jobs             (default: nproc)
#   LOOM_GPU_BENCH_MIN_TIME  seconds per benchmark           (default: 0.2)
#   LOOM_GPU_TEST_TIMEOUT    seconds one gpu test may run    (default: 300), so that a hung
#                            kernel costs one test, not the machine's whole time limit
#   LOOM_GPU_TEST_JOBS       gpu tests run at once           (default: 4; 1 for a quiet GPU)
#   LOOM_GPU_ENGINE_SHAPE    shape of the random checkpoint the engine stage writes when
#                            LOOM_GPU_ENGINE_MODEL has none (default: llama3-8b; llama-1.1b is
#                            7x smaller and quicker to write)
#   LOOM_GPU_ENGINE_MODEL    checkpoint for the engine stage (default: a random checkpoint of
#                            that shape, written to <build folder>/<shape>)
#   LOOM_GPU_ALLOW_NO_DEVICE=1  finish with status 0 when no GPU is visible (to try the script
#                               on a machine without one); otherwise that is an error (status 3)
# Exit status: 0 when the tests pass on a visible GPU; the ctest status when tests fail; 1 for
# a setup error (message on stderr); 3 when no GPU is visible.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
deps_dir="${LOOM_GPU_DEPS:-$root/.gpu-deps}"
build_dir="${LOOM_GPU_BUILD_DIR:-$root/build/gpu}"
prefix="$build_dir/deps"
archs="${LOOM_CUDA_ARCHITECTURES:-90}"
jobs="${LOOM_BUILD_JOBS:-$(nproc)}"
min_time="${LOOM_GPU_BENCH_MIN_TIME:-0.2}"
out="${OUT:-}"
[[ -n "$out" ]] || out="$root/bench/results/gpu"

log() { echo "=== gpu/run.sh: $*"; }
die() { echo "gpu/run.sh: error: $*" >&2; exit 1; }

mkdir -p "$out" || die "cannot create the output folder $out"
exec > >(tee -a "$out/run.log") 2>&1

# Prints what the machine has; fails early, with the reason, when a tool is missing.
check_tools() {
  log "machine: $(uname -srm); $(grep -m1 PRETTY_NAME /etc/os-release 2>/dev/null || echo 'os unknown')"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L || log "nvidia-smi -L failed"
  else
    log "nvidia-smi not found"
  fi
  nvcc="$(command -v nvcc || true)"
  [[ -n "$nvcc" ]] || { [[ -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc; }
  [[ -n "$nvcc" ]] || die "nvcc not found (neither on PATH nor /usr/local/cuda/bin)"
  log "nvcc: $nvcc ($("$nvcc" --version | grep -o 'release [0-9.]*'))"
  command -v cmake >/dev/null || die "cmake not found on PATH"
  command -v ninja >/dev/null || die "ninja not found on PATH"
  command -v c++ >/dev/null || command -v g++ >/dev/null || die "no C++ compiler (c++ or g++)"
  log "$(cmake --version | head -1); ninja $(ninja --version); $( (c++ --version || g++ --version) | head -1)"
  dpkg-deb --version >/dev/null 2>&1 || ar --version >/dev/null 2>&1 ||
    die "neither dpkg-deb nor ar is available to unpack the .deb files"
}

# Unpacks one .deb's files into $prefix: dpkg-deb -x, or ar + tar where dpkg is missing.
extract_deb() {
  if dpkg-deb --version >/dev/null 2>&1; then
    dpkg-deb -x "$1" "$prefix"
    return
  fi
  local member
  member="$(ar t "$1" | grep '^data\.tar')" || die "$1 has no data.tar member"
  case "$member" in
    *.xz) ar p "$1" "$member" | tar -xJ -C "$prefix" -f - ;;
    *.gz) ar p "$1" "$member" | tar -xz -C "$prefix" -f - ;;
    *.zst) ar p "$1" "$member" | tar --zstd -x -C "$prefix" -f - ;;
    *) ar p "$1" "$member" | tar -x -C "$prefix" -f - ;;
  esac
}

# Checks the carried packages against their MANIFEST and unpacks them into $prefix.
unpack_debs() {
  [[ -f "$deps_dir/MANIFEST" ]] ||
    die "$deps_dir/MANIFEST missing: run tests/gpu/fetch-debs.sh on the Debian machine and carry .gpu-deps"
  local package version _bytes sha debs count=0
  rm -rf "$prefix" && mkdir -p "$prefix"
  while read -r package version _bytes sha; do
    [[ -z "$package" || "$package" == \#* ]] && continue
    debs=("$deps_dir/${package}_"*.deb)
    [[ -f "${debs[0]}" ]] || die "$package ($version) is in the MANIFEST but its .deb is missing"
    [[ "$(sha256sum "${debs[0]}" | cut -d' ' -f1)" == "$sha" ]] ||
      die "${debs[0]} does not match its sha256 in the MANIFEST"
    extract_deb "${debs[0]}"
    count=$((count + 1))
  done < "$deps_dir/MANIFEST"
  log "unpacked $count packages into $prefix"
}

# Directory holding <name>Config.cmake (or <name>-config.cmake) under $prefix.
package_dir() {
  local file
  file="$(find "$prefix" \( -name "$1Config.cmake" -o -name "$1-config.cmake" \) | head -1)"
  [[ -n "$file" ]] || die "no CMake package file for $1 under $prefix"
  dirname "$file"
}

# Configures against the unpacked prefix. The executables carry an old-style RPATH to it
# (--disable-new-dtags), which, unlike RUNPATH, also serves the libraries' own dependencies
# (libabsl_* load one another), so a test binary also runs outside this script.
configure() {
  local libdir="$prefix/usr/lib/x86_64-linux-gnu"
  export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # CMake 4 refuses package files that ask for pre-3.5 policies unless told a minimum.
  export CMAKE_POLICY_VERSION_MINIMUM=3.5
  log "configure: $build_dir (CUDA architectures $archs)"
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLOOM_CUDA=ON -DLOOM_CUDA_ARCHITECTURES="$archs" -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DLOOM_BUILD_TESTS=ON -DLOOM_BUILD_BENCH=ON -DLOOM_BUILD_SERVER=OFF -DLOOM_PYTHON= \
    -DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_INCLUDE_PATH="$prefix/usr/include" \
    -DCMAKE_LIBRARY_PATH="$libdir" -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags" \
    -Dabsl_DIR="$(package_dir absl)" -DGTest_DIR="$(package_dir GTest)" \
    -Dbenchmark_DIR="$(package_dir benchmark)" -Dnlohmann_json_DIR="$(package_dir nlohmann_json)"
}

build() {
  local targets=() f name
  for f in "$root"/tests/gpu/*_test.cc; do targets+=("gpu_$(basename "$f" .cc)"); done
  for f in "$root"/bench/kernels/cuda_*_bench.cc; do
    [[ -e "$f" ]] && targets+=("$(basename "$f" .cc)")
  done
  targets+=(loom_engine_bench)
  [[ ${#targets[@]} -gt 0 ]] || die "no tests/gpu/*_test.cc and no bench/kernels/cuda_*_bench.cc"
  log "build (-j $jobs): ${targets[*]}"
  cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"
}

# Runs the gpu tests; sets test_rc, and device_seen (0 when the tests skipped for lack of a GPU).
run_tests() {
  log "ctest -L gpu"
  set +e
  ctest --test-dir "$build_dir" -L gpu --output-on-failure --no-tests=error \
    --timeout "${LOOM_GPU_TEST_TIMEOUT:-300}" -j "${LOOM_GPU_TEST_JOBS:-4}" \
    --output-junit "$out/ctest-gpu.xml" 2>&1 | tee "$build_dir/ctest-gpu.log"
  test_rc=${PIPESTATUS[0]}
  set -e
  log "ctest finished with status $test_rc"
  # The device tests skip, saying why, exactly when the runtime sees no device.
  device_seen=1
  if "$build_dir/tests/gpu_device_test" --gtest_filter='CudaDeviceTest.*' 2>&1 |
      grep -q "no CUDA device"; then
    device_seen=0
  fi
}

run_benchmarks() {
  local exe name
  for exe in "$build_dir"/bench/cuda_*_bench; do
    [[ -x "$exe" ]] || continue
    name="$(basename "$exe")"
    log "benchmark $name"
    "$exe" --benchmark_min_time="$min_time" --benchmark_out="$out/$name.json" \
      --benchmark_out_format=json || log "$name failed with status $?"
  done
}

# The engine stages' checkpoint shape, folder and benchmark binary (LOOM_GPU_ENGINE_SHAPE and
# LOOM_GPU_ENGINE_MODEL, above).
engine_shape="${LOOM_GPU_ENGINE_SHAPE:-llama3-8b}"
engine_model="${LOOM_GPU_ENGINE_MODEL:-$build_dir/$engine_shape}"
engine_bench="$build_dir/bench/loom_engine_bench"

# Decode tokens/s at batch 1/8/64/256 and prefill tokens/s in 4096-token steps (on the 8B shape
# unless told otherwise), against the device's copy bandwidth and the H200's measured bf16
# matmul peak (790 TFLOP/s).
run_engine() {
  local shape="$engine_shape" model="$engine_model" bench="$engine_bench"
  [[ -x "$bench" ]] || die "$bench missing: run the build stage first"
  if [[ ! -f "$model/config.json" ]]; then
    log "writing a random-weight $shape checkpoint to $model"
    "$bench" make-model --shape "$shape" --dtype bf16 --out "$model" || die "make-model failed"
  fi
  log "engine decode (batch 1, 8, 64, 256)"
  "$bench" run --model "$model" --backend cuda --batch 1,8,64,256 --prompt-len 128 --gen-len 64 \
    --max-batched-tokens 4096 --repeat 2 --peak-tflops 790 --out "$out/engine-decode.json" ||
    log "engine decode failed with status $?"
  # Prompts fit the context: 4096 tokens, or 2040 on the 1.1B shape (2048 positions).
  local prompt_len=4096
  if [[ "$shape" == llama-1.1b && -z "${LOOM_GPU_ENGINE_MODEL:-}" ]]; then prompt_len=2040; fi
  log "engine prefill (4 x $prompt_len-token prompts, 4096-token steps)"
  "$bench" run --model "$model" --backend cuda --batch 4 --prompt-len "$prompt_len" --gen-len 2 \
    --max-batched-tokens 4096 --repeat 2 --peak-tflops 790 --out "$out/engine-prefill.json" ||
    log "engine prefill failed with status $?"
}

# Per-token latency with the expert cache at several sizes (issue 18's GPU figures): the
# all-resident run first (grouped experts and graphs, then routed on the host expert by expert),
# then each residency and host-compute setting.
run_moe() {
  local bench="$engine_bench" model="$build_dir/mixtral-mini"
  [[ -x "$bench" ]] || die "$bench missing: run the build stage first"
  if [[ ! -f "$model/config.json" ]]; then
    log "writing a random-weight mixtral-mini checkpoint to $model"
    "$bench" make-model --shape mixtral-mini --dtype bf16 --out "$model" || die "make-model failed"
  fi
  log "moe: all resident, routed on the host (no grouped experts, no graphs)"
  "$bench" run --model "$model" --backend cuda --batch 1,8 --prompt-len 128 --gen-len 64 \
    --repeat 2 --moe-grouped-experts=false --out "$out/engine-moe-0-host-routed.json" ||
    log "moe host-routed run failed with status $?"
  local setting percent mode
  for setting in 0-never 50-never 50-auto 25-never 25-auto 25-always; do
    percent="${setting%-*}"
    mode="${setting#*-}"
    log "moe: expert cache $percent % (0 = all resident), host compute $mode"
    "$bench" run --model "$model" --backend cuda --batch 1,8 --prompt-len 128 --gen-len 64 \
      --repeat 2 --expert-cache-percent "$percent" --expert-host-compute "$mode" \
      --out "$out/engine-moe-$percent-$mode.json" || log "moe run $setting failed with status $?"
  done
}

# Every kernel of a short batch-1 decode run under ncu (one metric, so one pass per kernel):
# ncu-decode.csv, and ncu-decode.md / .json summed by kernel name.
run_profile() {
  local model="$engine_model" bench="$engine_bench"
  [[ -x "$bench" ]] || die "$bench missing: run the build stage first"
  [[ -f "$model/config.json" ]] || die "no checkpoint at $model: run the engine stage first"
  local ncu
  ncu="$(command -v ncu || true)"
  if [[ -z "$ncu" && -x /usr/local/cuda/bin/ncu ]]; then ncu=/usr/local/cuda/bin/ncu; fi
  if [[ -z "$ncu" ]]; then
    log "ncu not found: the profile stage is skipped"
    return
  fi
  log "ncu: batch-1 decode, 16 new tokens"
  "$ncu" --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --csv \
    --log-file "$out/ncu-decode.csv" "$bench" run --model "$model" --backend cuda --batch 1 \
    --prompt-len 128 --gen-len 16 --repeat 1 --out "$out/profiled-engine.json" ||
    log "the profiled run failed with status $?"
  python3 "$root/tests/gpu/ncu_summary.py" "$out/ncu-decode.csv" \
    --out-json "$out/ncu-decode.json" > "$out/ncu-decode.md" ||
    log "ncu_summary.py failed with status $?"
  head -25 "$out/ncu-decode.md" || true
}

run_sdpa() {
  if ! python3 -c "import torch" 2>/dev/null; then
    log "torch not importable: the SDPA comparison is skipped"
    return
  fi
  log "PyTorch scaled_dot_product_attention"
  python3 "$root/bench/kernels/sdpa_attention.py" --out "$out/sdpa.json" ||
    log "sdpa_attention.py failed with status $?"
}

stages=("$@")
[[ ${#stages[@]} -gt 0 ]] || stages=(build test bench engine moe sdpa)
has_stage() { local s; for s in "${stages[@]}"; do [[ "$s" == "$1" ]] && return 0; done; return 1; }
for stage in "${stages[@]}"; do
  case "$stage" in
    build|test|bench|engine|moe|sdpa|profile) ;;
    *) die "unknown stage '$stage'" ;;
  esac
done

check_tools
if has_stage build; then
  unpack_debs
  configure
  build
else
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
test_rc=0
device_seen=1
has_stage test && run_tests
has_stage bench && run_benchmarks
has_stage engine && run_engine
has_stage moe && run_moe
has_stage sdpa && run_sdpa
has_stage profile && run_profile
"$root/tests/gpu/summarize.py" --out "$out" --ctest-status "$test_rc" ||
  log "summary failed (python3 missing?); the raw JSON files are in $out"
log "results in $out"
if [[ $device_seen -eq 0 ]]; then
  if [[ "${LOOM_GPU_ALLOW_NO_DEVICE:-0}" == 1 ]]; then
    log "no CUDA device was visible: the gpu tests skipped (allowed by LOOM_GPU_ALLOW_NO_DEVICE)"
  else
    echo "gpu/run.sh: error: no CUDA device was visible, so the gpu tests only skipped" >&2
    exit 3
  fi
fi
exit "$test_rc"
