// Native frames in the calling context: the spliced Python + C/C++ path of an event, with the
// operator placed where the native stack enters it (`at::_ops::<op>::call`).
#pragma once
#include <cstdint>
#include <functional>

#include "../callpath/python_walk.h"
#include "tree.h"

namespace dc {

constexpr int kMaxNative = 128;

// How an event's Python frames become tree frames (live on this thread, or copied by a sample).
using PythonFrameFn = std::function<uint32_t(int py_index)>;

struct NativePlace {
  uint32_t node = 0;      // the context node the event hangs under
  uint32_t py_node = 0;   // innermost Python node on the path (0: none)
  int cut = -1;           // outermost-first depth of the op's call frame in the native stack
  bool spliced = false;   // false: the stacks could not be paired; use the Python-only path
};

// Top-level event (no operator open on this thread). `ips` innermost first. With `op_name`,
// native frames stop at that operator's call frame (the op node goes in its place); without,
// every native frame down to the event is kept (CPU samples, GPU launches). `t` holds the tree lock.
// `leaf_is_pc`: ips[0] is an interrupted instruction (a CPU sample), not a return address; it
// is keyed by its function so that the tree does not grow with every sampled instruction.
NativePlace place_top_level(TreeWriter& t, const uintptr_t* ips, int n_ips, const dc_raw_frame* py,
                            int n_py, const PythonFrameFn& py_frame, const char* op_name,
                            bool leaf_is_pc = false);

// Event inside an open operator whose call frame sits at outermost-first depth `outer_cut`:
// the native frames below that frame (down to `op_name`'s call frame, if given) go under
// `outer_node`. A sample whose unwind stopped before reaching the operator (JIT-generated or
// hand-written assembly kernels without unwind tables) gets a "<native unwind incomplete>"
// marker and its leaf function under the operator. `t` holds the tree lock.
NativePlace place_nested(TreeWriter& t, uint32_t outer_node, int outer_cut, const uintptr_t* ips,
                         int n_ips, const char* op_name, bool leaf_is_pc = false);

// A sample known only by its interrupted instruction `pc` (the whole unwind is missing or was
// not taken): a "<native unwind incomplete>" marker under `base`, its leaf function under that.
uint32_t place_leaf_only(TreeWriter& t, uint32_t base, uintptr_t pc);

// A thread that runs no Python and no operator (an OpenMP/intra-op worker): its native frames,
// outermost first, under `base` (its "[thread] <name>" node). `t` holds the tree lock.
uint32_t place_native_only(TreeWriter& t, uint32_t base, const uintptr_t* ips, int n_ips,
                           bool leaf_is_pc);

// Looks up, outside the tree lock, the symbols that placing `ips` will need (symbolizing reads
// files: never under the lock every event path takes). Call before taking a TreeWriter.
void native_warm_symbols(const uintptr_t* ips, int n_ips, bool leaf_is_pc);

// Events whose stacks could not be spliced (they fell back to the Python-only path).
uint64_t splice_mismatches();

}  // namespace dc
