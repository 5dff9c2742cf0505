// What a hooked call records: a `hook` frame named after the function under the caller's
// context (nested under the hooked call it happens inside, if any) with hook.count, hook.time
// (exclusive of nested hooked calls), hook.bytes, and for sync calls sync.wait and sync.count.
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "../cct/capture.h"
#include "../cct/tree.h"
#include "hooks_internal.h"

namespace dc::hooks::detail {

Slot g_slots[kMaxStubs];
std::atomic<int> g_n_slots{0};

namespace {

uint32_t m_count, m_time, m_bytes, m_sync_wait, m_sync_count;

constexpr int kShadow = 64;  // nested hooked calls per thread; deeper ones pass untracked

struct Call {
  void** ret_slot;  // where the caller's return address was (identifies the frame)
  void* ret;        // the caller's return address
  int64_t t0_ns, child_ns;
  uint32_t node, slot;
  double bytes;
};

// Trivially destructible: nothing runs at thread exit.
struct HookThread {
  int depth;
  bool busy;  // inside the profiler's own work: hooked calls made by it pass untracked
  Call calls[kShadow];
  struct {
    uint32_t parent, slot, node;
  } nodes[64];  // (parent, slot) -> node; tree nodes are never removed, so a hit is exact
};
thread_local HookThread t_hook;

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

uint32_t hook_node(HookThread& h, uint32_t parent, uint32_t i) {
  auto& e = h.nodes[(parent * 31u + i) & 63u];
  if (e.node != 0 && e.parent == parent && e.slot == i) return e.node;
  static const char* const kExtra[] = {"type=launch", "type=copy", "type=sync",
                                       "type=alloc", "type=free", "type=call"};
  const Slot& s = g_slots[i];
  uint32_t node = dc::child_node(parent, static_cast<int>(Kind::Hook), s.function.c_str(),
                                 kExtra[static_cast<int>(s.kind.load(std::memory_order_relaxed))]);
  e = {parent, i, node};
  return node;
}

// Integer argument `k` of the call: a register for the first six, else the stack above the
// return address. Assumes the arguments before it are integers or pointers (docs/hooks.md).
uint64_t int_arg(const SavedRegs* regs, void** ret_slot, int k) {
  if (k < 6) return regs->gp[k];
  return reinterpret_cast<const uint64_t*>(ret_slot)[1 + (k - 6)];
}

void record(const Call& c, int64_t elapsed) {
  if (!dc::is_enabled() || t_hook.busy) return;
  t_hook.busy = true;
  const Slot& s = g_slots[c.slot];
  const double secs = (elapsed - c.child_ns) * 1e-9;
  {
    dc::TreeWriter t(dc::tree());
    t.add(c.node, m_count, 1.0);
    t.add(c.node, m_time, secs);
    if (s.bytes_arg.load(std::memory_order_relaxed) >= 0) t.add(c.node, m_bytes, c.bytes);
    if (s.kind.load(std::memory_order_relaxed) == dc::hooks::HookKind::Sync) {
      t.add(c.node, m_sync_wait, secs);
      t.add(c.node, m_sync_count, 1.0);
    }
  }
  t_hook.busy = false;
}

}  // namespace

const char* kind_name(HookKind k) {
  static const char* const names[] = {"launch", "copy", "sync", "alloc", "free", "call"};
  return names[static_cast<int>(k)];
}

void init_metrics() {
  m_count = dc::metric_id("hook.count");
  m_time = dc::metric_id("hook.time");
  m_bytes = dc::metric_id("hook.bytes");
  m_sync_wait = dc::metric_id("sync.wait");
  m_sync_count = dc::metric_id("sync.count");
}

}  // namespace dc::hooks::detail

using namespace dc::hooks::detail;

extern "C" void* dc_hook_enter(uint32_t i, void** ret_slot, const dc::hooks::SavedRegs* regs) {
  Slot& s = g_slots[i];
  void* real = s.real.load(std::memory_order_acquire);
  if (!s.active.load(std::memory_order_relaxed) || !dc::is_enabled()) return real;
  HookThread& h = t_hook;
  if (h.busy) return real;
  // A hooked function tail-calling another one reuses its caller's swapped return slot: the new
  // call nests in the open one and ends with it.
  const bool tail = *ret_slot == static_cast<void*>(dc_hook_return);
  // Calls left by longjmp (their frames are gone: at or below this one's stack slot) are dropped.
  while (h.depth > 0 && (h.calls[h.depth - 1].ret_slot < ret_slot ||
                         (h.calls[h.depth - 1].ret_slot == ret_slot && !tail)))
    --h.depth;
  if (h.depth >= kShadow || (tail && h.depth == 0)) return real;
  h.busy = true;
  uint32_t parent = h.depth > 0 ? h.calls[h.depth - 1].node : dc::current_node();
  uint32_t node = hook_node(h, parent, i);
  const int bytes_arg = s.bytes_arg.load(std::memory_order_relaxed);
  double bytes = bytes_arg >= 0 ? static_cast<double>(int_arg(regs, ret_slot, bytes_arg)) : 0;
  h.busy = false;
  h.calls[h.depth++] = Call{ret_slot, *ret_slot, now_ns(), 0, node, i, bytes};
  *ret_slot = static_cast<void*>(dc_hook_return);
  return real;
}

extern "C" void* dc_hook_exit(void** sp) {
  const int64_t t1 = now_ns();
  HookThread& h = t_hook;
  void** ret_slot = sp - 1;
  while (h.depth > 0 && h.calls[h.depth - 1].ret_slot < ret_slot) --h.depth;  // longjmp'd
  if (h.depth == 0 || h.calls[h.depth - 1].ret_slot != ret_slot) {
    // Cannot happen unless the stack was switched under a hooked call: there is no way back.
    static const char msg[] = "deepcontext: hooked call returned on a foreign stack\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    abort();
  }
  // The call that swapped this slot, and any that were tail-called from it, end here.
  void* ret = nullptr;
  while (ret == nullptr && h.depth > 0) {
    const Call c = h.calls[--h.depth];
    const int64_t elapsed = t1 - c.t0_ns;
    if (h.depth > 0) h.calls[h.depth - 1].child_ns += elapsed;
    record(c, elapsed);
    if (c.ret != static_cast<void*>(dc_hook_return)) ret = c.ret;
  }
  if (ret == nullptr) abort();  // unreachable: a tail call always sits on the call it replaced
  return ret;
}
