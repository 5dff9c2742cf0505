// Native (C/C++) frames of the calling thread and their splice with the Python frames: the
// pieces behind `--context ...,native` (docs/native-frames.md).
//
// Hot path (per event): backtrace() + dc_walk_python(). Cold path (once per unique address or
// unique stack, at flush/report time): splice() and symbolize().
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "python_walk.h"

namespace dc::native {

// Loads the unwinder (libunwind by dlopen, else libgcc's _Unwind_Backtrace) and the
// interpreter's address ranges. Idempotent and thread-safe; call it once from normal code
// (capture start) before backtrace() can run in a signal handler, since dlopen is not
// async-signal-safe.
void init();

// Which unwinder backtrace() uses: "libunwind" or "libgcc".
const char* unwinder_name();

// Most frames one backtrace returns (its scratch buffer is on the stack: ~2 KB).
constexpr int kMaxFrames = 256;

// Fills `ips` with the calling thread's native return addresses, innermost first, leaving out
// backtrace's own frame and `skip` more (skip <= 4). Returns the count, at most
// min(max, kMaxFrames); reaching that limit means the stack may be truncated.
//  - libunwind (`unw_backtrace`, per-thread cache): about 6 ns per frame. It only reads the
//    stack and the libraries' unwind tables and does not allocate after its cache is warm, so it
//    is safe from an operator callback and, after init(), from a signal handler, except over
//    code that may hold malloc's or the loader's locks: its TLS access can allocate after a
//    dlopen (the sampler's may_unwind, csrc/cct/sampler.cpp, refuses those samples).
//  - libgcc fallback (`_Unwind_Backtrace`): about 110 ns per frame; NOT async-signal-safe (it
//    may take the unwinder's object lock and allocate), fine from an operator callback.
int backtrace(uintptr_t* ips, int max, int skip);

// Same, forcing one unwinder (benchmarks and tests): use_libunwind false selects libgcc.
int backtrace_with(bool use_libunwind, uintptr_t* ips, int max, int skip);

// The calling thread's return addresses as backtrace() gives them from the caller's own frame
// (skip 0: ips[0] is in the caller), with the stack address each was read from, by libgcc's
// unwinder (slow: for memoizing a stack's shape, not per event). x86-64 only (elsewhere 0); a
// signal frame ends the walk.
int backtrace_slots(uintptr_t* ips, uintptr_t* slots, int max, int skip);

// After a library is unloaded: drops libunwind's cached frame shapes and the module map.
void flush_caches();

// True when `ip` (a return address, so looked up at ip-1) lies inside the interpreter's eval
// function `_PyEval_EvalFrameDefault` (its hot and .cold parts).
bool is_eval_frame(uintptr_t ip);

// One resolved address. Every field is filled, whatever is known: an address no symbol covers
// gets name "libfoo.so+0x1234" (or "0x7f..." outside any mapped object) and resolved = false.
struct Symbol {
  std::string name;     // demangled C++ name (clone suffixes kept, e.g. " [clone .cold]")
  std::string library;  // path of the object that maps the address ("" if none)
  uintptr_t offset = 0; // address - the object's load base
  std::string file;     // source file from DWARF (libdw), "" where there is no line info
  int line = 0;         // source line, 0 where unknown
  bool resolved = false;
};

// Symbolizes a native address, lazily and cached per unique address (thread-safe; takes a
// lock and may read files: never call it on a hot path). `return_address` (true for every
// frame backtrace() returns) looks the symbol and line up at ip-1, the call instruction.
Symbol symbolize(uintptr_t ip, bool return_address = true);

// "libdw" when source lines can be read, "" when not (no libdw.so.1: symbols only).
const char* line_reader_name();

// One element of a spliced path: a Python frame (index into the `py` array given to splice,
// which is innermost first) or a native frame (its return address).
struct SpliceItem {
  bool python;
  int py_index;   // python == true
  uintptr_t ip;   // python == false
};

enum class SpliceStatus {
  kExact,       // one eval frame per run of Python frames
  kOffByOne,    // an innermost eval frame without its Python frames (call being entered/left)
  kTruncated,   // a stack was cut at its maximum depth; paired innermost first
  kNoPython,    // no Python frames: native frames only
  kMismatch,    // could not pair: the result is the pure Python path (count these)
};
const char* splice_status_name(SpliceStatus s);

struct SpliceOptions {
  bool native_truncated = false;  // backtrace() returned its maximum
  bool python_truncated = false;  // dc_walk_python() returned its maximum
  // Native frames outside the outermost eval frame (_start, __libc_start_main, thread start)
  // are process boilerplate; they are dropped unless this is set.
  bool keep_outer = false;
};

// Interleaves a native stack and a Python stack (both innermost first) into one path,
// outermost first. Eval-loop frames are replaced by the Python frames they run (3.10 one per
// eval frame; 3.11+ the frames up to and including the next entry frame), other interpreter
// frames are dropped (except a small whitelist such as take_gil, time_sleep, gc_collect_main),
// and frames of DeepContext's own objects (add_self_object) are dropped. Pairing is outermost
// first, so an eval frame entered or left without its Python frame is tolerated at the
// innermost end. On any other disagreement (a run of Python frames without its eval frame, eval
// frames without any Python frame) the pure Python path is returned with status kMismatch
// rather than a wrong mix.
std::vector<SpliceItem> splice(const uintptr_t* ips, int n_ips, const dc_raw_frame* py, int n_py,
                               SpliceStatus* status = nullptr, const SpliceOptions& opts = {});

// Declares the object (shared library) containing `any_address` as DeepContext's own: its
// frames (capture code, bindings, the torch hook) never appear in a spliced path. The core
// registers itself in init().
void add_self_object(uintptr_t any_address);

// Recognises PyTorch's operator entry `at::_ops::<op>::call(...)` (its outermost frame is one
// operator invocation; `redispatch` frames are the same op further down and do not match).
// Sets *op_name to the generated struct name <op>: the operator name plus "_" + overload name
// when it has one, e.g. "mm", "add_Tensor", "add__Tensor" (aten::add_.Tensor).
bool op_call_frame(const Symbol& sym, std::string* op_name);

// Whether an `at::_ops` struct name (from op_call_frame) can be the recorded operator `recorded`
// ("aten::add" or "add"): equal, or equal to "<op>_<Overload>". The overload split is
// ambiguous for names ending in "_" (aten::add vs aten::add_), so use it to confirm an
// operator already expected at that depth, not to name one.
bool op_name_matches(const std::string& op_struct, const std::string& recorded);

}  // namespace dc::native
