// A thread's memo by node id: what the thread last found below or after a node, and where its
// operator tally for the node is. Node ids are handed out in the order contexts are first seen,
// so a training step's events touch these entries nearly in the order they lie in memory; the
// hashed memos they stand in front of (ChildCache, the tally by hash) touched one random cache
// line each, and those misses were 45% of the operator path's time (benchmarks/where.py, GPT-2
// on the CPU: ChildCache::find and tally_exit). Owner-only: the signal handler and the drain never
// read it. Every hit is exact: an entry stores a lookup's own answer with everything it was keyed
// by, and nodes are never removed.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace dc {

struct NodeMemo {
  uint32_t op_frame[2];  // the operator frames last entered below this node, newest first,
  uint32_t op_node[2];   // and their nodes (0: none)
  uint64_t next_key;     // after_key() of the frame that came after this node's frame at its
  uint32_t next_node;    // chain position last time, and its node: a line followed by the next
  uint32_t tally;        // this thread's tally slot for the node + 1 (0: none yet)
};

// The successor memo's key: a frame's python_key under `parent` (both are part of what names
// the child; python_key is itself a 64-bit hash of the frame's identity).
inline uint64_t after_key(uint64_t python_key, uint32_t parent) {
  return python_key ^ (static_cast<uint64_t>(parent) + 1) * 0x9E3779B97F4A7C15ull;
}
static_assert(sizeof(NodeMemo) == 32, "two to a cache line");

class NodeMemoTable {
 public:
  static constexpr uint32_t kPageBits = 8;  // 256 nodes (8 KiB) a page, allocated at first use
  static constexpr uint32_t kMaxPages = 1u << 16;  // past 16M node ids: the slow way

  // The entry of `node`, allocated on first use; null past the table or when memory is short.
  NodeMemo* at(uint32_t node) {
    if (const NodeMemo* m = peek(node)) return const_cast<NodeMemo*>(m);  // (this table's own)
    const uint32_t page = node >> kPageBits;
    if (page >= pages_.size()) {
      if (page >= kMaxPages) return nullptr;
      pages_.resize(std::max<size_t>(page + 1, 2 * pages_.size()), nullptr);
    }
    NodeMemo*& p = pages_[page];
    if (p == nullptr) p = static_cast<NodeMemo*>(std::calloc(1u << kPageBits, sizeof(NodeMemo)));
    if (p == nullptr) return nullptr;
    return &p[node & ((1u << kPageBits) - 1)];
  }

  // The entry of `node` when its page exists, else null: no allocation, so that a probe on the
  // operator path is a few instructions inlined where it is asked.
  const NodeMemo* peek(uint32_t node) const {
    const uint32_t page = node >> kPageBits;
    if (page >= pages_.size()) return nullptr;
    const NodeMemo* p = pages_[page];
    return p != nullptr ? &p[node & ((1u << kPageBits) - 1)] : nullptr;
  }

  // Fetches the entry's line, when its page exists, for a lookup soon.
  [[gnu::always_inline]] void prefetch(uint32_t node) const {
    if (const NodeMemo* m = peek(node)) __builtin_prefetch(m);
  }

  // The node below `parent` for operator frame `frame` when memoized, else 0.
  uint32_t op_child(uint32_t parent, uint32_t frame) const {
    const NodeMemo* m = peek(parent);
    if (m == nullptr) return 0;
    if (m->op_frame[0] == frame && m->op_node[0] != 0) return m->op_node[0];
    if (m->op_frame[1] == frame && m->op_node[1] != 0) return m->op_node[1];
    return 0;
  }
  void put_op_child(uint32_t parent, uint32_t frame, uint32_t node) {
    NodeMemo* m = at(parent);
    if (m == nullptr) return;
    if (m->op_frame[0] != frame) {  // newest first; the older of the two goes
      m->op_frame[1] = m->op_frame[0];
      m->op_node[1] = m->op_node[0];
    }
    m->op_frame[0] = frame;
    m->op_node[0] = node;
  }

 private:
  // Grown as node ids grow (small pages: a thread that runs a few contexts holds a few of them).
  // Never freed: states are recycled, never destroyed.
  std::vector<NodeMemo*> pages_;
};

}  // namespace dc
