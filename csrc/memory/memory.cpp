#include "memory.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>

#include "../cct/capture.h"
#include "deepcontext/c_api.h"
#include "live_table.h"

namespace dc::memory {
namespace {

// One context's bytes on one device. The peak is kept lazily: `stamp` is the device's peak
// generation when `live` last changed; a context untouched since the latest peak held `live`
// at it, one touched since holds `at_peak`, taken at its first change after that peak.
// Each event is O(1) and nothing is scanned when a new peak is reached.
struct NodeMem {
  int64_t live = 0;
  int64_t at_peak = 0;
  int64_t alloc_bytes = 0;
  int64_t alloc_count = 0;
  int64_t live_count = 0;
  uint64_t stamp = 0;
};

struct Device {
  std::string name;
  bool totals = false;
  uint64_t gen = 1;            // bumped at every new peak
  int64_t tracked = 0;         // bytes live in the table on this device
  int64_t last_total = 0;      // the device's live bytes after the latest event
  int64_t peak_total = 0;      // the device's live bytes at its peak
  int64_t untracked_at_peak = 0;  // part of the peak the table does not hold (pre-capture, ...)
  uint32_t untracked_node = 0;
  uint32_t m_peak = 0;         // mem.<name>.peak.bytes
  std::vector<NodeMem> nodes;  // by context node id, grown on demand
  std::vector<std::pair<int64_t, int64_t>> saved;  // (alloc bytes, count) at a checkpoint

  [[gnu::always_inline]] NodeMem& at(uint32_t node) {
    if (node >= nodes.size()) grow(node);
    NodeMem& m = nodes[node];
    if (m.stamp != gen) {  // first change since the latest peak: remember the value at it
      m.at_peak = m.live;
      m.stamp = gen;
    }
    return m;
  }
  // The device's live bytes: the allocator's own total where it reports one (it includes what
  // the table never saw), never less than what the table holds.
  int64_t live_total(uint64_t reported) const {
    return totals ? std::max(static_cast<int64_t>(reported), tracked) : tracked;
  }
  int64_t value_at_peak(const NodeMem& m) const { return m.stamp == gen ? m.at_peak : m.live; }
  // Out of line: the event's path stays a compare and an index.
  [[gnu::noinline]] void grow(uint32_t node) { nodes.resize(node + 1 + node / 2); }
  void new_peak(int64_t total, NodeMem& m) {
    peak_total = total;
    ++gen;
    m.at_peak = m.live;
    m.stamp = gen;
    untracked_at_peak = total - tracked;
  }
};

// Guards everything below; held for a few dozen instructions per event, never while taking the
// tree lock or any other. A spin lock: an uncontended std::mutex costs ~64 instructions an event
// (pthread's lock and unlock through the PLT), this one an exchange and a store. A waiter spins
// briefly, then yields its core (the holder may have been preempted).
class SpinLock {
 public:
  // (Inlined into the event's path, which the compiler would otherwise call out to; the wait
  // is out of line.)
  [[gnu::always_inline]] void lock() {
    if (busy_.exchange(true, std::memory_order_acquire)) wait();
  }
  [[gnu::always_inline]] void unlock() { busy_.store(false, std::memory_order_release); }
  struct Held {  // (std::lock_guard's constructor was not inlined)
    [[gnu::always_inline]] explicit Held(SpinLock& l) : l(l) { l.lock(); }
    [[gnu::always_inline]] ~Held() { l.unlock(); }
    SpinLock& l;
  };

 private:
  [[gnu::noinline]] void wait() {
    do {
      for (int i = 0; busy_.load(std::memory_order_relaxed); ++i) i < 64 ? relax() : yield();
    } while (busy_.exchange(true, std::memory_order_acquire));
  }
  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  static void yield() { sched_yield(); }
  std::atomic<bool> busy_{false};
};

SpinLock g_mu;
std::atomic<bool> g_active{false};
LiveTable* g_table = nullptr;  // never destroyed: frees may be reported during exit
Device g_dev[kMaxDevices];
int g_n_dev = 0;
uint64_t g_unmatched = 0;
uint32_t m_alloc_bytes, m_alloc_count, m_live_bytes, m_live_count, m_peak;
uint32_t m_seg_alloc_count, m_seg_alloc_bytes, m_seg_free_count, m_seg_free_bytes, m_retries,
    m_ooms;

// A forked child (a DataLoader worker) reports nothing: our lock may have been held by a
// parent thread that does not exist in the child.
void off_in_child() { g_active.store(false); }

[[gnu::always_inline]] inline void forget(const LiveEntry& e) {
  Device& d = g_dev[e.slot];
  NodeMem& m = d.at(e.node);
  m.live -= static_cast<int64_t>(e.bytes);
  m.live_count -= 1;
  d.tracked -= static_cast<int64_t>(e.bytes);
}

}  // namespace

void start() {
  m_alloc_bytes = metric_id("mem.alloc.bytes");
  m_alloc_count = metric_id("mem.alloc.count");
  m_live_bytes = metric_id("mem.live.bytes");
  m_live_count = metric_id("mem.live.count");
  m_peak = metric_id("mem.peak.bytes");
  m_seg_alloc_count = metric_id("mem.segment.alloc.count");
  m_seg_alloc_bytes = metric_id("mem.segment.alloc.bytes");
  m_seg_free_count = metric_id("mem.segment.free.count");
  m_seg_free_bytes = metric_id("mem.segment.free.bytes");
  m_retries = metric_id("mem.alloc.retries");
  m_ooms = metric_id("mem.oom.count");
  SpinLock::Held g(g_mu);
  if (g_table == nullptr) {
    g_table = new LiveTable();
    pthread_atfork(nullptr, nullptr, off_in_child);
  }
  g_table->clear();
  for (int i = 0; i < g_n_dev; ++i) {
    Device& d = g_dev[i];
    d.nodes.clear();
    d.nodes.shrink_to_fit();
    d.gen = 1;
    d.tracked = d.last_total = d.peak_total = d.untracked_at_peak = 0;
  }
  g_unmatched = 0;
  g_active.store(true);
}

void stop() { g_active.store(false); }

bool active() { return g_active.load(std::memory_order_relaxed); }

void reset_metrics() {
  SpinLock::Held g(g_mu);
  for (int i = 0; i < g_n_dev; ++i) {
    Device& d = g_dev[i];
    for (NodeMem& m : d.nodes) {
      m.alloc_bytes = 0;
      m.alloc_count = 0;
    }
    // The new phase's peak starts from what is live now.
    d.peak_total = d.last_total;
    d.untracked_at_peak = d.last_total - d.tracked;
    ++d.gen;
  }
}

// Schedules (capture.h): a warm-up's allocations are discarded, earlier active cycles' kept.
void checkpoint_metrics() {
  SpinLock::Held g(g_mu);
  for (int i = 0; i < g_n_dev; ++i) {
    Device& d = g_dev[i];
    d.saved.resize(d.nodes.size());
    for (size_t n = 0; n < d.nodes.size(); ++n)
      d.saved[n] = {d.nodes[n].alloc_bytes, d.nodes[n].alloc_count};
  }
}

void rollback_metrics() {
  SpinLock::Held g(g_mu);
  for (int i = 0; i < g_n_dev; ++i) {
    Device& d = g_dev[i];
    for (size_t n = 0; n < d.nodes.size(); ++n) {
      NodeMem& m = d.nodes[n];
      m.alloc_bytes = n < d.saved.size() ? d.saved[n].first : 0;
      m.alloc_count = n < d.saved.size() ? d.saved[n].second : 0;
    }
    d.saved.clear();
    // The next phase's peak starts from what is live now (as reset_metrics).
    d.peak_total = d.last_total;
    d.untracked_at_peak = d.last_total - d.tracked;
    ++d.gen;
  }
}

int device_slot(const char* name, bool allocator_totals) {
  {
    SpinLock::Held g(g_mu);
    for (int i = 0; i < g_n_dev; ++i)
      if (g_dev[i].name == name) return i;
    if (g_n_dev == kMaxDevices) return -1;
  }
  // Names and nodes are made outside our lock (they take the tree's).
  const std::string n = name;
  uint32_t metric = metric_id(("mem." + n + ".peak.bytes").c_str());
  uint32_t untracked = child_node(0, DC_KIND_MARKER, ("untracked memory " + n).c_str(), "");
  SpinLock::Held g(g_mu);
  for (int i = 0; i < g_n_dev; ++i)
    if (g_dev[i].name == n) return i;
  if (g_n_dev == kMaxDevices) return -1;
  Device& d = g_dev[g_n_dev];
  d.name = n;
  d.totals = allocator_totals;
  d.m_peak = metric;
  d.untracked_node = untracked;
  return g_n_dev++;
}

void event(const void* ptr, int64_t bytes, int slot, uint64_t total_allocated) {
  if (!g_active.load(std::memory_order_relaxed) || slot < 0 || slot >= kMaxDevices ||
      ptr == nullptr || bytes == 0)
    return;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  if (bytes < 0) {
    SpinLock::Held g(g_mu);
    Device& d = g_dev[slot];
    LiveEntry e;
    if (g_table->take(p, &e)) {
      forget(e);
    } else {
      ++g_unmatched;
    }
    d.last_total = d.live_total(total_allocated);
    return;
  }
  // A pause records nothing new; the frees above keep the table true meanwhile.
  if (!is_enabled()) return;
  const uint32_t node = current_node();  // takes the tree lock: before ours
  SpinLock::Held g(g_mu);
  Device& d = g_dev[slot];
  LiveEntry old;
  if (g_table->put(LiveEntry{p, static_cast<uint64_t>(bytes), node, static_cast<uint32_t>(slot)},
                   &old))
    forget(old);  // its free was never reported (made while another reporter held the thread)
  NodeMem& m = d.at(node);
  m.live += bytes;
  m.live_count += 1;
  m.alloc_bytes += bytes;
  m.alloc_count += 1;
  d.tracked += bytes;
  d.last_total = d.live_total(total_allocated);
  if (d.last_total > d.peak_total) d.new_peak(d.last_total, m);
}

void allocator_event(int action, int slot, uint64_t bytes) {
  if (!g_active.load(std::memory_order_relaxed) || !is_enabled()) return;
  const uint32_t node = current_node();
  const double b = static_cast<double>(bytes);
  switch (action) {
    case kSegmentAlloc:
      add_metric(node, m_seg_alloc_count, 1.0);
      add_metric(node, m_seg_alloc_bytes, b);
      break;
    case kSegmentFree:
      add_metric(node, m_seg_free_count, 1.0);
      add_metric(node, m_seg_free_bytes, b);
      break;
    case kRetry:
      add_metric(node, m_retries, b);  // bytes carries the number of retries here
      break;
    case kOom:
      add_metric(node, m_ooms, 1.0);
      break;
    default:
      break;
  }
}

void export_metrics(std::vector<std::tuple<uint32_t, uint32_t, double>>& rows) {
  SpinLock::Held g(g_mu);
  if (g_table == nullptr) return;
  for (int i = 0; i < g_n_dev; ++i) {
    const Device& d = g_dev[i];
    for (uint32_t n = 0; n < d.nodes.size(); ++n) {
      const NodeMem& m = d.nodes[n];
      if (m.alloc_count != 0) {
        rows.emplace_back(n, m_alloc_bytes, static_cast<double>(m.alloc_bytes));
        rows.emplace_back(n, m_alloc_count, static_cast<double>(m.alloc_count));
      }
      if (m.live != 0) {
        rows.emplace_back(n, m_live_bytes, static_cast<double>(m.live));
        rows.emplace_back(n, m_live_count, static_cast<double>(m.live_count));
      }
      if (int64_t v = d.value_at_peak(m); v != 0) {
        rows.emplace_back(n, d.m_peak, static_cast<double>(v));
        rows.emplace_back(n, m_peak, static_cast<double>(v));
      }
    }
    if (d.untracked_at_peak > 0) {
      rows.emplace_back(d.untracked_node, d.m_peak, static_cast<double>(d.untracked_at_peak));
      rows.emplace_back(d.untracked_node, m_peak, static_cast<double>(d.untracked_at_peak));
    }
  }
}

Footprint footprint() {
  SpinLock::Held g(g_mu);
  Footprint f{};
  if (g_table != nullptr) {
    f.live_allocations = g_table->size();
    f.table_bytes = g_table->capacity() * sizeof(LiveEntry);
    f.high_water = g_table->high_water();
  }
  for (int i = 0; i < g_n_dev; ++i) f.context_bytes += g_dev[i].nodes.capacity() * sizeof(NodeMem);
  f.unmatched_frees = g_unmatched;
  return f;
}

std::vector<std::string> device_names() {
  SpinLock::Held g(g_mu);
  std::vector<std::string> out;
  for (int i = 0; i < g_n_dev; ++i) out.push_back(g_dev[i].name);
  return out;
}

}  // namespace dc::memory
