// Where an event is: the calling thread's Python path (prefix-cached), the open operator, and
// with native frames the spliced path, as a tree node.
#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string_view>

#include "../callpath/native_stack.h"
#include "capture_internal.h"
#include "key_mix.h"

namespace dc::detail {
namespace {

// Python frames buf[from-1 .. 0] (outer to inner) under `base`.
uint32_t intern_under(TreeWriter& t, const Describer& d, uint32_t base, const dc_raw_frame* buf,
                      int from) {
  uint32_t node = base;
  for (int i = from - 1; i >= 0; --i) node = t.child(node, d.frame(t, buf, i));
  return node;
}

// A live frame's node under `parent`, memoized in the owner's ThreadState::py_children
// (what cached_python_node and cached_under_op look up).
uint32_t live_child(TreeWriter& t, ThreadState* s, uint32_t parent, const dc_raw_frame& f,
                    uint64_t fingerprint) {
  const uint64_t key = python_key(f, fingerprint);
  const uint32_t node = t.child(parent, t.python_frame(f, true, nullptr, key));
  s->py_children.put(parent, key, node);
  return node;
}

// intern_under for live frames, memoized.
uint32_t intern_under_memoized(TreeWriter& t, ThreadState* s, uint32_t base,
                               const dc_raw_frame* buf, int from) {
  const uint32_t epoch = dc_code_epoch();
  uint32_t node = base;
  for (int i = from - 1; i >= 0; --i)
    node = live_child(t, s, node, buf[i], code_fingerprint(s->op_code_memo, buf[i].code, epoch));
  return node;
}

// A full Python path from the root, reusing the longest common prefix with the last one.
uint32_t intern_full(TreeWriter& t, const Describer& d, ThreadState* s, const dc_raw_frame* buf, int n) {
  uint32_t node = 0;
  if (n >= kMaxPyDepth) node = t.child(0, t.named_frame(Kind::Marker, "<truncated>"));
  if (s == nullptr) return intern_under(t, d, node, buf, n);
  const uint32_t epoch = s->checked_epoch();
  int common = s->cached_prefix(buf, n);
  if (common > 0) node = s->cache_node[common - 1];
  for (int i = common; i < n; ++i) {
    const dc_raw_frame& f = buf[n - 1 - i];
    const uint64_t fp = s->fingerprint_at(i, f, epoch);
    if (d.sample == nullptr) {  // live frames: memoized for cached_python_node
      node = live_child(t, s, node, f, fp);
    } else {
      node = t.child(node, d.frame(t, buf, n - 1 - i));
    }
    s->cache_fp[i] = fp;
    s->cache_fp_epoch[i] = epoch;
    s->cache_frame[i] = f;
    s->cache_node[i] = node;
  }
  s->cache_n = n;
  return node;
}

}  // namespace

bool cached_python_node(ThreadState* s, const dc_raw_frame* buf, int n, uint32_t* node) {
  if (n <= 0 || n >= kMaxPyDepth) return false;
  const uint32_t epoch = s->checked_epoch();
  const int common = s->cached_prefix(buf, n);
  for (int i = common; i < n; ++i) {
    const dc_raw_frame& f = buf[n - 1 - i];
    const uint32_t parent = i > 0 ? s->cache_node[i - 1] : 0;
    const uint64_t fp = s->fingerprint_at(i, f, epoch);
    const uint32_t child = s->py_children.find(parent, python_key(f, fp));
    if (child == ChildCache::kNone) {
      s->cache_n = i;  // entries below i hold this path; those above, an older one
      return false;
    }
    s->cache_fp[i] = fp;
    s->cache_fp_epoch[i] = epoch;
    s->cache_frame[i] = f;
    s->cache_node[i] = child;
  }
  if (common < n) s->cache_n = n;
  *node = s->cache_node[n - 1];
  return true;
}

int chain_nodes(TreeWriter* t, ThreadState* s, dc_chain& c, int from, int first, uint32_t base) {
  const uint32_t epoch = c.deaths;  // (the walk's: no Python has run since)
  for (int i = from; i < c.n; ++i) {
    const uint32_t parent = i > first ? c.node[i - 1] : base;
    if (c.code[i] == nullptr) {  // a shim or a frame being set up: the context of the frame outside
      c.node[i] = parent;
      c.py_frame[i] = i > first ? c.py_frame[i - 1] : nullptr;
      continue;
    }
    const void* const instr = c.link[i].instr;
    const uint16_t slot = ThreadState::placed_index(instr, parent);
    s->placed_used[0] = s->placed_used[1];
    s->placed_used[1] = slot;
    ThreadState::PlacedFrame& placed = s->placed[slot];
    uint32_t child = 0;
    if (placed.instr == instr && placed.parent == parent && placed.epoch == epoch) {
      child = placed.node;
    } else {
      dc_raw_frame f;
      dc_describe_frame(c.link[i].frame, &f);  // (it has code: 1)
      const uint64_t fp = code_fingerprint(s->op_code_memo, f.code, epoch);
      const uint64_t key = python_key(f, fp);
      // What came after the node recorded here before, under the same parent (the next line of
      // a function whose lines run in the same order every step): no hashed lookup.
      NodeMemo* before = s->node_memo.at(c.node[i]);
      const uint64_t after = after_key(key, parent);
      child = before != nullptr && before->next_key == after ? before->next_node : 0;
      if (child == 0) {
        if (t == nullptr) {
          child = s->py_children.find(parent, key);
          if (child == ChildCache::kNone) return i;
        } else {
          child = live_child(*t, s, parent, f, fp);
        }
        if (before != nullptr) {
          before->next_key = after;
          before->next_node = child;
        }
      }
      placed = ThreadState::PlacedFrame{instr, parent, epoch, child};
    }
    c.node[i] = child;
    c.py_frame[i] = c.link[i].frame;
  }
  return c.n;
}

namespace {
// frames_above_op's count, or -1 when neither the op's frame nor (for a scope) an anchor frame is
// among them. The op's own frame is matched by its code too for a scope, whose frame's address
// may be another's now; an anchor goes below the scope with the frames newer than it, at its
// line now.
int frames_above_op_found(const dc_raw_frame* buf, int n, const void* op_frame,
                          const ScopeAnchor* a) {
  const bool scope = a != nullptr && a->n > 0;
  for (int k = 0; k < n; ++k)
    if (buf[k].frame == op_frame && (!scope || buf[k].code == a->code)) return k;
  if (!scope) return -1;
  // The innermost anchor on the stack is the first found in order: the ones outside a live
  // frame (its callers) are live too.
  for (int j = 0; j < a->n; ++j)
    for (int k = 0; k < n; ++k)
      if (buf[k].frame == a->frame[j] && buf[k].code == a->frame_code[j]) return k + 1;
  return -1;
}
}  // namespace

int frames_above_op(const dc_raw_frame* buf, int n, const void* op_frame, const ScopeAnchor* a) {
  if (op_frame == nullptr) return n;
  // Neither there (a scope whose frames have all returned): attach to the op itself.
  return std::max(0, frames_above_op_found(buf, n, op_frame, a));
}

// Python that runs inside an op runs either a few frames newer than the op's own (a
// TorchDispatchMode, a scope entered in the function that runs inside it), or, inside a scope,
// after the scope's frame has returned (the optimizer's step and any `with record_function(...)`
// block: the scope opens in __enter__), a few frames newer than the scope's anchor (the
// optimizer's loop: five). Walks of 8 and then 16 frames find either; the whole stack is walked
// only where it is deeper. An operator's frame that is gone (its address not on the chain, which
// the chain's pointers alone tell) needs no walk.
int walk_to_op_frame(void* py_state, dc_raw_frame* buf, int have, const void* op_frame,
                     const ScopeAnchor* a, int* above) {
  // An op entered with no Python frame (a backward node on the autograd thread): every frame
  // now is newer than it (a compiled backward's Python runs inside it), so all of them count.
  if (op_frame == nullptr) return *above = dc_walk_python(py_state, buf, kMaxPyDepth);
  const bool scope = a != nullptr && a->n > 0;
  if (!scope && !dc_python_frame_on_chain(py_state, op_frame, 4 * kMaxPyDepth)) {
    *above = 0;  // (the op's frame is not among them: the op is the context)
    return have;
  }
  for (int walk : {8, 16}) {
    const int n = dc_walk_python(py_state, buf, walk);
    const int k = frames_above_op_found(buf, n, op_frame, a);
    if (k >= 0 || n < walk) {  // (found, or the whole stack)
      *above = std::max(0, k);
      return n;
    }
  }
  const int n = dc_walk_python(py_state, buf, kMaxPyDepth);
  *above = frames_above_op(buf, n, op_frame, a);
  return n;
}

void set_scope_anchor(void* py_state, const void* py_frame, ScopeAnchor* a) {
  a->n = 0;
  dc_raw_frame buf[1 + ScopeAnchor::kFrames];
  const int n = py_state && py_frame ? dc_walk_python(py_state, buf, 1 + ScopeAnchor::kFrames) : 0;
  if (n == 0 || buf[0].frame != py_frame) return;
  a->code = buf[0].code;
  for (int i = 1; i < n; ++i) {
    a->frame[i - 1] = buf[i].frame;
    a->frame_code[i - 1] = buf[i].code;
  }
  a->n = n - 1;
}

bool cached_under_op(ThreadState* s, uint32_t op_node, const dc_raw_frame* buf, int k,
                     uint32_t* node) {
  ThreadState::UnderOpCache& c = s->under_op_path;
  constexpr int kKept = ThreadState::UnderOpCache::kFrames;  // (frames past it: looked up each time)
  const uint32_t epoch = dc_code_epoch();
  if (c.base != op_node || c.epoch != epoch) {
    c.base = op_node;
    c.epoch = epoch;
    c.n = 0;
  }
  // The frames outside the first that moved have the nodes they had (the same code at the same
  // place, under the same op, is the same path).
  const int common = same_prefix(buf, k, c.frame, c.n);
  uint32_t n = common > 0 ? c.node[common - 1] : op_node;
  for (int i = common; i < k; ++i) {
    const dc_raw_frame& f = buf[k - 1 - i];
    const uint64_t fp = i < c.n ? memoized_fingerprint(f, c.frame[i], c.fp[i], c.epoch, epoch,
                                                       s->op_code_memo)
                                : code_fingerprint(s->op_code_memo, f.code, epoch);
    const uint64_t key = python_key(f, fp);
    // What came after the node at this depth last time, under the same parent: a compiled
    // graph's wrapper calls its kernels' launchers line after line in the same order every step,
    // so the successor memo (by node id, near in memory) answers where the hashed memo would
    // touch a random cache line per frame (the autograd thread's compiled backward: ~0.25 us).
    NodeMemo* before = i < c.n ? s->node_memo.at(c.node[i]) : nullptr;
    const uint64_t after = after_key(key, n);
    uint32_t child = before != nullptr && before->next_key == after ? before->next_node : 0;
    if (child == 0) {
      child = s->py_children.find(n, key);
      if (child == ChildCache::kNone) {
        c.n = std::min(i, kKept);  // entries below i hold this path
        return false;
      }
      if (before != nullptr) {
        before->next_key = after;
        before->next_node = child;
      }
    }
    n = child;
    if (i < kKept) {
      c.frame[i] = f;
      c.fp[i] = fp;
      c.node[i] = n;
    }
  }
  c.n = std::min(k, kKept);
  *node = n;
  return true;
}

// The context node for Python frames `buf` (innermost first) with `top` the innermost open op.
// Sets *py_node to the innermost Python node of that context.
uint32_t node_for(TreeWriter& t, const Describer& d, ThreadState* cache, const dc_raw_frame* buf, int n,
                  bool has_op, uint32_t op_node, uint32_t op_py_node, const void* op_frame,
                  const ScopeAnchor* op_anchor, uint32_t* py_node) {
  if (!has_op) {
    uint32_t node = n > 0 ? intern_full(t, d, cache, buf, n) : 0;
    if (py_node) *py_node = node;
    return node;
  }
  const int k = frames_above_op(buf, n, op_frame, op_anchor);
  if (k == 0) {
    if (py_node) *py_node = op_py_node;
    return op_node;
  }
  uint32_t node = cache != nullptr && d.sample == nullptr
                      ? intern_under_memoized(t, cache, op_node, buf, k)
                      : intern_under(t, d, op_node, buf, k);
  if (py_node) *py_node = node;
  return node;
}

// The context of an event with native frames spliced in; false when that does not apply (no
// native stack, stacks that cannot be paired, or Python frames newer than the open operator),
// and the caller takes the Python-only path.
bool native_place(TreeWriter& t, const Describer& d, const uintptr_t* ips, int n_ips,
                  const dc_raw_frame* buf, int n, const OpEntry* top, const char* op_name,
                  NativePlace* out, bool leaf_is_pc) {
  if (n_ips <= 0) return false;
  if (top == nullptr) {
    *out = place_top_level(t, ips, n_ips, buf, n, [&](int i) { return d.frame(t, buf, i); },
                           op_name, leaf_is_pc);
    return out->spliced;
  }
  if ((n > 0 ? buf[0].frame : nullptr) != top->py_frame) return false;
  *out = place_nested(t, top->node, top->native_cut, ips, n_ips, op_name, leaf_is_pc);
  out->py_node = top->py_node;
  return out->spliced;
}

uint64_t native_key(const uintptr_t* ips, int n_read, int n_ips, const dc_raw_frame* buf, int n,
                    const OpEntry* top, uint64_t what) {
  if (n_ips <= 0) return 0;
  if (top != nullptr && (n > 0 ? buf[0].frame : nullptr) != top->py_frame) return 0;
  // Two lanes: independent multiply chains run in parallel. (Frames past n_read are the open
  // op's, which its node and cut below stand for.)
  uint64_t a = key_mix(0x243F6A8885A308D3ull, static_cast<uint64_t>(n_ips)), b = 0x13198A2E03707344ull;
  int i = 0;
  for (; i + 1 < n_read; i += 2) {
    a = key_mix(a, ips[i]);
    b = key_mix(b, ips[i + 1]);
  }
  if (i < n_read) a = key_mix(a, ips[i]);
  if (top != nullptr) {
    a = key_mix(a, top->node);
    b = key_mix(b, static_cast<uint64_t>(static_cast<uint32_t>(top->native_cut)) | (1ull << 40));
  } else {
    b = key_mix(b, static_cast<uint64_t>(n));
    for (int j = 0; j < n; ++j) {  // the identity fields Tree::python_frame interns by
      a = key_mix(a, reinterpret_cast<uintptr_t>(buf[j].code) ^
                         (static_cast<uint64_t>(static_cast<uint32_t>(buf[j].offset)) << 1) ^
                         static_cast<uint64_t>(buf[j].entry & 1));
      b = key_mix(b, reinterpret_cast<uintptr_t>(buf[j].filename) ^
                         (static_cast<uint64_t>(static_cast<uint32_t>(buf[j].firstlineno)) << 3));
      a = key_mix(a, reinterpret_cast<uintptr_t>(buf[j].name));
    }
  }
  uint64_t h = key_mix(a, b);
  h = key_mix(h, what);
  return h ? h : 1;
}

namespace {
// The depth of the whole stack whose first n frames are `ips`, where they reach `top`'s call
// frame (the frames recorded outside it follow each other there, the call frame just inside
// them); -1 where they do not.
int depth_at_anchor(const OpEntry& top, const uintptr_t* ips, int n) {
  const int m = top.native_anchor_n;
  if (top.native_cut < 0 || m <= 0) return -1;
  for (int j = 1; j + m <= n; ++j)  // (j - 1: the call frame's index, innermost first)
    if (std::equal(top.native_anchor, top.native_anchor + m, ips + j)) return j + top.native_cut;
  return -1;
}

// The first hint: what reaches the call frame of most events, [0] an operator inside another
// (GPT-2: at most 11 frames inside, plus the anchor), [1] a launch or an allocation (the driver's
// and CUPTI's frames too). DEEPCONTEXT_UNWIND_INSIDE=full unwinds every stack whole (the
// reference the tests compare with); =N starts both at N frames.
constexpr int kWhole = -1;
int first_unwind_hint(int which) {
  static const int forced = [] {
    const char* v = std::getenv("DEEPCONTEXT_UNWIND_INSIDE");
    if (v == nullptr || *v == '\0') return 0;
    return std::strcmp(v, "full") == 0 ? kWhole : std::clamp(std::atoi(v), 1, kMaxNative);
  }();
  return forced != 0 ? forced : which == 0 ? 24 : 48;
}

// An unwind's frame count, the unwind counted (ThreadState::native_unwinds).
inline int counted(ThreadState* s, int n) {
  s->native_unwinds.store(s->native_unwinds.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return n;
}

// The highest address of the calling thread's stack (0: unknown).
uintptr_t stack_top() {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
  void* lo = nullptr;
  size_t size = 0;
  const bool ok = pthread_attr_getstack(&attr, &lo, &size) == 0;
  pthread_attr_destroy(&attr);
  return ok ? reinterpret_cast<uintptr_t>(lo) + size : 0;
}

// A stack this thread remembers under `key` that the one above `base` (the caller's frame
// address) has, into ips (stack_paths.h).
inline bool recall(ThreadState* s, uint64_t key, uintptr_t base, uintptr_t* ips, int* n_read) {
  if (s->stack_hi == 0) s->stack_hi = stack_top();
  StackPaths* const known = s->stack_paths.load(std::memory_order_relaxed);
  return known != nullptr && recall_stack(known, key, base, s->stack_hi, ips, n_read);
}

// Remembers the stack `ips` (n frames, unwound by the caller with skip 2) under `key`. Inlined:
// the frames and slots are read from the caller's own frame, whose address is `base`. Learning
// costs a slow unwind (~10 us): while stacks are new, and for at most one event in 8 once they
// repeat (where slots never hold, e.g. frames sized at run time).
[[gnu::always_inline]] inline void learn(ThreadState* s, uint64_t key, uintptr_t base,
                                         const uintptr_t* ips, int n) {
  StackPaths* p = s->stack_paths.load(std::memory_order_relaxed);
  if (s->stack_hi == 0 || n > StackPaths::kFrames ||
      (p != nullptr && p->learned.load(std::memory_order_relaxed) >=
                           64 + p->recalled.load(std::memory_order_relaxed) / 8))
    return;
  if (p == nullptr) {
    p = new StackPaths();
    s->stack_paths.store(p, std::memory_order_release);
  }
  uintptr_t slot_ips[StackPaths::kFrames], slots[StackPaths::kFrames];
  const int m = native::backtrace_slots(slot_ips, slots, n, 2);
  remember_stack(p, key, base, ips, n, slot_ips, slots, m);
}
}  // namespace

int unwind_inside(ThreadState* s, const OpEntry& top, int which, uintptr_t* ips, int* n_read) {
  int& hint = s->unwind_hint[which];
  if (hint == 0) hint = first_unwind_hint(which);
  // (skip 2: this frame and the caller's, as the caller's own native::backtrace(.., 1) would)
  if (hint == kWhole) return *n_read = counted(s, native::backtrace(ips, kMaxNative, 2));
  // A stack seen before, where its slots still hold its frames: no unwind (stack_paths.h).
  const uintptr_t base = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  const uint64_t key = stack_path_key(top.node, which, static_cast<intptr_t>(top.entry_sp - base));
  if (recall(s, key, base, ips, n_read)) {
    const int depth = depth_at_anchor(top, ips, *n_read);
    if (depth >= 0) return depth;
  }
  int n = counted(s, native::backtrace(ips, std::min(hint, kMaxNative), 2));
  int depth = depth_at_anchor(top, ips, n);
  if (depth < 0 && n == hint && hint < kMaxNative) {  // (n < hint: the whole stack was read)
    n = counted(s, native::backtrace(ips, kMaxNative, 2));
    depth = depth_at_anchor(top, ips, n);
    // The call frame's index, its anchor, and room for variation; where even the whole stack
    // lacks it (another stack than the op's), whole unwinds from now on: never two per event.
    hint = depth >= 0 ? std::min(kMaxNative, std::max(hint, depth - top.native_cut + OpEntry::kAnchor + 8))
                      : kMaxNative;
  }
  *n_read = n;
  if (depth >= 0) learn(s, key, base, ips, n);
  return depth >= 0 ? depth : n;
}

int unwind_whole(ThreadState* s, int which, uint64_t what, uintptr_t* ips) {
  if (first_unwind_hint(0) == kWhole) return counted(s, native::backtrace(ips, kMaxNative, 2));
  const uintptr_t base = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (s->stack_hi == 0) s->stack_hi = stack_top();
  // (the stack's depth: events at the same depth under the same op name share a set)
  const uint64_t key = stack_path_key(what, which + 2,
                                      static_cast<intptr_t>(s->stack_hi - base));
  int n = 0;
  if (recall(s, key, base, ips, &n)) return n;
  n = counted(s, native::backtrace(ips, kMaxNative, 2));
  if (n < kMaxNative) learn(s, key, base, ips, n);  // (a truncated stack: its outer frames vary)
  return n;
}

void set_native_anchor(OpEntry& e, const uintptr_t* ips, int n_read, int n_ips, int cut) {
  const int outside = n_ips - cut;  // innermost-first index of the call frame's caller
  e.native_anchor_n = 0;
  if (cut < 0 || outside < 1 || outside >= n_read) return;
  e.native_anchor_n = std::min(OpEntry::kAnchor, n_read - outside);
  std::copy(ips + outside, ips + outside + e.native_anchor_n, e.native_anchor);
}

}  // namespace dc::detail
