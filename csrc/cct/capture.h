// The capture core's interface: lifecycle, the operator hot path, and what the binding and the
// GPU layer ask of it. Per-thread state lives in the registry (registry.h), the tree in tree.h.
#pragma once
#include <cstdint>
#include <string>
#include <sys/types.h>

namespace dc {

struct Options {
  bool python = true;         // Python frames in every context
  bool ops = true;            // operator layer (fed by the torch hook or the dispatch tier)
  bool native = false;        // C/C++ frames spliced into each context
  bool sample = true;         // CPU-time sampler
  double sample_interval = 0.01;  // seconds of thread CPU time per sample
};

// Lifecycle (GIL held). start() begins a new session epoch.
void start(const Options& opts);
void stop();
bool is_enabled();
// Pause keeps timers and hooks installed but records nothing (schedule wait phases); threads
// seen meanwhile are registered and armed, so they are measured once recording resumes.
void set_paused(bool paused);
// The end of the profiler's own work on the calling thread (monitor.own_work), before capture
// resumes. Linux checks CPU-time timers at the scheduler tick (4 ms), so a sample's signal comes
// up to a tick after its expiry (and can carry more intervals as overrun): an expiry in the
// last tick of the own work would be charged to the program's line where the signal lands. It
// is dropped. (A schedule's wait keeps its pending expiries: the active steps' own expiries that
// land in the next wait are lost the same way, and the two cancel.)
void drop_pending_sample();
// Zeroes every metric, keeping the nodes (a new session).
void reset_metrics();
// Schedules: save the metrics when a warm-up begins, restore them when it ends.
void checkpoint_metrics();
void rollback_metrics();
// Registers the calling thread (timer included); called from Python for every thread.
void register_current_thread();
// Registers another thread that runs Python, by pthread id and kernel tid.
void register_thread(unsigned long pthread_id, pid_t tid);
// The profiler's own threads (the flusher): never measured.
void ignore_thread(pid_t tid);

// Hot paths, callable without the GIL.
// flags (c_api.h's dc_op_flags): DC_OP_BACKWARD for an autograd node, DC_OP_SCOPE for a
// record_function scope (USER_SCOPE), whose body runs after the frame that opened it has
// returned (ScopeAnchor), DC_OP_AFTER_NODE for an operator the autograd engine runs after the
// node it ran last on this thread (placed under that node). The torch hook calls it directly
// (dc_api::op_enter).
void op_enter(const char* name, uint64_t handle, int64_t seq_nr, uint64_t rf_tid,
              uint64_t fwd_tid, int flags = 0);
// An operator a thread runs for another thread's operator `issuer` (a node id): a backend's
// worker running the collective the issuing thread enqueued. Its node, its nested operators
// and its thread's samples go under `issuer`; closed by op_exit(handle) like any operator.
void op_enter_linked(const char* name, uint64_t handle, uint32_t issuer);
// seq_consumed: how many sequence numbers autograd nodes took while the op ran (from the op's
// own), 0 if none, -1 if the caller cannot tell (then the number was recorded at entry).
void op_exit(uint64_t handle, int seq_consumed = -1);
// Whether an operator event fetches the lines its lookups will read ahead of them (on, unless a
// benchmark measures what that buys: DEEPCONTEXT_OP_DIAG=no-prefetch).
void set_op_prefetch(bool on);
// Opens a non-operator scope (frame kind `kind`, e.g. DC_KIND_MODULE) on the operator stack,
// closed by op_exit(handle): later ops and samples nest under it. `skip_py` innermost Python
// frames (the hook that calls this) are left out of its context. Records no op metrics.
void scope_enter(int kind, const char* name, const char* extra, uint64_t handle, int skip_py);
uint32_t current_node();
uint32_t child_node(uint32_t parent, int kind, const char* name, const char* extra);
void add_metric(uint32_t node, uint32_t metric, double value);
uint32_t metric_id(const char* name);
void add_note(const std::string& text);
// The session epoch events are stamped with (GPU launches compare it when records arrive).
uint32_t epoch();

// Folds every thread's buffered samples into the tree.
void drain_samples();
// Notes accumulated for the profile metadata.
std::string notes_joined();
// The operator layer's clock (cct/clock.h): "tsc" or "monotonic"; chosen at the first start().
const char* op_clock();
uint64_t dropped_samples();
// Native stacks unwound for operator events and launches, unwinds that a remembered stack
// replaced, and stacks remembered (all threads, since the process began).
void native_stack_memo(uint64_t* unwound, uint64_t* recalled, uint64_t* learned);
size_t live_thread_states();  // registry states not yet reaped (tests)

// Observer for the monitor's Python callbacks on the torch.op domain (phase 0 enter, 1 exit).
using OpObserver = void (*)(const char* name, int phase, uint32_t node);
void set_op_observer(OpObserver obs);

// Extra per-sample counters (e.g. CPU perf counters), read by the SIGPROF handler on the
// sampled thread: `read(out, max)` must be async-signal-safe, writes up to `max` deltas since the
// thread's previous sample and returns how many; the drain charges out[i] to metric_ids[i].
using SampleCounterFn = int (*)(uint64_t* out, int max);
void set_sample_counters(SampleCounterFn read, const uint32_t* metric_ids, int n);

}  // namespace dc
