// Shared state of the CUPTI layer: the dlopen()ed function table, the correlation map written on
// the launch hot path and read when activity records are folded, and the graph-node map.
#pragma once
#include <cuda.h>
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_pcsampling.h>
#include <cupti_result.h>
#include <cupti_runtime_cbid.h>
#include <cupti_version.h>

#include <atomic>
#include <cstdlib>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpu.h"

namespace dc {
namespace gpu {

// Every CUPTI entry point used, called through pointers (the module never links libcupti).
#define DC_CUPTI_REQUIRED(X)                                                                \
  X(cuptiSubscribe) X(cuptiUnsubscribe) X(cuptiEnableCallback) X(cuptiGetCallbackName)       \
  X(cuptiActivityRegisterCallbacks) X(cuptiActivityEnable) X(cuptiActivityDisable)           \
  X(cuptiActivityFlushAll) X(cuptiActivityGetNextRecord) X(cuptiActivityGetNumDroppedRecords) \
  X(cuptiGetResultString) X(cuptiGetVersion)
#define DC_CUPTI_OPTIONAL(X) X(cuptiSubscribe_v2) X(cuptiGetGraphNodeId) X(cuptiActivityFlushPeriod) \
  X(cuptiPCSamplingEnable) X(cuptiPCSamplingDisable) X(cuptiPCSamplingGetData)                \
  X(cuptiPCSamplingGetNumStallReasons) X(cuptiPCSamplingGetStallReasons)                      \
  X(cuptiPCSamplingSetConfigurationAttribute) X(cuptiGetCubinCrc) X(cuptiPCSamplingStart)       \
  X(cuptiPCSamplingStop) X(cuptiFinalize)

struct CuptiApi {
  void* handle = nullptr;
  std::string path;
#define DC_DECLARE_FN(name) decltype(&::name) name = nullptr;
  DC_CUPTI_REQUIRED(DC_DECLARE_FN)
  DC_CUPTI_OPTIONAL(DC_DECLARE_FN)
#undef DC_DECLARE_FN
};

// The driver functions used for device metadata (only after the program initialized CUDA).
struct DriverApi {
  void* handle = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice) = nullptr;
};

CuptiApi& cupti();
DriverApi& driver();
// Loads libcuda (returns "" or why not).
std::string load_driver();
// Loads libcupti from `dirs`, then CUDA_HOME/CUDA_PATH, /usr/local/cuda, the loader's path.
std::string load_cupti(const std::vector<std::string>& dirs);
// "CUPTI_ERROR_X" for a result code.
std::string result_name(CUptiResult r);

// Node ids with a special meaning in the maps below.
constexpr uint32_t kIgnored = 0xFFFFFFFFu;  // launched while capture was paused: not counted
constexpr uint32_t kCountFlag = 1u << 31;   // a counted launch: its first record settles it
constexpr uint32_t kNestedFlag = 1u << 30;  // the id of a driver call nested in a runtime call
constexpr uint32_t kNodeMask = kNestedFlag - 1;

// Correlation id -> context node, direct-mapped; one 64-bit atomic per slot (id << 32 | node)
// so the launch path never locks. A slot overwritten before its records arrive shows up as an
// unattributed record, never as a wrong context.
class CorrelationMap {
 public:
  static constexpr uint32_t kSlots = 1u << 21;
  // calloc: untouched slots cost no resident memory (ids grow, so pages fill in over time).
  CorrelationMap()
      : slots_(static_cast<std::atomic<uint64_t>*>(std::calloc(kSlots, sizeof(uint64_t)))) {}
  void put(uint32_t corr, uint32_t value) {
    slots_[corr & (kSlots - 1)].store((uint64_t(corr) << 32) | value, std::memory_order_release);
  }
  // The stored value for corr, or false when that slot holds another id.
  bool get(uint32_t corr, uint32_t* value) const {
    uint64_t v = slots_[corr & (kSlots - 1)].load(std::memory_order_acquire);
    if (corr == 0 || uint32_t(v >> 32) != corr) return false;
    *value = uint32_t(v);
    return true;
  }
  // Clears the count flag once; true for the caller that cleared it.
  bool settle(uint32_t corr) {
    auto& s = slots_[corr & (kSlots - 1)];
    uint64_t v = s.load(std::memory_order_acquire);
    while (uint32_t(v >> 32) == corr && uint32_t(v) != kIgnored && (uint32_t(v) & kCountFlag)) {
      if (s.compare_exchange_weak(v, v & ~uint64_t(kCountFlag))) return true;
    }
    return false;
  }

 private:
  std::atomic<uint64_t>* slots_;
};

// Graph node id -> context node where the node was created (stream capture or explicit add);
// clones made at instantiation inherit their original's context. A destroyed node's entry
// stays a while: replayed kernels' records can name the captured node, which PyTorch destroys
// right after instantiation (on CUDA 13 a map that dropped originals without live clones lost
// every replay: graph_unmapped), and records of a graph's last replay can arrive after its
// destruction. Entries of destroyed nodes go oldest
// first past kKeepDestroyed, so the map is bounded by the nodes alive plus that many (node ids
// are never reused: a stale entry never answers for another node).
class GraphNodeMap {
 public:
  static constexpr size_t kKeepDestroyed = 1 << 16;

  void put(uint64_t id, uint32_t node) {
    std::lock_guard<std::mutex> g(mu_);
    map_[id] = Entry{node, false};
  }
  void clone(uint64_t original, uint64_t id) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = map_.find(original);
    if (it != map_.end()) map_[id] = Entry{it->second.node, false};
  }
  bool get(uint64_t id, uint32_t* node) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = map_.find(id);
    if (it == map_.end()) return false;
    *node = it->second.node;
    return true;
  }
  void destroyed(uint64_t id) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = map_.find(id);
    if (it == map_.end() || it->second.destroyed) return;
    it->second.destroyed = true;
    destroyed_.push_back(id);
    while (destroyed_.size() > kKeepDestroyed) {
      auto old = map_.find(destroyed_.front());
      if (old != map_.end() && old->second.destroyed) map_.erase(old);
      destroyed_.pop_front();
    }
  }
  size_t size() {
    std::lock_guard<std::mutex> g(mu_);
    return map_.size();
  }

 private:
  struct Entry {
    uint32_t node;
    bool destroyed;
  };
  std::mutex mu_;
  std::unordered_map<uint64_t, Entry> map_;
  std::deque<uint64_t> destroyed_;  // oldest first
};

CorrelationMap& correlations();
GraphNodeMap& graph_nodes();

// Launch bookkeeping for the bounded final flush.
extern std::atomic<int64_t> g_issued;   // counted launches that returned success
extern std::atomic<int64_t> g_settled;
extern std::atomic<uint64_t> g_graph_nodes;  // graph nodes made (created or cloned)  // counted launches whose first record arrived
extern std::atomic<uint32_t> g_generation;  // bumped at each start: stale per-thread scopes reset

// Callback layer (callbacks.cpp): classify API ids, enable them on `sub`.
CUptiResult enable_callbacks(CUpti_SubscriberHandle sub);
// DEEPCONTEXT_GPU_DIAG: "" (normal), "no-callbacks", "empty-callbacks", "no-activity" or
// "kernels-only" (no copy and memset records); a measuring aid for the launch path's cost
// (benchmarks/where.py), never a user setting.
const char* gpu_diag();
void CUPTIAPI on_callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const void* data);
void init_metrics();

// Activity layer (activity.cpp).
void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
void CUPTIAPI on_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                                  size_t valid);
// The activity kinds enabled (kernels, copies, memsets).
const std::vector<CUpti_ActivityKind>& activity_kinds();
void init_activity_metrics();
void fill_stats(GpuStats* out);
void reset_stats();  // per session, like the tree's metrics

}  // namespace gpu
}  // namespace dc
