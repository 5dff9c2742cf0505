#!/usr/bin/env bash
# Runs tests against a sanitizer build of the core (docs/testing.md, "Sanitizer runs").
#
#   tests/sanitizers/run.sh asan [PYTEST ARGS...]   AddressSanitizer + UndefinedBehaviorSanitizer
#   tests/sanitizers/run.sh tsan [PYTEST ARGS...]   ThreadSanitizer
#
# The package is built with -DDC_SANITIZE=... into the venv build/sanitize-<kind>/venv; the
# interpreter, torch and the rest stay uninstrumented, so the sanitizer runtime
# is loaded with LD_PRELOAD. Everything the tests start (the `record` CLI, which execs the
# program, and the program's own children) inherits the environment, so every process that
# loads the core has the runtime. Reports go to files, not to the programs' stderr (which the
# tests compare), and any report at all fails the run, whatever the tests said.
# Exit status: pytest's, or 1 when a sanitizer reported.
set -euo pipefail
cd "$(dirname "$0")/../.."
kind=${1:?usage: tests/sanitizers/run.sh asan|tsan [PYTEST ARGS...]}
shift
PY=${PYTHON:-python3}
here=tests/sanitizers
out=build/sanitize-$kind
case $kind in
  asan) flags=address,undefined; runtime=libasan.so ;;
  tsan) flags=thread; runtime=libtsan.so ;;
  *) echo "unknown sanitizer run '$kind' (asan or tsan)" >&2; exit 2 ;;
esac

lib=$(${CC:-gcc} -print-file-name=$runtime)
lib=$(readlink -f "$lib")
[[ -f $lib ]] || { echo "no $runtime for ${CC:-gcc}; install the compiler's sanitizer runtime" >&2; exit 2; }

# The build: incremental in $out/cmake, installed into a venv of its own that sees the system's
# packages (torch, pytest...). A venv, not PYTHONPATH: the tests start children with
# sys.executable and some scrub PYTHONPATH, and every one of them must load this build.
if [[ ! -x $out/venv/bin/python ]]; then
  "$PY" -m venv --without-pip --system-site-packages "$out/venv"
fi
site=$("$out/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
# A PYTHON that is itself a venv: --system-site-packages sees its base interpreter's packages,
# not the venv's (torch...), so those are added after this venv's own (its build still wins).
"$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))' > "$site/zz-python-site.pth"
rm -rf "$site"/deepcontext "$site"/deepcontext-*.dist-info "$site"/bin  # no file of an older build stays
"$PY" -m pip install -q --no-deps --no-build-isolation --target "$site" \
  -C cmake.define.DC_SANITIZE=$flags -C cmake.build-type=RelWithDebInfo -C build-dir="$out/cmake" .
# (RelWithDebInfo: a Release build is stripped, and reports would name no function of ours.)
base_py=$PY
PY=$out/venv/bin/python

# The torch operator hook, built now (with the runtime for this process only, so the compiler and
# the shell ninja runs it through are not under it: bash and dash crash under a preloaded TSan).
# Built, later loads only ask ninja, which runs no command, whether it is up to date. No leak
# check here (as in the tests, below): LeakSanitizer's report on CPython's allocations at exit
# made this build "fail" on a fresh machine, and every test then ran the fallback op tier.
# Asked of the base interpreter: the ninja package looks for its binary in the asking
# interpreter's scripts folder, which for this venv has none, and then the PATH's `ninja` may be a
# shell shim (pyenv's) that crashes under the preloaded TSan in every test, so torch's ninja check
# fails there and every test silently ran the dispatch tier instead of the compiled hook.
ninja_dir=$("$base_py" -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null || true)
[[ -n $ninja_dir ]] && export PATH=$ninja_dir:$PATH  # the binary, not a shell shim around it
ASAN_OPTIONS=detect_leaks=0 LD_PRELOAD=$lib "$PY" -c 'import os; os.environ.pop("LD_PRELOAD")
from deepcontext.capture.torch_ops import _build_main; _build_main()' ||
  echo "== $kind: the torch operator hook did not build; the tests say what that costs" >&2

# Address-space randomization off for the run, where the system lets a process turn it off: GCC
# 12's sanitizer runtimes map their shadow memory at fixed addresses, and a process whose
# randomized mappings lie in the way can die by SIGSEGV while the runtime starts, before main,
# with no output (google/sanitizers#1614, llvm/llvm-project#57653; KNOWN.md A4). The setting is
# inherited by every process the tests start. (Probed and run without the runtime preloaded:
# setarch and env are not built for it, and bash crashes under a preloaded TSan.)
norand=()
if setarch "$(uname -m)" -R true 2>/dev/null; then
  norand=(setarch "$(uname -m)" -R)
else
  echo "== $kind: address-space randomization stays on (setarch -R is not allowed here)" >&2
fi

reports=$(mktemp -d "${TMPDIR:-/tmp}/dc-$kind-reports.XXXXXX")
export LD_PRELOAD=$lib${LD_PRELOAD:+:$LD_PRELOAD}
export DEEPCONTEXT_SANITIZER=$kind  # tests that cannot run under a sanitizer skip with a reason
common="log_path=$reports/report"  # one file per reporting process; stderr stays the program's
if [[ $kind == asan ]]; then
  # detect_leaks=0: CPython, torch and JAX keep allocations until exit on purpose, and the core's
  #   process-lifetime statics are never destroyed by design; leak reports would be noise.
  # abort_on_error=1: a report ends the process by SIGABRT, which no test takes for success.
  # handle_segv=0: the tests check how a crashing program ends (killed by SIGSEGV, faulthandler's
  #   dump, the last flush kept: tests/reliability/test_process_end.py); ASan's own SEGV handler
  #   would turn that into "exit 1". A crash in the core still fails its test.
  export ASAN_OPTIONS="$common:detect_leaks=0:abort_on_error=1:handle_segv=0"
  # halt_on_error=1 with the build's -fno-sanitize-recover: the first UB finding stops the process.
  export UBSAN_OPTIONS="$common:halt_on_error=1:abort_on_error=1:print_stacktrace=1"
else
  # suppressions: third-party code only (CPython, torch, libgomp...), each with its reason.
  # report_signal_unsafe=1: a non-async-signal-safe call inside our signal handler is a finding.
  # second_deadlock_stack=1: full lock-order reports.
  # die_after_fork=0: the tests fork multi-threaded parents (multiprocessing, DataLoader workers)
  #   whose children start threads; TSan cannot follow such a child and would kill it, failing
  #   tests for a TSan limit. The children still run instrumented; fork itself is what is tested.
  export TSAN_OPTIONS="$common:suppressions=$PWD/$here/tsan.supp:report_signal_unsafe=1:second_deadlock_stack=1:die_after_fork=0"
fi

# Tests left out of this run only (the ordinary suite still runs them), each with its reason:
# one that cannot run under this sanitizer, or one that hits a real bug of the core, listed in
# KNOWN.md with the exact report until the bug is fixed.
known=()
while read -r test why; do
  [[ -z $test || $test == \#* ]] && continue
  echo "== $kind: leaving out $test (${why#\# })" >&2
  if [[ $test == *::* ]]; then
    known+=(--deselect "$test")
  else
    known+=(--ignore "$test")  # a whole file: not even imported (collection itself would fail)
  fi
done < "$here/known-$kind.txt"

status=0
# faulthandler: a crash of the test process itself still shows where it was.
pytest=("$PY" -X faulthandler -m pytest -q -p no:cacheprovider "${known[@]}" "$@")
if ((${#norand[@]})); then
  LD_PRELOAD= "${norand[@]}" env LD_PRELOAD="$LD_PRELOAD" "${pytest[@]}" || status=$?
else
  "${pytest[@]}" || status=$?
fi
shopt -s nullglob
found=("$reports"/report*)
if ((${#found[@]})); then
  echo "== $kind: ${#found[@]} process(es) reported; the reports:" >&2
  for f in "${found[@]}"; do echo "--- $f" >&2; cat "$f" >&2; done
  status=1
else
  echo "== $kind: no sanitizer reports" >&2
fi
rm -rf "$reports"
exit $status
