// Test and benchmark face of the native-stack pieces, the `_core.testing` submodule registered
// at the end of csrc/bindings/core.cpp; the production API does not expose these.
#include "native_bindings.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>

#include "native_stack.h"
#include "python_walk.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace dc::native {
namespace {

constexpr int kMaxNative = kMaxFrames;
constexpr int kMaxPython = 256;

using PathRow = std::tuple<std::string, std::string, std::string, int>;

PathRow describe(const SpliceItem& it, const dc_raw_frame* py) {
  if (it.python) {
    char file[1024], name[512];
    int line = dc_describe_code(py[it.py_index].code, py[it.py_index].offset, file, sizeof(file),
                                name, sizeof(name));
    return {"python", name, file, line};
  }
  Symbol s = symbolize(it.ip);
  return {"native", s.name, s.file.empty() ? s.library : s.file, s.line};
}

// The calling thread's spliced path, outermost first, with the splice status.
std::pair<std::string, std::vector<PathRow>> callpath(int skip) {
  uintptr_t ips[kMaxNative];
  int n = backtrace(ips, kMaxNative, skip);
  dc_raw_frame py[kMaxPython];
  int np = dc_walk_python(dc_this_thread_state(), py, kMaxPython);
  SpliceOptions o;
  o.native_truncated = n == kMaxNative;
  o.python_truncated = np == kMaxPython;
  SpliceStatus st;
  auto items = splice(ips, n, py, np, &st, o);
  std::vector<PathRow> rows;
  rows.reserve(items.size());
  for (const auto& it : items) rows.push_back(describe(it, py));
  return {splice_status_name(st), std::move(rows)};
}

double ns_per(std::chrono::steady_clock::time_point t0, int iterations) {
  auto dt = std::chrono::steady_clock::now() - t0;
  return std::chrono::duration<double, std::nano>(dt).count() / iterations;
}

// Hot-path costs measured in C++ (no Python call in the loop), from the caller's stack.
nb::dict bench(int iterations, bool use_libunwind) {
  uintptr_t ips[kMaxNative];
  dc_raw_frame py[kMaxPython];
  int n = 0, np = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) n = backtrace_with(use_libunwind, ips, kMaxNative, 0);
  double bt = ns_per(t0, iterations);
  void* ts = dc_this_thread_state();
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) np = dc_walk_python(ts, py, kMaxPython);
  double walk = ns_per(t0, iterations);
  size_t items = 0;
  SpliceStatus st = SpliceStatus::kExact;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) items = splice(ips, n, py, np, &st).size();
  double sp = ns_per(t0, iterations);
  nb::dict d;
  d["unwinder"] = use_libunwind ? unwinder_name() : "libgcc";
  d["native_frames"] = n;
  d["python_frames"] = np;
  d["path_items"] = items;
  d["status"] = splice_status_name(st);
  d["backtrace_ns"] = bt;
  d["walk_ns"] = walk;
  d["splice_ns"] = sp;
  return d;
}

}  // namespace

void bind_testing(nb::module_& m) {
  m.def("native_backtrace", [](int max, int skip) {
    std::vector<uintptr_t> ips(static_cast<size_t>(std::max(0, std::min(max, kMaxFrames))));
    ips.resize(static_cast<size_t>(backtrace(ips.data(), static_cast<int>(ips.size()), skip)));
    return ips;
  }, "max"_a = kMaxNative, "skip"_a = 0,
     "Native return addresses of the calling thread, innermost first (this call's own frames "
     "included).");
  m.def("symbolize", [](uintptr_t ip, bool return_address) {
    Symbol s = symbolize(ip, return_address);
    return std::make_tuple(s.name, s.library, s.offset, s.file, s.line, s.resolved);
  }, "ip"_a, "return_address"_a = true,
     "(name, library, offset, file, line, resolved) of a native address, cached per address.");
  m.def("native_is_eval_frame", &is_eval_frame, "ip"_a,
        "Whether a return address lies in the interpreter's eval loop.");
  m.def("native_callpath", [](bool with_status) -> nb::object {
    auto r = callpath(0);
    if (with_status) return nb::cast(r);
    return nb::cast(r.second);
  }, "with_status"_a = false,
     "Spliced path of the calling thread, outermost first: (kind, name, file, line) tuples; "
     "native frames give the source file where DWARF has it, else the library.");
  m.def("native_splice", [](const std::vector<uintptr_t>& ips, const std::vector<bool>& entries,
                            bool native_truncated, bool python_truncated, bool keep_outer) {
    // Synthetic Python frames: only the entry bit matters to the splice.
    std::vector<dc_raw_frame> py(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) py[i].entry = entries[i] ? 1 : 0;
    SpliceOptions o{native_truncated, python_truncated, keep_outer};
    SpliceStatus st;
    auto items = splice(ips.data(), static_cast<int>(ips.size()), py.data(),
                        static_cast<int>(py.size()), &st, o);
    std::vector<std::pair<std::string, uintptr_t>> out;
    for (const auto& it : items)
      out.emplace_back(it.python ? "python" : "native",
                       it.python ? static_cast<uintptr_t>(it.py_index) : it.ip);
    return std::make_pair(std::string(splice_status_name(st)), out);
  }, "ips"_a, "entries"_a, "native_truncated"_a = false, "python_truncated"_a = false,
     "keep_outer"_a = false,
     "Splice given return addresses (innermost first) with synthetic Python frames given by "
     "their entry bits (innermost first): (status, [(kind, ip or python index)]).");
  m.def("native_op_call_frame", [](const std::string& demangled) -> nb::object {
    Symbol s;
    s.name = demangled;
    std::string op;
    if (!op_call_frame(s, &op)) return nb::none();
    return nb::str(op.c_str());
  }, "name"_a, "The <op> of an 'at::_ops::<op>::call(...)' name, else None.");
  m.def("native_op_name_matches", &op_name_matches, "op_struct"_a, "recorded"_a);
  m.def("native_flush_caches", &flush_caches);
  m.def("native_bench", &bench, "iterations"_a = 100000, "use_libunwind"_a = true,
        "Per-call ns of backtrace, Python walk and splice from the caller's stack.");
}

}  // namespace dc::native
