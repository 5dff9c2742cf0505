// Shared by the capture translation units (threads, sampler, context, capture); not an API.
#pragma once
#include <sys/types.h>
#include <time.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "capture.h"

namespace dc::detail {

extern std::atomic<bool> g_enabled;
extern Options g_opts;
extern uint32_t m_cpu_time, m_op_time, m_op_count;
int64_t now_ns();

// threads.cpp: the registry of per-thread states, keyed by kernel thread id.
extern thread_local ThreadState* t_state;
pid_t gettid_();
ThreadState* lookup(pid_t tid);  // lock-free: the signal handler uses it
ThreadState* get_or_make(pid_t tid);
ThreadState* this_thread();      // the calling thread's state, registered (and timed) on first use
std::mutex& registry_mu();
std::vector<ThreadState*>& all_threads();  // every state ever made; registry_mu() held

// sampler.cpp: per-thread CPU-time timers and their signal handler.
extern bool g_native_in_handler;
void arm_timer(ThreadState* s, clockid_t clock);
void install_handler();
void drain_locked(Tree& t, ThreadState* s);  // folds s's buffered samples in (tree lock held)

// context.cpp: where an event is, as a tree node.
// Where frame descriptions come from: the live stack (op path) or a sample's copies (drain).
struct Describer {
  const Sample* sample = nullptr;  // null: the frames are live on this thread
  uint32_t frame(Tree& t, const dc_raw_frame* buf, int i) const {
    if (sample == nullptr) return t.python_frame(buf[i], true);
    const CodeInfo* info = nullptr;
    for (int j = 0; j < sample->n_new; ++j)
      if (sample->new_index[j] == i) info = &sample->news[j];
    return t.python_frame(buf[i], false, info);
  }
};
// The context node for Python frames `buf` (innermost first), under the innermost open op when
// `has_op`. Sets *py_node to the innermost Python node of that context. `cache`: the owner's
// prefix cache, or null.
uint32_t node_for(Tree& t, const Describer& d, ThreadState* cache, const dc_raw_frame* buf, int n,
                  bool has_op, uint32_t op_node, uint32_t op_py_node, const void* op_frame,
                  uint32_t* py_node);
// The context with native frames spliced in; false when that does not apply (no native stack,
// stacks that cannot be paired, or Python frames newer than the open operator).
bool native_place(Tree& t, const Describer& d, const uintptr_t* ips, int n_ips,
                  const dc_raw_frame* buf, int n, const OpEntry* top, const char* op_name,
                  NativePlace* out, bool leaf_is_pc = false);

// The memo key of a native placement (ThreadState::native_memo): a hash of the native stack,
// the Python frames' identities (top-level events) or the open op's node and cut (nested ones),
// and the op's name (null for launches and probes). 0: not a native placement (no native
// stack, or Python frames newer than the open op: the Python-only path applies).
uint64_t native_key(const uintptr_t* ips, int n_ips, const dc_raw_frame* buf, int n,
                    const OpEntry* top, const char* op_name);

}  // namespace dc::detail
