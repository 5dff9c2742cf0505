// The thread registry: the one owner of every thread's state, whoever registered it (the thread
// itself at its first operator or Python registration, Python's thread list, the interpreter's
// thread list, the /proc scan). Each state moves through one lifecycle:
//
//   seen      registered; no timer (capture stopped, or a role that needs none)
//   armed     measured: a CPU-time timer (Signaled) or a clock baseline (Polled)
//   disarmed  capture stopped: timer deleted, ring kept until drained
//   reaped    its thread is gone: ring folded in, timer deleted, id unmapped; state reused
//
// Every transition happens here, under the registry lock. The thread's own exit hook only sets
// `exited`; the reaper (sampler thread) does the rest once the thread id is gone. Nothing is
// ever freed, so a pointer to a state stays a valid state.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "thread_state.h"

namespace dc::registry {

// The state of thread `tid`, or null. Lock-free and async-signal-safe (the SIGPROF handler).
ThreadState* lookup(pid_t tid);

// The calling thread's state, once it has one (`__thread`: a plain pointer, no TLS wrapper call
// on the operator hot path).
extern __thread ThreadState* t_state;

// The calling thread's state (Signaled), registered, and armed while capture runs, on first use.
ThreadState* register_self();
inline ThreadState* self() {
  ThreadState* s = t_state;
  return s != nullptr ? s : register_self();
}

// The calling thread's state if it has one, else null (never registers).
inline ThreadState* current() { return t_state; }

// A thread that runs Python, seen from another thread (Python's or the interpreter's list):
// Signaled, with the CPU clock of its pthread.
void adopt(pid_t tid, unsigned long pthread_id);
// A thread found by the /proc scan that we have not seen run Python or an operator: Polled
// under "[thread] <name>" (comm).
void adopt_worker(pid_t tid, const char* name);
// The profiler's own threads: never measured.
void ignore(pid_t tid);

// Capture start and stop: every live state armed for its role / disarmed.
void arm_all();
void disarm_all();
bool armed_wanted();
// The calling thread's timer, if armed, drops an expiry its CPU time has passed and the tick has
// not yet signalled (capture.h's drop_pending_sample).
void drop_self_pending_expiry();

// Sampler thread upkeep: new thread ids under /proc/self/task become Polled workers; states
// whose thread is gone are drained and reaped.
void scan_tasks();
void reap();

// Folds every state's buffered samples into the tree (never from a handler or a TLS
// destructor). `drain` is the sampler's fold of one state (sampler.cpp).
void drain_all();

// Polled workers: their CPU time since the last poll, through `charge(state, seconds)`.
void poll_workers(const std::function<void(ThreadState*, double)>& charge);

uint64_t dropped_samples();
// Native stacks unwound for operator events and launches, events that took a remembered stack
// instead, and stacks remembered, over every thread (stack_paths.h).
void stack_memo_counts(uint64_t* unwound, uint64_t* recalled, uint64_t* learned);
size_t live_states();
uint64_t refused_registrations();  // thread ids the registry could not map (noted in metadata)

pid_t gettid_();

}  // namespace dc::registry
