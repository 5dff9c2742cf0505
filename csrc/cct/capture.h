// Per-thread capture state: the operator shadow stack, the CPU-time sampler's ring, and the
// functions that turn "where this thread is now" into a tree node.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <sys/types.h>
#include <time.h>

#include "../callpath/python_walk.h"
#include "../perf/perf_counters.h"
#include "native_context.h"
#include "tree.h"

namespace dc {

constexpr int kMaxPyDepth = 256;  // deeper stacks keep their innermost frames under <truncated>
constexpr int kMaxOpDepth = 128;
constexpr int kRing = 64;         // samples buffered per thread between drains (lazily paged in)
constexpr int kMaxNew = 48;       // frames a sample can describe (first sightings)

struct OpEntry {
  uint32_t node;         // while `pending`: the ordinary parent context
  uint32_t frame;        // the op's frame id
  bool pending;          // an engine wrapper waiting for its backward node
  uint32_t py_node;      // innermost Python context node of this op
  const void* py_frame;  // innermost interpreter frame when the op began (nullptr: none)
  uint64_t handle;
  int64_t seq_nr;        // >= 0 for a backward node's op (to nest its own re-entries)
  int64_t t0_ns;
  int64_t child_ns;      // time spent in nested ops, subtracted for exclusive op.time
  int native_cut;        // outermost-first native depth of its call frame (-1: none)
  uint32_t epoch;        // session that opened it (see start())
  int64_t fwd_seq;       // forward op's sequence number (-1: none), recorded at exit if consumed
  uint64_t rf_tid;
  bool scope;            // a non-op scope (a module): no op metrics, transparent to op.time
};

struct Sample {
  int n;
  int weight;
  bool has_op;
  uint32_t op_node;
  uint32_t op_py_node;
  const void* op_frame;
  int op_native_cut;
  int n_ips;
  uintptr_t ips[kMaxNative];
  dc_raw_frame frames[kMaxPyDepth];
  int n_new;
  int new_index[kMaxNew];  // frames[new_index[i]] is described by news[i]
  CodeInfo news[kMaxNew];
  perf::Deltas perf;  // CPU counters since the thread's previous sample (--perf)
};

struct ThreadState {
  pid_t tid = 0;
  OpEntry ops[kMaxOpDepth];
  std::atomic<int> depth{0};
  int overflow = 0;  // pushes beyond kMaxOpDepth, ignored but counted so pops stay balanced
  Sample* ring = nullptr;
  std::atomic<uint32_t> head{0}, tail{0};
  std::atomic<uint32_t> dropped{0};
  std::atomic<bool> draining{false};
  timer_t timer{};
  bool has_timer = false;
  perf::ThreadCounters perf;  // opened with the timer when --perf is on
  uint32_t thread_node = 0;  // "[thread] <name>" for threads that run no Python (0: none)
  // Set by the owner once it has unwound outside a signal handler: libunwind is dlopen'ed, so
  // its per-thread cache lives in TLS that glibc allocates (malloc) at a thread's first touch;
  // touched first in the SIGPROF handler, that malloc can deadlock on the interrupted one.
  std::atomic<bool> native_ready{false};
  // Owner-only prefix cache of the last full Python path, outermost first.
  int cache_n = 0;
  dc_raw_frame cache_frame[kMaxPyDepth];  // compared by identity fields, not by hash
  uint32_t cache_node[kMaxPyDepth];
  // How many outermost frames of `buf` (innermost first, n frames) equal the cached path.
  int cached_prefix(const dc_raw_frame* buf, int n) const {
    int common = 0;
    while (common < n && common < cache_n) {
      const dc_raw_frame& a = buf[n - 1 - common];
      const dc_raw_frame& b = cache_frame[common];
      if (a.code != b.code || a.offset != b.offset || a.filename != b.filename ||
          a.firstlineno != b.firstlineno || a.name != b.name)
        break;
      ++common;
    }
    return common;
  }
  // Owner-only cache of operator name -> frame id. Names of backward ops point into reused
  // temporaries, so a hit needs the same pointer and the same text.
  struct OpName {
    const char* ptr = nullptr;
    uint32_t frame = 0;
    std::string text;
  };
  OpName op_names[256];
  // Owner-only cache of (parent, op frame) -> node: nodes are never removed, so a hit is exact.
  struct OpChild {
    uint32_t parent = UINT32_MAX, frame = 0, node = 0;
  };
  OpChild op_children[512];
  // Owner-only memo of native placements: hash of everything a placement depends on (both
  // stacks, the open op, the op's name; see native_key) -> where the event hangs. A splice costs
  // about 1 us, a hit the hash; nodes are never removed, so a hit stays valid (64-bit keys:
  // a collision among a million distinct contexts has odds of about 1 in 10^7).
  struct NativeMemo {
    uint64_t key = 0;  // 0: empty
    uint32_t node = 0, py_node = 0;
    int cut = -1;
  };
  NativeMemo native_memo[512];
};

struct Options {
  bool python = true;         // Python frames in every context
  bool ops = true;            // operator layer (fed by the torch hook or the dispatch tier)
  bool native = false;        // C/C++ frames spliced into each context
  bool sample = true;         // CPU-time sampler
  double sample_interval = 0.01;  // seconds of thread CPU time per sample
};

// Lifecycle (GIL held).
void start(const Options& opts);
void stop();
bool is_enabled();
// Pause keeps timers and hooks installed but records nothing (schedule wait phases).
void set_paused(bool paused);
// Zeroes every metric, keeping the nodes (end of a warm-up phase).
void reset_metrics();
// Registers the calling thread (timer included); called from Python for every thread.
void register_current_thread();
// Registers another thread by pthread id and kernel tid (threads alive when capture starts).
void register_thread(unsigned long pthread_id, pid_t tid);
// The same, unless the thread is known already (periodic scans of the interpreter's threads).
void register_thread_if_new(unsigned long pthread_id, pid_t tid);
// A thread of the process that runs no Python (an OpenMP/intra-op worker, a library's pool),
// found by scanning /proc/self/task: its CPU time is sampled under "[thread] <name>".
void register_native_thread(pid_t tid, const std::string& name);

// Hot paths, callable without the GIL.
void op_enter(const char* name, uint64_t handle, int64_t seq_nr, uint64_t rf_tid,
              uint64_t fwd_tid, bool is_backward);
// seq_consumed: 1 if an autograd node took the op's sequence number during the op, 0 if not,
// -1 if the caller cannot tell (then the number was recorded at entry).
void op_exit(uint64_t handle, int seq_consumed = -1);
// Opens a non-operator scope (kind Module) on the operator stack, closed by op_exit(handle):
// later ops and samples nest under it. `skip_py` innermost Python frames (the hook that calls
// this) are left out of its context. Records no op metrics of its own.
void scope_enter(Kind kind, const char* name, const char* extra, uint64_t handle, int skip_py);
uint32_t current_node();
uint32_t child_node(uint32_t parent, int kind, const char* name, const char* extra);
void add_metric(uint32_t node, uint32_t metric, double value);
uint32_t metric_id(const char* name);
void add_note(const std::string& text);

// Folds every thread's buffered samples into the tree (caller holds tree().mu).
void drain_all_locked();
// Notes accumulated for the profile metadata.
std::string notes_joined();
uint64_t dropped_samples();

// Observer for the monitor's Python callbacks on the torch.op domain (phase 0 enter, 1 exit).
using OpObserver = void (*)(const char* name, int phase, uint32_t node);
void set_op_observer(OpObserver obs);

}  // namespace dc
