// One event's tree lookups through its thread's caches, shared by the operator layer (ops.cpp)
// and the current-node queries of the other event sources (current_node.cpp). Internal.
#pragma once
#include <atomic>
#include <cstring>
#include <optional>
#include <string_view>

#include "capture_internal.h"
#include "key_mix.h"

namespace dc::detail {

// Tree lookups of one event through the thread's caches (ids are never removed, so a hit is
// exact): the tree lock is taken at the first miss, and held until the lookup ends.
class Lookup {
 public:
  explicit Lookup(ThreadState* s) : s_(s) {}

  TreeWriter& writer() {
    if (DC_UNLIKELY(!w_)) take_lock();
    return *w_;
  }

  // The child of `parent` for frame `frame` (an operator's, the backward marker): from the
  // thread's memo by node (node_memo.h), then its hashed memo, then the tree.
  // (The memo's hit inline, ~15 instructions; nearly every event's. Out of line, with the rest,
  // it cost a call, a prologue saving six registers and ~5 lines of code: GPT-2 generate.)
  uint32_t child(uint32_t parent, uint32_t frame) {
    const uint32_t node = s_->node_memo.op_child(parent, frame);
    return DC_LIKELY(node != 0) ? node : child_not_memoized(parent, frame);
  }

  [[gnu::noinline]] uint32_t child_not_memoized(uint32_t parent, uint32_t frame) {
    uint32_t node = s_->op_children.find(parent, frame);
    if (node == ChildCache::kNone) {
      node = writer().child(parent, frame);
      s_->op_children.put(parent, frame, node);
    }
    s_->node_memo.put_op_child(parent, frame, node);
    return node;
  }

  // The frame of operator `name`: by pointer when this buffer held this text last time, else by
  // text (backward and engine-wrapper names are built per call in reused buffers).
  uint32_t op_frame(const char* name) {
    const auto& e = name_slot(name);
    if (DC_LIKELY(e.ptr == name && same_text(s_->op_name_texts[e.text].text, name))) return e.frame;
    return op_frame_by_text(name);
  }

  // The frame of operator `name` by its text, and the pointer slot's new entry: out of line, so
  // that a hit (a forward operator's name, at the same address every call) runs through few
  // lines of code; backward names, built in reused buffers, mostly come here.
  [[gnu::noinline]] uint32_t op_frame_by_text(const char* name) {
    auto& e = name_slot(name);
    const size_t len = std::strlen(name);
    const uint64_t h = text_hash(name, len);
    uint32_t i = s_->op_name_ids.find(static_cast<uint32_t>(len), h);
    if (i != ChildCache::kNone && s_->op_name_texts[i].text != std::string_view(name, len)) {
      // (a hash collision: the first name keeps the slot, this one is looked up by the tree)
      e.ptr = nullptr;
      return writer().named_frame(Kind::Op, std::string(name, len));
    }
    if (i == ChildCache::kNone) {
      i = static_cast<uint32_t>(s_->op_name_texts.size());
      s_->op_name_texts.push_back(
          ThreadState::OpName{writer().named_frame(Kind::Op, std::string(name, len)), std::string(name, len)});
      s_->op_name_ids.put(static_cast<uint32_t>(len), h, i);
    }
    e.ptr = name;
    e.frame = s_->op_name_texts[i].frame;
    e.text = i;
    return e.frame;
  }

  // The "[marker] backward" frame (one per process: frames are never removed).
  uint32_t backward_marker() {
    static std::atomic<uint32_t> id{0};  // 0: not interned yet (frame 0 is the root's)
    uint32_t f = id.load(std::memory_order_relaxed);
    if (f == 0) {
      f = writer().named_frame(Kind::Marker, "backward");
      id.store(f, std::memory_order_relaxed);
    }
    return f;
  }

  // The pointer cache's slot for a name at this address.
  static ThreadState::OpNameSlot& name_slot(ThreadState* s, const char* name) {
    const uint64_t h = reinterpret_cast<uintptr_t>(name) * 0x9E3779B97F4A7C15ull;
    return s->op_names[h >> (64 - ThreadState::kOpNameBits)];
  }

 private:
  // Whether `name` is `text`. strncmp stops at the first NUL, so a shorter string in a reused
  // buffer is never read past its end.
  static bool same_text(const std::string& text, const char* name) {
    return std::strncmp(text.c_str(), name, text.size() + 1) == 0;
  }

  static uint64_t text_hash(const char* p, size_t n) {
    uint64_t h = 0x243F6A8885A308D3ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      h = key_mix(h, w);
    }
    uint64_t w = 0;
    std::memcpy(&w, p + i, n - i);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 32);
  }

  ThreadState::OpNameSlot& name_slot(const char* name) { return name_slot(s_, name); }

  // (out of line: the lock is rare, and every caller of writer() would otherwise carry it)
  [[gnu::noinline]] void take_lock() { w_.emplace(tree()); }

  ThreadState* s_;
  std::optional<TreeWriter> w_;
};

// The context of an event under the open op `top` from the thread's Python frames `buf` (as
// walk_to_op_frame gives them, `k` of them below the op: frames_above_op): the op's own node when
// k is 0, else those frames under it, from the thread's memo when it has them all (no tree
// lock). Sets *py_node to its innermost Python node.
inline uint32_t context_under_op(Lookup& lk, ThreadState* s, const dc_raw_frame* buf, int n,
                                 int k, const OpEntry& top, uint32_t* py_node) {
  uint32_t node;
  if (k == 0) {
    *py_node = top.py_node;
    return top.node;
  }
  if (cached_under_op(s, top.node, buf, k, &node)) {
    *py_node = node;
    return node;
  }
  return node_for(lk.writer(), Describer{}, s, buf, n, true, top.node, top.py_node, top.py_frame,
                  &top.anchor, py_node);
}

// The first entry of `key`'s set in the thread's memo.
inline size_t memo_set(uint64_t key) {
  return (key & (ThreadState::kMemoSets - 1)) * ThreadState::kMemoWays;
}

// The thread's memoized native placement for `key` (0: none), or null.
inline const ThreadState::NativeMemo* memo_find(const ThreadState* s, uint64_t key) {
  if (key == 0) return nullptr;
  const ThreadState::NativeMemo* set = &s->native_memo[memo_set(key)];
  for (uint32_t w = 0; w < ThreadState::kMemoWays; ++w)
    if (set[w].key == key) return &set[w];
  return nullptr;
}

// Memoizes a placement: it goes first in its set, the set's oldest entry is dropped.
inline void memo_put(ThreadState* s, const ThreadState::NativeMemo& m) {
  if (m.key == 0) return;
  ThreadState::NativeMemo* set = &s->native_memo[memo_set(m.key)];
  for (uint32_t w = ThreadState::kMemoWays - 1; w > 0; --w) set[w] = set[w - 1];
  set[0] = m;
}

// Whether an event's native frames can be placed, given the op open around it (`top`, null:
// none) and the innermost interpreter frame now: under an op, only an op placed by its own call
// frame (native_cut >= 0; autograd nodes and scopes have none) with no Python frame newer than
// the op's. Where this is false the Python-only path places the event (native_place).
inline bool nested_native_applies(const OpEntry* top, const void* py_frame) {
  return top == nullptr || (top->native_cut >= 0 && py_frame == top->py_frame);
}

// The context of an event under the open scope `top` (ScopeAnchor frames) whose innermost
// Python frame is not the scope's own: frames_above_op's frames under the scope's node, from the
// thread's scope chain (scope_chain.cpp). False where the chain cannot serve; the caller then
// walks and describes (walk_to_op_frame, context_under_op).
bool scope_chain_context(Lookup& lk, ThreadState* s, void* py_state, const OpEntry& top,
                         uint32_t* node, uint32_t* py_node);

// The context of the chain that dc_walk_python_since just recorded (the frames it added after
// index `kept` have no nodes yet), with the innermost described frame in *py_frame.
inline uint32_t chain_context(Lookup& lk, ThreadState* s, int kept, const void** py_frame) {
  dc_chain& c = s->chain;
  const int from = chain_nodes(nullptr, s, c, kept + 1, 0, 0);
  if (from < c.n) chain_nodes(&lk.writer(), s, c, from, 0, 0);
  *py_frame = c.n > 0 ? c.py_frame[c.n - 1] : nullptr;
  return c.n > 0 ? c.node[c.n - 1] : 0;
}

}  // namespace dc::detail
