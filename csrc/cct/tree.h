// The native calling context tree: an arena of nodes (parent, frame) with exclusive metrics,
// aggregated online so memory grows with distinct contexts, never with run time.
//
// One object, one lock, a narrow interface: every change goes through a TreeWriter (the lock
// held for its lifetime): intern a frame, intern a child, add a metric. Reading is a snapshot.
// No other file sees the storage or the lock. Nodes and frames are never removed, so their ids
// can be cached anywhere.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "../callpath/python_walk.h"

namespace dc {

enum class Kind : uint8_t {
  Root = 0, Python, Op, Native, Kernel, Memcpy, Memset, Sync, Marker, Thread, Module, Instruction,
  Hook  // a declared hook's call (csrc/hooks)
};
const char* kind_name(Kind k);

// A Python frame's description, taken while its code object was alive (no GIL needed).
struct CodeText {
  const char* file;
  const char* name;
  int line;
};

// Identity of a Python frame: code object, bytecode offset, its filename/name objects and first
// line, and `fingerprint` (dc_code_fingerprint: the cached hashes of its filename and qualified
// name), so a new code object at a recycled address, with recycled name objects, gets a new key.
uint64_t python_key(const dc_raw_frame& f, uint64_t fingerprint);

// Set of Python keys already described in the tree; the sampler's signal handler reads it
// (lock-free, bounded probes) to copy descriptions only for frames it has not seen. Full: every
// lookup misses and the handler describes again (more work, never a wrong name).
bool known_python_key(uint64_t key);

struct SnapshotFrame {
  Kind kind;
  std::string name, file, extra;
  int line;
};
struct Snapshot {
  std::vector<std::pair<uint32_t, uint32_t>> nodes;  // (parent, frame)
  std::vector<SnapshotFrame> frames;
  std::vector<std::string> metric_names;
  std::vector<std::tuple<uint32_t, uint32_t, double>> metrics;  // (node, metric, value), non-zero
  std::vector<uint32_t> ids;  // each node's id in the tree
};

class Tree;

// Exclusive access to the tree for as long as it lives (it holds the tree's lock).
class TreeWriter {
 public:
  explicit TreeWriter(Tree& t);
  TreeWriter(const TreeWriter&) = delete;
  TreeWriter& operator=(const TreeWriter&) = delete;

  // The frame for f. `live`: its code object is running on this thread and may be read now;
  // otherwise `info` (may be null: "not yet described") carries the description taken when it
  // was. `key`: python_key(f, ...) computed while the code was alive (0: compute it now, live).
  uint32_t python_frame(const dc_raw_frame& f, bool live, const CodeText* info = nullptr,
                        uint64_t key = 0);
  uint32_t named_frame(Kind kind, const std::string& name, const std::string& extra = "");
  // A native frame by return address; symbolized at snapshot time, outside the lock.
  uint32_t native_frame(uintptr_t ip);
  // A native frame that stands for a whole function (sampled leaves), already symbolized.
  uint32_t native_function_frame(const std::string& name, const std::string& library);
  uint32_t child(uint32_t parent, uint32_t frame);
  void add(uint32_t node, uint32_t metric, double v);

  bool has_node(uint32_t node) const;
  double value(uint32_t node, uint32_t metric) const;  // exclusive value (0 when never added)
  uint32_t parent(uint32_t node) const;
  uint32_t frame_of(uint32_t node) const;
  // Frames from the root to `node`, outermost first.
  std::vector<SnapshotFrame> path(uint32_t node) const;

 private:
  Tree& t_;
  std::lock_guard<std::mutex> lock_;
};

class Tree {
 public:
  Tree();
  uint32_t metric_id(const std::string& name);
  // The contexts that carry a non-zero metric (the tree's own, or one of `rows`: metrics kept
  // elsewhere, by tree id) or are in `keep`, their ancestors, and the frames they use, numbered
  // densely in the tree's order (a parent before its children). The tree outlives sessions (its
  // ids stay valid for the hooks): without the cut, every flush of a session would copy, and
  // rebuild in Python, every context any earlier session of the process made. Native frames
  // added since the last snapshot are symbolized first, outside the lock (it reads files).
  Snapshot snapshot(const std::vector<uint32_t>& keep,
                    const std::vector<std::tuple<uint32_t, uint32_t, double>>& rows);
  size_t size();  // contexts, every session's
  // Symbolizes native frames added since the last call (outside the lock; see snapshot()).
  void describe_native_frames();
  void reset_metrics();
  // Bumped whenever metrics go back (reset, rollback): a thread's first call of a context since
  // then is that context's first call again (op.first_time; ops.cpp's tallies).
  uint32_t metrics_generation() const { return generation_.load(std::memory_order_acquire); }
  // Schedules: a warm-up's metrics are discarded by restoring the values saved when it began, so
  // the active cycles before it are kept.
  void checkpoint_metrics();
  void rollback_metrics();
  // fork(): the registry's fork hooks hold the lock across it (registry.cpp).
  void fork_prepare() { mu_.lock(); }
  void fork_release() { mu_.unlock(); }

 private:
  friend class TreeWriter;
  struct Node {
    uint32_t parent;
    uint32_t frame;
    std::vector<double> metrics;  // indexed by metric id, grown on demand
  };
  struct Frame {
    Kind kind;
    std::string name, file, extra;
    int line = 0;
    bool described = true;  // false: waiting for its description (Python) or symbol (native)
    uintptr_t ip = 0;       // native frames: the return address
  };
  std::mutex mu_;
  // Read by every operator exit: on a line of its own, which the lock's other users never write.
  alignas(64) std::atomic<uint32_t> generation_{1};
  std::vector<Node> nodes_;
  std::vector<Frame> frames_;
  std::vector<std::string> metric_names_;
  std::vector<std::vector<double>> checkpoint_;  // per node, as of checkpoint_metrics()
  size_t natives_described_upto_ = 0;
  char* text_file_;  // describing a live frame (the tree is never destroyed)
  char* text_name_;
  std::unordered_map<uint64_t, uint32_t> py_index_;
  std::unordered_map<std::string, uint32_t> named_index_;  // kind byte + name + '\0' + extra
  std::unordered_map<uint64_t, uint32_t> child_index_;     // parent << 32 | frame
  std::unordered_map<uintptr_t, uint32_t> native_index_;
  std::unordered_map<std::string, uint32_t> metric_index_;
};

// The process's tree: never destroyed (callbacks may run during interpreter exit). Inline: every
// operator exit reads its metrics generation, and the call was one more line of code to fetch.
inline Tree& tree() {
  static Tree* const t = new Tree();
  return *t;
}

}  // namespace dc
