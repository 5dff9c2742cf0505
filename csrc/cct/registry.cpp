#include "registry.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "capture_internal.h"

namespace dc::registry {

using detail::g_opts;

namespace {

// tid -> state, two levels (no probing, no tombstones): the handler does two loads. Thread ids
// are below the kernel's PID_MAX_LIMIT (2^22).
constexpr unsigned kTidBits = 22, kPageBits = 10;
constexpr unsigned kPages = 1u << (kTidBits - kPageBits), kPageSize = 1u << kPageBits;
std::atomic<std::atomic<ThreadState*>*> g_pages[kPages];

// Everything below is process-lifetime and never destroyed: threads of the program (autograd,
// CUPTI, NCCL) can still run operators while static destructors run at exit.
std::mutex& g_mu = *new std::mutex();
std::vector<ThreadState*>& g_all = *new std::vector<ThreadState*>();   // every state ever made
std::vector<ThreadState*>& g_free = *new std::vector<ThreadState*>();  // reaped, reusable
std::mutex& g_drain_mu = *new std::mutex();  // one drain at a time (drains, reaping)
bool g_armed = false;                        // capture started with the sampler on
unsigned long long g_armed_at_ticks = 0;     // when, in /proc's start-time units (boot clock ticks)
std::atomic<uint64_t> g_refused{0};

std::atomic<ThreadState*>* slot(pid_t tid, bool make) {
  auto t = static_cast<unsigned>(tid);
  if (tid <= 0 || t >= (1u << kTidBits)) return nullptr;
  auto* page = g_pages[t >> kPageBits].load(std::memory_order_acquire);
  if (page == nullptr && make) {  // registry lock held
    page = static_cast<std::atomic<ThreadState*>*>(std::calloc(kPageSize, sizeof(*page)));
    if (page == nullptr) return nullptr;
    g_pages[t >> kPageBits].store(page, std::memory_order_release);
  }
  return page ? &page[t & (kPageSize - 1)] : nullptr;
}

// The kernel's CPU clock of a thread by id (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)).
clockid_t clock_of_tid(pid_t tid) { return static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6); }

bool tid_alive(pid_t tid) {
  return syscall(SYS_tgkill, getpid(), tid, 0) == 0 || errno != ESRCH;
}

// Field 22 of /proc/self/task/<tid>/stat: when the thread started (tells a reused id apart).
unsigned long long start_ticks(pid_t tid) {
  char path[64], buf[1024];
  std::snprintf(path, sizeof(path), "/proc/self/task/%d/stat", static_cast<int>(tid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // comm may hold spaces and parentheses
  if (p == nullptr) return 0;
  for (int field = 2; field < 22 && *p; ++p)
    if (*p == ' ') ++field;
  return std::strtoull(p, nullptr, 10);
}

unsigned long long boot_ticks_now() {
  timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  const long hz = sysconf(_SC_CLK_TCK);
  return static_cast<unsigned long long>(ts.tv_sec) * hz + ts.tv_nsec / (1000000000L / hz);
}

void arm_locked(ThreadState* s) {
  if (!g_armed || s->role == Role::Ignored) return;
  if (s->role == Role::Polled) {
    timespec ts;
    s->polled_cpu_ns = clock_gettime(s->clock, &ts) == 0 ? ts.tv_sec * 1000000000LL + ts.tv_nsec : -1;
    // A worker born after capture started spent all its CPU time inside it: the first poll
    // charges it from zero (an intra-op pool created by the session's first operator would
    // otherwise lose everything before the scan found it).
    if (s->polled_cpu_ns >= 0 && s->start_ticks > g_armed_at_ticks) s->polled_cpu_ns = 0;
  } else if (!s->has_timer) {
    detail::create_timer(s);
  }
  s->phase.store(Phase::Armed, std::memory_order_release);
}

void disarm_locked(ThreadState* s) {
  if (s->has_timer) detail::delete_timer(s);
  s->polled_cpu_ns = -1;
  if (s->phase.load() == Phase::Armed) s->phase.store(Phase::Disarmed, std::memory_order_release);
}

// A fresh (or reaped) state for `tid`, mapped; null when the id cannot be mapped.
ThreadState* make_locked(pid_t tid, Role role, clockid_t clock) {
  std::atomic<ThreadState*>* sl = slot(tid, true);
  if (sl == nullptr) {
    g_refused.fetch_add(1);
    return nullptr;
  }
  ThreadState* s;
  if (!g_free.empty()) {
    s = g_free.back();
    g_free.pop_back();
  } else {
    s = new ThreadState();
    s->ring = new Sample[kRing];  // pages fill in only where samples are written
    g_all.push_back(s);
  }
  s->tid = tid;
  s->role = role;
  s->clock = clock;
  s->start_ticks = start_ticks(tid);
  s->exited.store(false);
  s->depth.store(0);
  s->overflow = 0;
  s->cache_n = 0;
  s->chain.n = 0;
  s->scope_chain.n = 0;
  s->scope_place.valid = false;
  s->under_op_path.n = 0;
  s->stack_hi = 0;  // (another thread's stack; the remembered stacks are offsets, kept)
  s->thread_node = 0;  // op_names / op_children / native_memo stay valid: ids are never removed
  ++s->generation;
  s->phase.store(Phase::Seen, std::memory_order_release);
  sl->store(s, std::memory_order_release);
  arm_locked(s);
  return s;
}

// Reaps s: unmapped and disarmed under the registry lock, its ring folded in, then reusable.
void reap_locked(std::unique_lock<std::mutex>& lock, ThreadState* s) {
  disarm_locked(s);
  if (std::atomic<ThreadState*>* sl = slot(s->tid, false))
    if (sl->load() == s) sl->store(nullptr, std::memory_order_release);
  s->phase.store(Phase::Free, std::memory_order_release);
  lock.unlock();
  {
    std::lock_guard<std::mutex> d(g_drain_mu);
    detail::drain(s);
    s->head.store(0);
    s->tail.store(0);
  }
  lock.lock();
  s->tid = 0;
  g_free.push_back(s);
}

struct ThreadExit {
  // Only a mark: this runs inside __call_tls_dtors, after other thread_local objects may be
  // gone, so nothing here drains, splices, symbolizes, allocates or locks.
  ~ThreadExit() {
    if (t_state != nullptr) t_state->exited.store(true, std::memory_order_release);
  }
};
thread_local ThreadExit t_exit;

// fork(): only the forking thread lives on in the child, so the registry's lock must not be held
// by another thread across it, and the parent's states (other tids) mean nothing there.
// The locks are taken in their one global order: drain, registry, tree.
void before_fork() {
  g_drain_mu.lock();
  g_mu.lock();
  tree().fork_prepare();
}
void after_fork_parent() {
  tree().fork_release();
  g_mu.unlock();
  g_drain_mu.unlock();
}
void after_fork_child() {
  tree().fork_release();
  for (ThreadState* s : g_all) {
    if (s->phase.load() == Phase::Free) continue;
    if (std::atomic<ThreadState*>* sl = slot(s->tid, false)) sl->store(nullptr);
    s->has_timer = false;  // timers are not inherited
    s->head.store(0);
    s->tail.store(0);
    s->tid = 0;
    s->phase.store(Phase::Free);
    g_free.push_back(s);
  }
  g_armed = false;
  t_state = nullptr;
  g_mu.unlock();
  g_drain_mu.unlock();
}
struct ForkHooks {
  ForkHooks() { pthread_atfork(before_fork, after_fork_parent, after_fork_child); }
};
ForkHooks g_fork_hooks;  // trivially destructible: nothing runs at exit

}  // namespace

pid_t gettid_() { return static_cast<pid_t>(syscall(SYS_gettid)); }

ThreadState* lookup(pid_t tid) {
  std::atomic<ThreadState*>* sl = slot(tid, false);
  return sl ? sl->load(std::memory_order_acquire) : nullptr;
}

__thread ThreadState* t_state = nullptr;

ThreadState* register_self() {
  if (ThreadState* s = t_state) return s;
  pid_t tid = gettid_();
  clockid_t clock;
  if (pthread_getcpuclockid(pthread_self(), &clock) != 0) clock = clock_of_tid(tid);
  ThreadState* s;
  {
    std::unique_lock<std::mutex> g(g_mu);
    s = lookup(tid);
    // A state registered for this id by someone else may belong to an earlier thread that had
    // the same id (exited, or gone before the reaper's next pass): the start time tells.
    if (s != nullptr && (s->exited.load() || s->start_ticks != start_ticks(tid))) {
      reap_locked(g, s);
      s = nullptr;
    }
    if (s == nullptr) {
      s = make_locked(tid, Role::Signaled, clock);
    } else if (s->role == Role::Polled) {  // a worker that turned out to run operators
      disarm_locked(s);
      s->role = Role::Signaled;
      s->clock = clock;
      arm_locked(s);
    }
  }
  if (s == nullptr) {
    static ThreadState* unmapped = new ThreadState();  // keeps callers simple; never sampled
    return unmapped;
  }
  t_state = s;
  (void)&t_exit;  // first use registers the exit mark for this thread
  return s;
}

void adopt(pid_t tid, unsigned long pthread_id) {
  clockid_t clock;
  if (pthread_getcpuclockid(static_cast<pthread_t>(pthread_id), &clock) != 0) clock = clock_of_tid(tid);
  std::lock_guard<std::mutex> g(g_mu);
  ThreadState* s = lookup(tid);
  if (s == nullptr) {
    make_locked(tid, Role::Signaled, clock);
  } else if (s->role == Role::Polled) {
    disarm_locked(s);
    s->role = Role::Signaled;
    s->clock = clock;
    arm_locked(s);
  }
}

void adopt_worker(pid_t tid, const char* name) {
  std::lock_guard<std::mutex> g(g_mu);
  if (lookup(tid) != nullptr) return;
  ThreadState* s = make_locked(tid, Role::Polled, clock_of_tid(tid));
  if (s != nullptr) s->thread_node = detail::thread_node(name);
}

void ignore(pid_t tid) {
  std::lock_guard<std::mutex> g(g_mu);
  ThreadState* s = lookup(tid);
  if (s == nullptr) s = make_locked(tid, Role::Ignored, clock_of_tid(tid));
  if (s == nullptr) return;
  disarm_locked(s);
  s->role = Role::Ignored;
}

void arm_all() {
  std::lock_guard<std::mutex> g(g_mu);
  g_armed = g_opts.sample;
  g_armed_at_ticks = boot_ticks_now();
  for (ThreadState* s : g_all)
    if (s->phase.load() != Phase::Free) arm_locked(s);
}

void disarm_all() {
  std::lock_guard<std::mutex> g(g_mu);
  g_armed = false;
  for (ThreadState* s : g_all)
    if (s->phase.load() != Phase::Free) disarm_locked(s);
}

void drop_self_pending_expiry() {
  ThreadState* s = t_state;
  if (s == nullptr) return;
  std::lock_guard<std::mutex> g(g_mu);
  if (s->has_timer && s->phase.load() == Phase::Armed) detail::drop_pending_expiry(s->timer);
}

bool armed_wanted() {
  std::lock_guard<std::mutex> g(g_mu);
  return g_armed;
}

namespace {

// The thread ids under /proc/self/task that have no state yet, up to `max` (the rest wait for
// the next scan). getdents64 into a stack buffer, not opendir: opendir mallocs a 32 KB buffer
// on every scan, and a fork while this thread is inside the allocator leaves the child deadlocked
// in an allocator that does not lock itself around fork (ASan's, A3 in tests/sanitizers/KNOWN.md).
int unseen_tasks(pid_t* out, int max) {
  int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return 0;
  int n = 0;
  alignas(8) char buf[4096];
  for (long got; (got = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0;) {
    for (long at = 0; at < got;) {
      // struct linux_dirent64: u64 d_ino, s64 d_off, u16 d_reclen, u8 d_type, char d_name[]
      unsigned short reclen;
      std::memcpy(&reclen, buf + at + 16, sizeof(reclen));
      pid_t tid = static_cast<pid_t>(std::atoi(buf + at + 19));
      at += reclen;
      if (tid > 0 && n < max && lookup(tid) == nullptr) out[n++] = tid;
    }
  }
  close(fd);
  return n;
}

}  // namespace

void scan_tasks() {
  pid_t fresh[256];
  const int n_fresh = unseen_tasks(fresh, 256);
  for (int i = 0; i < n_fresh; ++i) {
    const pid_t tid = fresh[i];
    char path[64], name[64] = {0};
    std::snprintf(path, sizeof(path), "/proc/self/task/%d/comm", static_cast<int>(tid));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // gone already
    ssize_t n = read(fd, name, sizeof(name) - 1);
    close(fd);
    while (n > 0 && (name[n - 1] == '\n' || name[n - 1] == '\0')) --n;
    if (n > 0) {
      name[n] = '\0';
    } else {
      std::snprintf(name, sizeof(name), "thread %d", static_cast<int>(tid));
    }
    adopt_worker(tid, name);
  }
}

void reap() {
  std::unique_lock<std::mutex> g(g_mu);
  for (size_t i = 0; i < g_all.size(); ++i) {
    ThreadState* s = g_all[i];
    if (s->phase.load() == Phase::Free) continue;
    // (acquire: the owner's exit mark, a release after its last use of the state, orders that
    // use before the state's reuse; a thread's absence from /proc orders nothing by itself)
    const bool exited = s->exited.load(std::memory_order_acquire);
    bool gone = !tid_alive(s->tid);
    // An exited owner whose id now belongs to a newer thread (the start time tells them apart).
    if (!gone && exited) gone = start_ticks(s->tid) != s->start_ticks;
    if (gone) reap_locked(g, s);
  }
}

void drain_all() {
  std::vector<ThreadState*> states;
  {
    std::lock_guard<std::mutex> g(g_mu);
    states = g_all;
  }
  std::lock_guard<std::mutex> d(g_drain_mu);
  for (ThreadState* s : states) {
    detail::drain(s);
    detail::fold_op_tallies(s);
  }
}

void poll_workers(const std::function<void(ThreadState*, double)>& charge) {
  std::lock_guard<std::mutex> g(g_mu);
  for (ThreadState* s : g_all) {
    if (s->role != Role::Polled || s->phase.load() != Phase::Armed) continue;
    timespec ts;
    if (clock_gettime(s->clock, &ts) != 0) continue;  // gone: the reaper takes it
    int64_t now = ts.tv_sec * 1000000000LL + ts.tv_nsec;
    int64_t last = s->polled_cpu_ns;
    s->polled_cpu_ns = now;
    if (last >= 0 && now > last) charge(s, (now - last) * 1e-9);
  }
}

uint64_t dropped_samples() {
  std::lock_guard<std::mutex> g(g_mu);
  uint64_t total = 0;
  for (ThreadState* s : g_all) total += s->dropped.load();
  return total;
}

void stack_memo_counts(uint64_t* unwound, uint64_t* recalled, uint64_t* learned) {
  std::lock_guard<std::mutex> g(g_mu);
  *unwound = *recalled = *learned = 0;
  for (ThreadState* s : g_all) {
    *unwound += s->native_unwinds.load(std::memory_order_relaxed);
    if (const detail::StackPaths* p = s->stack_paths.load(std::memory_order_acquire)) {
      *recalled += p->recalled.load(std::memory_order_relaxed);
      *learned += p->learned.load(std::memory_order_relaxed);
    }
  }
}

size_t live_states() {
  std::lock_guard<std::mutex> g(g_mu);
  size_t n = 0;
  for (ThreadState* s : g_all) n += s->phase.load() != Phase::Free;
  return n;
}

uint64_t refused_registrations() { return g_refused.load(); }

}  // namespace dc::registry
