// An operator's exit without a lock: the thread counts it in its own tally (OpTally,
// thread_state.h), and every drain folds what grew into the tree (op.count, op.time,
// op.first_time, autograd.nodes).
#include <sys/mman.h>

#include <cstdlib>
#include <optional>

#include "capture_internal.h"

namespace dc::detail {

OpTallySlot* take_tally_slot(ThreadState* s, uint32_t node) {
  // (a thread the registry could not map has a state no drain sees)
  if (s->phase.load(std::memory_order_relaxed) == Phase::Free) return nullptr;
  OpTally* t = s->tally;
  if (t == nullptr) {
    // Zero pages, touched lazily, aligned for the slots' lines; never unmapped, like the state.
    void* m = mmap(nullptr, sizeof(OpTally), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED) return nullptr;
    t = static_cast<OpTally*>(m);
    __atomic_store_n(&s->tally, t, __ATOMIC_RELEASE);
  }
  // The node's slot from the thread's memo by node, else the next free one.
  NodeMemo* m = s->node_memo.at(node);
  if (m == nullptr) return nullptr;
  if (m->tally == 0) {
    const uint32_t used = t->used;
    if (used == OpTally::kSlots) return nullptr;
    t->slots[used].node = node;
    __atomic_store_n(&t->used, used + 1, __ATOMIC_RELEASE);
    m->tally = used + 1;
  }
  return &t->slots[m->tally - 1];
}

// Counts an exit of `node` in the thread's tally (OpTally); false when the tally is full.
bool tally_exit(ThreadState* s, OpTallySlot* sl, uint32_t node, int64_t own_ns, int created_nodes) {
  if (sl == nullptr || sl->node != node) sl = tally_slot(s, node);
  if (sl == nullptr) return false;
  const uint32_t gen = tree().metrics_generation();
  if (sl->first_gen != gen) {  // this thread's first call here since the metrics began
    sl->first_gen = gen;
    __atomic_store_n(&sl->first_ns, sl->first_ns + own_ns, __ATOMIC_RELAXED);
  }
  __atomic_store_n(&sl->ns, sl->ns + own_ns, __ATOMIC_RELAXED);
  if (created_nodes > 0) __atomic_store_n(&sl->autograd, sl->autograd + created_nodes, __ATOMIC_RELAXED);
  __atomic_store_n(&sl->count, sl->count + 1, __ATOMIC_RELEASE);
  return true;
}


void fold_op_tallies(ThreadState* s) {
  OpTally* t = __atomic_load_n(&s->tally, __ATOMIC_ACQUIRE);
  if (t == nullptr) return;
  const uint32_t used = __atomic_load_n(&t->used, __ATOMIC_ACQUIRE);
  std::optional<TreeWriter> w;
  for (uint32_t j = 0; j < used; ++j) {
    OpTally::Slot& sl = t->slots[j];
    OpTallyFolded& f = t->folded[j];
    const int64_t count = __atomic_load_n(&sl.count, __ATOMIC_ACQUIRE);
    if (count == f.count) continue;  // (what else grew belongs to an exit still counting)
    const int64_t ns = __atomic_load_n(&sl.ns, __ATOMIC_RELAXED);
    const int64_t first = __atomic_load_n(&sl.first_ns, __ATOMIC_RELAXED);
    const int64_t created = __atomic_load_n(&sl.autograd, __ATOMIC_RELAXED);
    const uint32_t node = __atomic_load_n(&sl.node, __ATOMIC_RELAXED);
    if (!w) w.emplace(tree());
    // A first call counts where the tree has no call of the context yet (another thread's, or
    // one before a rollback to a checkpoint that had it, came first otherwise).
    if (first != f.first_ns && w->value(node, m_op_count) == 0.0)
      w->add(node, m_op_first_time, (first - f.first_ns) * 1e-9);
    w->add(node, m_op_time, (ns - f.ns) * 1e-9);
    w->add(node, m_op_count, static_cast<double>(count - f.count));
    if (created != f.autograd)
      w->add(node, m_autograd_nodes, static_cast<double>(created - f.autograd));
    f = OpTallyFolded{count, ns, first, created};
  }
}

}  // namespace dc::detail
