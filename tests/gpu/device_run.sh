#!/usr/bin/env bash
# One batched run on a GPU machine: build + install, GPU tests, a recorded example, optionally
# the overhead benchmark. Logs go to $OUT (default /tmp/dc-gpu-out).
#   bash tests/gpu/device_run.sh [bench args...]
set -u
OUT=${OUT:-/tmp/dc-gpu-out}
# libunwind/libdw carried in an ignored folder (the H200 image has neither; docs/native-frames.md)
NATIVE_LIBS=${NATIVE_LIBS:-$PWD/.gl}
if [ -f "$NATIVE_LIBS/libunwind.so.8" ]; then
  export LD_LIBRARY_PATH="$NATIVE_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export DEEPCONTEXT_LIBUNWIND="$NATIVE_LIBS/libunwind.so.8"
fi
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  nvidia-smi -L
  python3 -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'
  ls "$(python3 -c 'import site; print(site.getsitepackages()[0])')/nvidia" 2>&1 | tr '\n' ' '; echo
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
echo "== build"
( time python3 -m pip install --no-build-isolation --no-deps -v . ) > "$OUT/build.log" 2>&1 \
  || { tail -40 "$OUT/build.log"; exit 1; }
grep -h -- "-- deepcontext:" "$OUT/build.log"; tail -3 "$OUT/build.log"
cd /tmp || exit 1
echo "== example"
rm -f "$OUT/known.dcprof"
time python3 -m deepcontext record -o "$OUT/known.dcprof" -- python3 "$OLDPWD/tests/gpu/programs/known_launches.py"
python3 -m deepcontext report "$OUT/known.dcprof" --threshold 0 > "$OUT/report.txt" 2>&1
head -60 "$OUT/report.txt"
echo "== gpu tests"
python3 -m pytest -q -m gpu -p no:cacheprovider "$OLDPWD/tests/gpu" \
  "$OLDPWD/tests/reliability/test_gpu_faults.py" -rA 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
echo "== native tests (CPython of this machine)"
python3 -m pytest -q -p no:cacheprovider "$OLDPWD/tests/native" -rfE 2>&1 | tee "$OUT/native_tests.log" | tail -5
cd "$OLDPWD" || exit 1
echo "== launch cost (separate processes, 2 rounds)"
for round in $(seq "${LAUNCH_ROUNDS:-2}"); do
  for mode in off python,op python,op,gpu gpu torch; do
    timeout 120 python3 tests/gpu/launch_cost.py "$mode" 2>&1 | grep "us/launch"
  done
done | tee "$OUT/launch_cost.txt"
if [ $# -gt 0 ]; then
  echo "== benchmark: $*"
  timeout "${BENCH_TIMEOUT:-540}" python3 benchmarks/overhead.py "$@" 2>&1 | tee "$OUT/bench.log" | tail -60
fi
