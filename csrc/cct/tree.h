// The native calling context tree: an arena of nodes (parent, frame) with exclusive metrics,
// aggregated online so memory grows with distinct contexts, never with run time.
#pragma once
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

// A Python frame's description, copied while its code object was alive (no GIL needed).
struct CodeInfo {
  int line;
  char file[160];
  char name[96];
};

// Identity of a Python frame: code object, bytecode offset, and a fingerprint of the code (its
// filename object and first line), so a new code object at a recycled address gets a new key.
uint64_t python_key(const dc_raw_frame& f);

// Insert-only set of Python keys already described in the tree; the sampler's signal handler
// reads it (lock-free) to copy descriptions only for frames it has not seen.
bool known_python_key(uint64_t key);

// A frame as captured: Python frames are described at capture (the code object may die right
// after, as module and class bodies do); all other kinds carry name and "k=v;..." extra.
struct NativeFrame {
  Kind kind;
  std::string name;
  std::string file;
  int line = 0;
  std::string extra;
  bool described = true;  // false: waiting for its description (Python) or symbol (native)
  uintptr_t ip = 0;       // native frames: the return address, symbolized at snapshot time
};

struct TreeNode {
  uint32_t parent;
  uint32_t frame;
  std::vector<double> metrics;  // indexed by metric id, grown on demand
};

class Tree {
 public:
  Tree();
  // All methods below require `mu` held by the caller (one lock guards the arena).
  // The frame for f. `live`: its code object is running on this thread and may be read now;
  // otherwise `info` (may be null) carries the description taken when it was.
  uint32_t python_frame(const dc_raw_frame& f, bool live, const CodeInfo* info = nullptr);
  uint32_t named_frame(Kind kind, const std::string& name, const std::string& extra = "");
  // A native frame by return address; its symbol is looked up later (describe_native_frames).
  uint32_t native_frame(uintptr_t ip);
  // A native frame that stands for a whole function (sampled leaves), already symbolized.
  uint32_t native_function_frame(const std::string& name, const std::string& library);
  uint32_t child(uint32_t parent, uint32_t frame);
  void add(uint32_t node, uint32_t metric, double v);
  uint32_t metric_id(const std::string& name);  // takes its own lock

  std::mutex mu;
  std::vector<TreeNode> nodes;
  std::vector<NativeFrame> frames;
  std::vector<std::string> metric_names;
  size_t natives_described_upto = 0;

 private:
  std::unordered_map<uint64_t, uint32_t> py_index_;
  std::unordered_map<std::string, uint32_t> named_index_;  // kind byte + name + '\0' + extra
  std::unordered_map<uint64_t, uint32_t> child_index_;
  std::unordered_map<uintptr_t, uint32_t> native_index_;      // parent << 32 | frame
  std::unordered_map<std::string, uint32_t> metric_index_;

};

Tree& tree();

}  // namespace dc
