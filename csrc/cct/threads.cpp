// The registry of per-thread capture states, found by kernel thread id (lock-free for the
// signal handler) and recycled when threads exit.
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "capture_internal.h"

namespace dc::detail {

thread_local ThreadState* t_state = nullptr;

namespace {

// Thread registry: tid -> state, readable lock-free from the signal handler.
constexpr int kSlots = 8192;
std::atomic<ThreadState*> g_slots[kSlots];
std::mutex g_registry_mu;
// Containers here are never destroyed: threads of the program (autograd, CUPTI, NCCL) can still
// run operators while the process's static destructors run at exit.
auto& g_threads = *new std::vector<ThreadState*>();  // every state ever made: drains, stop()

// Slots of exited threads hold the tombstone, so probe chains through them stay intact.
ThreadState* const kTombstone = new ThreadState();
auto& g_free = *new std::vector<ThreadState*>();  // states of exited threads, reused by new ones

}  // namespace

ThreadState* lookup(pid_t tid) {
  unsigned h = static_cast<unsigned>(tid) % kSlots;
  for (int i = 0; i < kSlots; ++i) {
    ThreadState* s = g_slots[(h + i) % kSlots].load(std::memory_order_acquire);
    if (s == nullptr) return nullptr;
    if (s != kTombstone && s->tid == tid) return s;
  }
  return nullptr;
}

namespace {

void insert_slot(ThreadState* s) {
  unsigned h = static_cast<unsigned>(s->tid) % kSlots;
  for (int i = 0; i < kSlots; ++i) {
    auto& slot = g_slots[(h + i) % kSlots];
    ThreadState* cur = slot.load();
    if (cur == nullptr || cur == kTombstone) {
      slot.store(s, std::memory_order_release);
      return;
    }
  }
}

void remove_slot(ThreadState* s) {
  unsigned h = static_cast<unsigned>(s->tid) % kSlots;
  for (int i = 0; i < kSlots; ++i) {
    auto& slot = g_slots[(h + i) % kSlots];
    ThreadState* cur = slot.load();
    if (cur == nullptr) return;
    if (cur == s) {
      slot.store(kTombstone, std::memory_order_release);
      return;
    }
  }
}

}  // namespace

ThreadState* get_or_make(pid_t tid) {
  ThreadState* s = lookup(tid);
  if (s) return s;
  std::lock_guard<std::mutex> g(g_registry_mu);
  if ((s = lookup(tid))) return s;
  if (!g_free.empty()) {
    s = g_free.back();
    g_free.pop_back();
    s->depth.store(0);
    s->overflow = 0;
    s->head.store(0);
    s->tail.store(0);
    s->cache_n = 0;
    s->native_ready.store(false);
    s->thread_node = 0;  // op_names / op_children stay valid: they map to never-removed ids
  } else {
    s = new ThreadState();
    s->ring = new Sample[kRing];
    g_threads.push_back(s);
  }
  s->tid = tid;
  insert_slot(s);
  return s;
}

namespace {

// Memory stays bounded under thread churn (a pin-memory thread per epoch, a thread per request):
// an exiting thread's state, its buffered samples folded in, is reused by the next new thread.
void release_thread(ThreadState* s) {
  if (s == nullptr) return;
  if (s->has_timer) {
    timer_delete(s->timer);
    s->has_timer = false;
  }
  {
    std::lock_guard<std::mutex> g(tree().mu);
    drain_locked(tree(), s);
  }
  std::lock_guard<std::mutex> g(g_registry_mu);
  remove_slot(s);
  s->tid = 0;
  g_free.push_back(s);
}

struct ThreadExit {
  ~ThreadExit() {
    release_thread(t_state);
    t_state = nullptr;
  }
};
thread_local ThreadExit t_exit;

}  // namespace

pid_t gettid_() { return static_cast<pid_t>(syscall(SYS_gettid)); }

ThreadState* this_thread() {
  ThreadState* s = t_state;
  if (s) return s;
  s = get_or_make(gettid_());
  t_state = s;
  (void)&t_exit;  // first use registers its destructor for this thread's exit
  if (g_enabled.load(std::memory_order_relaxed)) {
    clockid_t c;
    if (pthread_getcpuclockid(pthread_self(), &c) == 0) arm_timer(s, c);
  }
  return s;
}

std::mutex& registry_mu() { return g_registry_mu; }

std::vector<ThreadState*>& all_threads() { return g_threads; }

}  // namespace dc::detail
