// What the core keeps per thread: the operator shadow stack, the CPU-time sampler's ring, and
// the owner's caches. States belong to the registry (registry.h), which moves each through
// seen -> armed -> disarmed -> reaped, and are recycled, never freed.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include <sys/types.h>
#include <time.h>

#include "../callpath/python_walk.h"
#include "child_cache.h"
#include "native_context.h"
#include "node_memo.h"
#include "stack_paths.h"

namespace dc {

constexpr int kMaxPyDepth = 256;  // deeper stacks keep their innermost frames under <truncated>
constexpr int kMaxOpDepth = 128;
constexpr int kRing = 64;         // samples buffered per thread between drains (lazily paged in)
constexpr int kMaxNew = 48;       // frames a sample can describe (first sightings)
constexpr int kSampleText = 8192; // bytes of file and function names a sample can carry
constexpr int kMaxSampleCounters = 8;  // extra per-sample counters (perf counters), see Sample

// A field of an operator entry that another thread reads while the owner rewrites it: the
// sampler thread charges a polled worker's CPU time to the op open on the latest dispatching
// thread, reading that thread's top entry (node, epoch) as the owner may be popping it and
// pushing the next op into the same slot. Relaxed atomic loads and stores (plain moves on x86-64
// and arm64, so the operator hot path pays nothing) make that a defined race: the poller reads
// one whole value, of the old op or the new, never a torn one. Copies read and write it the same way.
class PolledU32 {
 public:
  PolledU32(uint32_t v = 0) : v_(v) {}  // NOLINT: implicit, it stands in for a uint32_t
  PolledU32(const PolledU32& o) : v_(o) {}
  PolledU32& operator=(const PolledU32& o) { return *this = static_cast<uint32_t>(o); }
  PolledU32& operator=(uint32_t v) {
    v_.store(v, std::memory_order_relaxed);
    return *this;
  }
  operator uint32_t() const { return v_.load(std::memory_order_relaxed); }  // NOLINT

 private:
  std::atomic<uint32_t> v_;
};

// Where the body of a scope (record_function) runs in Python. Its own frame (torch's op call in
// __enter__) returns before the body runs, and a returned frame's address is soon another's, so
// the frames outside it when it began are kept too, innermost first, each with its code object.
// An event in the body hangs below the innermost of those still on the stack, at the line that
// frame is on now (the `with` block's line). n == 0: an operator, whose frame stays live for as
// long as it is open (its address alone identifies it).
struct ScopeAnchor {
  static constexpr int kFrames = 4;  // a helper's contextmanager around record_function: 4 deep
  int n;
  const void* code;                  // the scope's own frame's code
  const void* frame[kFrames];
  const void* frame_code[kFrames];
};

// One context's counts in a thread's operator tally (OpTally, below): what an exit writes, in
// one cache line, with what the thread's next event looked up last time after this one.
struct alignas(64) OpTallySlot {
  uint32_t node;       // the op's context node
  uint32_t first_gen;  // owner-only: metrics generation of its last first call here
  int64_t count, ns, first_ns, autograd;
  // Owner-only: the next operator event entered after this op the last time, by the lines its
  // lookups read: the Python context's node, its own node, and the placed-frame slots of its
  // chain's innermost new frames (kNoPlaced: none). A loop runs the same events in the same
  // order, so the next event's lookups are fetched while its Python stack is walked
  // (ops.cpp: prefetch_next_event) instead of one after another, each a miss.
  uint32_t then_parent, then_node;
  uint16_t then_placed[2];
};
static_assert(sizeof(OpTallySlot) == 64, "one line");
// What the drains have folded of a slot (op_tally.cpp), apart: no drain writes the owner's line.
struct OpTallyFolded {
  int64_t count, ns, first_ns, autograd;
};

// Every event reads or writes most of an entry, and between two events torch's and the
// interpreter's own work evicts the L1 data cache: the fields an entry and exit touch come first,
// in the entry's first two lines (with the scope anchor's count), the rarely read ones after.
struct alignas(64) OpEntry {
  PolledU32 node;        // while `pending`: the ordinary parent context
  uint32_t frame;        // the op's frame id
  uint32_t py_node;      // innermost Python context node of this op
  PolledU32 epoch;       // session that opened it: an exit in another session charges nothing
  const void* py_frame;  // innermost interpreter frame when the op began (nullptr: none)
  uint64_t handle;
  int64_t seq_nr;        // >= 0 for a backward node's op (to nest its own re-entries)
  int64_t t0_ticks;      // now_ticks() at entry (clock.h)
  int64_t child_ns;      // time spent in nested ops, subtracted for exclusive op.time
  int64_t fwd_seq;       // forward op's sequence number (-1: none), recorded at exit if consumed
  uint64_t rf_tid;
  OpTallySlot* tally;    // its node's slot, found (and prefetched) at entry; null: look it up
  int native_cut;        // outermost-first native depth of its call frame (-1: none)
  bool pending;          // an engine wrapper waiting for its backward node
  bool scope;            // a non-op scope (a module): no op metrics, transparent to op.time
  ScopeAnchor anchor;    // a scope's frames outside py_frame (n == 0 for an operator)
  // With native_cut >= 0: the frames outside the call frame, innermost first (native_anchor_n of
  // them), by which a nested event's unwind finds where the op's own frames begin without
  // unwinding them (depth_at_anchor). Not the call frame's own return address: that moves while
  // the op runs (RecordFunction can run from `::call` itself, the kernel from another line of it,
  // and then no event inside would find it), the callers' cannot.
  static constexpr int kAnchor = 4;
  int native_anchor_n;
  uintptr_t native_anchor[kAnchor];
  uintptr_t entry_sp;    // a stack address in op_enter's frame: how deep below it an event inside
                         // runs picks the remembered stacks it is compared with (stack_paths.h);
                         // set with the native anchor, read only where that is
};
static_assert(offsetof(OpEntry, anchor) + sizeof(int) <= 128, "an event's fields: two lines");

// A thread's operator metrics, kept by the thread itself so that an operator's exit takes no
// lock, and folded into the tree by every drain (ops.cpp: fold_op_tallies). Counters only grow:
// the owner is their only writer (atomic stores, `count` last with release), and a drain adds
// what grew since it last looked (the f_* fields, the drain's own). Allocated zeroed at the
// thread's first exit, so pages are touched only as slots are used.
struct OpTally {
  static constexpr uint32_t kSlots = 1 << 14;  // full: the exit takes the tree lock instead
  using Slot = OpTallySlot;
  // Taken in order of first use (a node's slot is in its NodeMemo), so a step's exits walk them
  // nearly in order; slots below `used` are published (release) for the drain.
  Slot slots[kSlots];
  OpTallyFolded folded[kSlots];
  uint32_t used;
};

// One CPU sample, written by the signal handler on the sampled thread (only plain stores into
// this memory, which the thread's state owns) and folded into the tree by a drain.
struct Sample {
  uint32_t epoch;  // session it was taken in; a drain drops samples of another session
  int n;
  int weight;
  bool has_op;
  uint32_t op_node;
  uint32_t op_py_node;
  const void* op_frame;
  ScopeAnchor op_anchor;
  int op_native_cut;
  int n_ips;
  bool pc_only;  // ips[0] is the interrupted pc alone: the handler may not unwind there
  uintptr_t ips[kMaxNative];
  dc_raw_frame frames[kMaxPyDepth];
  uint64_t keys[kMaxPyDepth];  // python_key of each frame, computed while its code was alive
  int n_new;
  int new_index[kMaxNew];      // frames[new_index[i]] is described by news[i]
  struct New {
    int line;
    uint16_t file, name;       // offsets of NUL-terminated strings in `text`
  } news[kMaxNew];
  int text_used;
  char text[kSampleText];
  // Extra counters read at the sample point (e.g. CPU perf counters): deltas since the
  // thread's previous sample, charged as metric `counter_metric[i]` by the drain. The handler
  // fills them through set_sample_counters' reader (capture.h); none by default.
  int n_counters;
  uint64_t counters[kMaxSampleCounters];
};

// Whether two described frames run the same code object, by the identity fields the caches
// trust: the code, its file and name objects, its first line.
inline bool same_code(const dc_raw_frame& a, const dc_raw_frame& b) {
  return a.code == b.code && a.filename == b.filename && a.name == b.name &&
         a.firstlineno == b.firstlineno;
}

// How many outermost frames of `buf` (innermost first, n frames) run the same code at the same
// place as `outer_first[0 .. m)` (outermost first): the part of a recorded path still valid.
inline int same_prefix(const dc_raw_frame* buf, int n, const dc_raw_frame* outer_first, int m) {
  int common = 0;
  while (common < n && common < m) {
    const dc_raw_frame& a = buf[n - 1 - common];
    const dc_raw_frame& b = outer_first[common];
    if (a.offset != b.offset || !same_code(a, b)) break;
    ++common;
  }
  return common;
}

// The fingerprint of code object `code`, live at dc_code_epoch() `epoch`: from `memo` (its
// owner's: DC_CODE_MEMO_SLOTS entries, or null) when it holds that code object at that epoch (no
// code object has died since, so the address is still that object), else computed and kept.
inline uint64_t code_fingerprint(dc_code_memo* memo, void* code, uint32_t epoch) {
  if (memo == nullptr || (epoch & 0x80000000u)) return dc_code_fingerprint(code, 0);  // (unwatched)
  dc_code_memo& m = memo[dc_code_memo_slot(code)];
  if (m.code != code || m.epoch != epoch) m = dc_code_memo{code, epoch, dc_code_fingerprint(code, 0)};
  return m.fingerprint;
}

// The fingerprint of `f`: `fp`, memoized for the frame `was` at dc_code_epoch() `fp_epoch`, when
// `f` runs the same code and no code object has died since (`epoch`); else code_fingerprint's.
inline uint64_t memoized_fingerprint(const dc_raw_frame& f, const dc_raw_frame& was, uint64_t fp,
                                     uint32_t fp_epoch, uint32_t epoch, dc_code_memo* memo) {
  if (was.code != nullptr && fp_epoch == epoch && same_code(f, was)) return fp;
  return code_fingerprint(memo, f.code, epoch);
}

// How the thread's CPU time is measured.
enum class Role : uint8_t {
  Signaled,  // runs Python or operators: a CPU-time timer and SIGPROF with a stack
  Polled,    // a pool we did not see run Python or an op (XLA, OpenMP, BLAS): its CPU clock is
             // read from the sampler thread, never interrupted (XLA:CPU does not survive signals)
  Ignored,   // the profiler's own threads
};

// The registry's lifecycle of a state (registry.cpp changes it, under its lock).
enum class Phase : uint8_t { Free, Seen, Armed, Disarmed };

struct ThreadState {
  // -- owned by the registry (its lock) --
  pid_t tid = 0;
  Role role = Role::Signaled;
  std::atomic<Phase> phase{Phase::Free};
  timer_t timer{};
  bool has_timer = false;
  clockid_t clock{};            // the thread's CPU clock
  int64_t polled_cpu_ns = -1;   // Polled: clock reading at the last poll (-1: none yet)
  uint32_t thread_node = 0;     // "[thread] <name>" for threads that run no Python (0: none)
  uint32_t generation = 0;      // bumped at every reuse
  unsigned long long start_ticks = 0;  // when the thread started (a reused id differs)
  // Set by the owner's thread-exit hook, nothing else happens there: the reaper folds the ring
  // in and frees the state once the thread id is gone.
  std::atomic<bool> exited{false};

  // -- the operator stack: written by the owner, read by its signal handler and the poller --
  OpEntry ops[kMaxOpDepth];
  std::atomic<int> depth{0};
  int overflow = 0;  // pushes beyond kMaxOpDepth, ignored but counted so pops stay balanced

  OpTally* tally = nullptr;  // published with release at the owner's first op exit

  // -- the ring: the handler writes at head, a drain (registry lock held) reads from tail --
  Sample* ring = nullptr;
  std::atomic<uint32_t> head{0}, tail{0};
  std::atomic<uint32_t> dropped{0};

  // The signal handler's memo of code objects seen live (dc_walk_python_sampled): its only
  // reader and writer.
  dc_code_memo code_memo[DC_CODE_MEMO_SLOTS] = {};
  // The owner's own, for the operator path's fingerprints (code_fingerprint).
  dc_code_memo op_code_memo[DC_CODE_MEMO_SLOTS] = {};

  // -- owner-only caches (reset on reuse) --
  // Prefix cache of the last full Python path, outermost first.
  int cache_n = 0;
  dc_raw_frame cache_frame[kMaxPyDepth];  // compared by identity fields, not by hash
  uint32_t cache_node[kMaxPyDepth];
  // The chain of interpreter frames at the last operator entered outside any other, which the
  // next one's walk checks by address instead of describing again (context.cpp: chain_nodes).
  dc_chain chain{};
  // The same for events inside an open scope whose Python runs newer than the scope's frame (the
  // optimizer's per-parameter loop inside its step's scope: a quarter of a GPT-2 training step's
  // events), with the frames newer than the scope's anchor placed under the scope's node
  // (scope_chain.cpp: scope_chain_context), and where the last such event found the anchor.
  dc_chain scope_chain{};
  struct ScopePlace {
    bool valid = false;
    uint64_t handle = 0;  // the scope (its handle, node and session) the chain's nodes are under
    uint32_t node = 0, epoch = 0;
    int at = -1;          // chain index of the frame frames_above_op matched (-1: none)
    int kind = -1;        // 0: the scope's own frame; j + 1: anchor frame j
    int first = 0;        // chain index of the outermost frame placed under the scope
  } scope_place;
  uint64_t cache_fp[kMaxPyDepth];  // dc_code_fingerprint of cache_frame[i]'s code
  uint32_t cache_fp_epoch[kMaxPyDepth];  // dc_code_epoch() when cache_fp[i] was taken
  uint32_t cache_epoch = 0;              // dc_code_epoch() when the cached path was checked
  // The cached path and fingerprints trust code objects' addresses: not past a code object's
  // death, after which another can have the address (and its strings their strings').
  uint32_t checked_epoch() {
    const uint32_t e = dc_code_epoch();
    if (e != cache_epoch) {
      cache_n = 0;
      cache_epoch = e;
    }
    return e;
  }
  // The fingerprint of `f`, a frame at depth i (outermost 0) of a path being cached: the one
  // cached at i when that frame ran the same code (only its line moved, the common case) and no
  // code object has died since; else computed.
  uint64_t fingerprint_at(int i, const dc_raw_frame& f, uint32_t epoch) {
    return memoized_fingerprint(f, cache_frame[i], cache_fp[i], cache_fp_epoch[i], epoch,
                                op_code_memo);
  }
  // How many outermost frames of `buf` (innermost first, n frames) equal the cached path.
  int cached_prefix(const dc_raw_frame* buf, int n) const {
    return same_prefix(buf, n, cache_frame, cache_n);
  }
  // Prefix cache of the last path looked up under an open op (cached_under_op): the Python
  // frames newer than the op's own frame or its scope's anchor, outermost first, below `base`.
  // A scope's body (the optimizer's single-tensor loop) runs the same outer frames for every
  // op in it, so only the frames below the first that moved are looked up again.
  struct UnderOpCache {
    static constexpr int kFrames = 64;  // frames past these are looked up every time
    uint32_t base = 0;
    uint32_t epoch = 0;  // dc_code_epoch() when it was filled: the frames trust code addresses
    int n = 0;
    dc_raw_frame frame[kFrames];
    uint64_t fp[kFrames];
    uint32_t node[kFrames];
  };
  UnderOpCache under_op_path;
  // Operator name -> frame id, by text: (length, hash) -> op_name_texts index.
  struct OpName {
    uint32_t frame = 0;
    std::string text;
  };
  ChildCache op_name_ids;
  std::vector<OpName> op_name_texts;
  // In front of it, by pointer. Names of backward ops point into reused temporaries, so a hit
  // needs the same pointer and the same text (op_name_texts[text]'s: a miss copies nothing).
  struct OpNameSlot {
    const char* ptr = nullptr;
    uint32_t frame = 0;
    uint32_t text = 0;
  };
  // 1,024 slots, by a multiplicative hash of the address: with 256 slots by the address's low
  // bits, 11% of GPT-2 generate's events (distinct names at colliding addresses, taking turns)
  // went the way of the text (op_frame_by_text: ~120 instructions and ~14 L1i misses each).
  static constexpr int kOpNameBits = 10;
  OpNameSlot op_names[1u << kOpNameBits];
  // Scope frames (the module layer's paths) by the name's address, checked by text: the layer
  // passes each module's cached path string, so a hit needs no tree lock.
  struct ScopeNameSlot {
    const char* ptr = nullptr;
    int kind = -1;
    uint32_t frame = 0;
    std::string name, extra;
  };
  ScopeNameSlot scope_names[256];
  // Scope contexts: (open scope's node, the frames between its frame and the new scope's) ->
  // node. A module's scope opens a few frames below its parent's (the parent's forward line, then
  // torch's call frames), the same frames for every call from that line, where cached_under_op's
  // one-path cache is refilled by the ops in between. Trusts code addresses as far as `epoch`.
  struct ScopeMemo {
    uint64_t key = 0;
    uint32_t base = 0, epoch = 0, node = 0;
  };
  ScopeMemo scope_memo[256];
  // (parent, op frame) -> node and (parent, python_key) -> node: nodes are never removed, so a
  // hit is exact (child_cache.h).
  ChildCache op_children;
  ChildCache py_children;
  // In front of both (and of the tally's slots): by node id, near in memory for events near in
  // time (node_memo.h).
  NodeMemoTable node_memo;
  // In front of all of them for the chain's new frames (context.cpp: chain_nodes): (parent node,
  // instruction pointer) -> node, trusted while no code object has died since (dc_code_epoch):
  // a live frame's instruction pointer lies in its code object's own bytecode, so it names that
  // code object and the place in it, and what was learned of the address then still holds. A hit
  // neither describes the frame nor hashes its code's identity (~300 instructions a new frame on
  // GPT-2 generate, two new frames an event: cpu-2026-12-06-python-context-7f83c35.md).
  // Direct-mapped; zero-filled entries match no live frame.
  struct PlacedFrame {
    const void* instr = nullptr;
    uint32_t parent = 0, epoch = 0, node = 0;
  };
  static constexpr uint32_t kPlacedBits = 12;
  static constexpr uint16_t kNoPlaced = 0xFFFF;
  PlacedFrame placed[1u << kPlacedBits];
  static uint16_t placed_index(const void* instr, uint32_t parent) {
    const uint64_t h = (reinterpret_cast<uintptr_t>(instr) ^ (static_cast<uint64_t>(parent) << 32)) *
                       0x9E3779B97F4A7C15ull;
    return static_cast<uint16_t>(h >> (64 - kPlacedBits));
  }
  // The placed-frame slots this event's chain looked up, the innermost last (kNoPlaced: none),
  // and the tally slot + 1 of the last operator event entered (0: none): what the next event
  // records as having come after it (OpTallySlot::then_placed).
  uint16_t placed_used[2] = {kNoPlaced, kNoPlaced};
  uint32_t last_tally = 0;
  // The context of the last autograd node entered outside any operator on this thread, in
  // session `after_node_epoch`: where the engine's bookkeeping after it goes (DC_OP_AFTER_NODE).
  uint32_t after_node = 0, after_node_py = 0, after_node_epoch = 0;
  // Memo of native placements: hash of everything a placement depends on (both stacks, the
  // open op, the op's name; see native_key) -> where the event hangs. A splice costs about
  // 1 us, a hit the hash; nodes are never removed, so a hit stays valid. Sets of 4 (lookup.h:
  // memo_find): direct-mapped, GPT-2 generate's 193 placements shared 65 slots and evicted each
  // other for a fifth of its events.
  struct NativeMemo {
    uint64_t key = 0;  // 0: empty
    uint32_t node = 0, py_node = 0;
    int cut = -1;
  };
  static constexpr uint32_t kMemoSets = 256, kMemoWays = 4;
  NativeMemo native_memo[kMemoSets * kMemoWays];
  // How many native frames an event inside a placed op unwinds first, [0] operators, [1] other
  // events (launches, allocations): enough to reach the op's call frame, grown where it was not
  // (0: not set yet; unwind_inside).
  int unwind_hint[2] = {0, 0};
  // Native stacks seen inside placed ops (allocated at the first; never freed, like the state),
  // and the top of this thread's stack, past which none of their slots is read (0: not known).
  std::atomic<detail::StackPaths*> stack_paths{nullptr};
  std::atomic<uint64_t> native_unwinds{0};  // by operator events and launches (owner writes)
  uintptr_t stack_hi = 0;
};

}  // namespace dc
