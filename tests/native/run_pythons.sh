#!/usr/bin/env bash
# The frame walker's tests (tests/native) on every CPython this machine has (docs/native-frames.md,
# "Other interpreters"). The walker reads each version's own frame layout and entry-frame rules,
# so one interpreter passing says nothing about the others.
#
#   tests/native/run_pythons.sh [VERSION...]     default: 3.10 3.11 3.12 3.13
#
# Per version: a standalone _core built with CMake for that interpreter (GPU capture off: the
# walker does not need it), pytest and nanobind installed with pip --target beside it, then
# tests/native against it through DEEPCONTEXT_CORE_DIR (the torch test skips without torch).
# A version found nowhere (pyenv, PATH) is skipped, saying so; one that is the interpreter of the
# main suite ($PYTHON, default python3) is skipped too, as the main suite runs the same tests on it.
# Exit status: 1 when any version's tests failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
versions=("$@")
((${#versions[@]})) || versions=(3.10 3.11 3.12 3.13)
main=$(${PYTHON:-python3} -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)
pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
jobs=$(nproc 2>/dev/null || echo 2)

find_python() {
  local v=$1 p
  for p in "$pyenv_root"/versions/"$v".*/bin/python"$v"; do
    [[ -x $p ]] && { echo "$p"; return; }
  done
  p=$(command -v "python$v") && echo "$p"
}

mkdir -p build/pythons
failed=() passed=() skipped=()
for v in "${versions[@]}"; do
  py=$(find_python "$v")
  if [[ -z $py ]]; then
    echo "== CPython $v: not on this machine, skipped"; skipped+=("$v (absent)"); continue
  fi
  if [[ $v == "$main" ]]; then
    echo "== CPython $v: the main suite's interpreter, skipped here"; skipped+=("$v (main suite)"); continue
  fi
  start=$SECONDS
  out=build/pythons/$v
  echo "== CPython $v: $py"
  # pip --target, not a venv: nothing to create, and the folder is this version's alone.
  if ! "$py" -m pip install -q --disable-pip-version-check --target "$out/site" \
      "pytest>=8" pytest-timeout nanobind >"$out.pip.log" 2>&1; then
    cat "$out.pip.log"; echo "== CPython $v: FAILED (cannot install pytest/nanobind)"
    failed+=("$v"); continue
  fi
  if ! { PYTHONPATH=$PWD/$out/site cmake -S . -B "$out/core" -DPython_EXECUTABLE="$py" \
           -DCMAKE_BUILD_TYPE=Release -DDEEPCONTEXT_GPU=OFF >"$out/cmake.log" 2>&1 &&
         cmake --build "$out/core" --target _core -j "$jobs" >>"$out/cmake.log" 2>&1; }; then
    tail -40 "$out/cmake.log"; echo "== CPython $v: FAILED (core build)"; failed+=("$v"); continue
  fi
  if PYTHONPATH=$PWD/$out/site DEEPCONTEXT_CORE_DIR=$PWD/$out/core \
      "$py" -m pytest -q -p no:cacheprovider tests/native; then
    passed+=("$v")
    echo "== CPython $v: passed ($((SECONDS - start)) s)"
  else
    failed+=("$v")
    echo "== CPython $v: FAILED ($((SECONDS - start)) s)"
  fi
done
echo "== frame walker on other CPythons: passed: ${passed[*]:-none}; skipped: ${skipped[*]:-none}; failed: ${failed[*]:-none}"
((${#failed[@]} == 0))
