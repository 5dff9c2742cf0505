"""Which run-time libcupti a build may read records from (csrc/gpu/cupti_compat.h): the record
layouts come from the build's CUPTI headers, the library from wherever it is found at run time.
Compiled here with the system C++ compiler; no GPU or CUDA toolkit needed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

GPU_SRC = Path(__file__).resolve().parents[2] / "csrc" / "gpu"
DRIVER = r"""
#include <cstdio>
#include <cstdlib>
#include "cupti_compat.h"
int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    auto built = (uint32_t)std::strtoul(argv[i], nullptr, 10);
    auto run = (uint32_t)std::strtoul(argv[i + 1], nullptr, 10);
    std::printf("%s\n", dc::gpu::cupti_version_mismatch(built, run, "/lib/libcupti.so").c_str());
  }
}
"""


@pytest.fixture(scope="module")
def check(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    tmp = tmp_path_factory.mktemp("cupti_compat")
    (tmp / "driver.cpp").write_text(DRIVER)
    subprocess.run([cxx, "-std=c++17", "-Wall", "-Werror", f"-I{GPU_SRC}", str(tmp / "driver.cpp"),
                    "-o", str(tmp / "driver")], check=True, capture_output=True, text=True)

    def run(built: int, runtime: int) -> str:
        out = subprocess.run([str(tmp / "driver"), str(built), str(runtime)], check=True,
                             capture_output=True, text=True).stdout
        return out.removesuffix("\n")

    return run


@pytest.mark.parametrize(("built", "runtime"), [
    (130001, 130001),  # the headers' own release
    (130001, 130000),  # CUDA 13.0 and 13.0 Update 1: a CUPTI patch level, same layouts
    (130001, 130100),  # a newer CUDA 13 release appends fields only
    (28, 28), (19, 28),  # CUDA 12's running numbers: 12.0 headers, 12.9 library
])
def test_a_library_of_the_same_major_at_least_as_new_is_read(check, built, runtime):
    assert check(built, runtime) == ""


def test_a_cuda_12_library_under_cuda_13_headers_is_refused_in_one_line(check):
    assert check(130001, 28) == (
        "GPU capture off: /lib/libcupti.so is CUPTI 28 (CUDA 12) but this build reads the records "
        "of CUPTI 130001 (CUDA 13); use a libcupti of CUDA 13 at least that new (set "
        "DEEPCONTEXT_CUPTI_LIB) or rebuild deepcontext against this CUDA's headers")


@pytest.mark.parametrize(("built", "runtime", "have"), [
    (28, 130001, "CUDA 13"),  # a CUDA 13 library under CUDA 12 headers
    (28, 19, "CUDA 12"),  # older than the headers: it does not write the fields read
    (130001, 140000, "CUDA 14"),  # a future major
    (130001, 7, "CUDA ?"),  # older than anything supported
])
def test_other_majors_and_older_releases_are_refused(check, built, runtime, have):
    reason = check(built, runtime)
    assert reason.startswith(f"GPU capture off: /lib/libcupti.so is CUPTI {runtime} ({have}) ")
    assert "\n" not in reason


def test_the_cuda_13_headers_of_this_machine_are_cuda_13(tmp_path):
    """The check reads CUPTI_API_VERSION from the headers the core is built with."""
    headers = sorted(p for p in Path("/usr/local").glob("cuda-*/include")
                     if (p / "cupti_version.h").is_file())
    cxx = shutil.which("g++") or shutil.which("c++")
    if not headers or cxx is None:
        pytest.skip("no CUPTI headers (or no C++ compiler) here")
    (tmp_path / "v.cpp").write_text('#include <cstdio>\n#include <cupti_version.h>\n'
                                    '#include "cupti_compat.h"\nint main() { std::printf("%d", '
                                    'dc::gpu::cupti_cuda_major(CUPTI_API_VERSION)); }\n')
    subprocess.run([cxx, "-std=c++17", f"-I{headers[0]}", f"-I{GPU_SRC}", str(tmp_path / "v.cpp"),
                    "-o", str(tmp_path / "v")], check=True, capture_output=True, text=True)
    major = subprocess.run([str(tmp_path / "v")], capture_output=True, text=True).stdout
    assert major == headers[0].parent.name.removeprefix("cuda-").split(".")[0]
