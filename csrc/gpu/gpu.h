// GPU activity capture through CUPTI (docs/gpu.md): kernels, copies, memsets and host syncs,
// each folded into the calling context tree under the context that launched it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dc {

// Whether this build has CUPTI support compiled in.
bool gpu_compiled();

// Subscribes to CUPTI; returns "" on success, else one line saying why GPU capture is off.
// `lib_dirs` are extra directories to search for libcupti first (the Python side passes the
// nvidia-* wheels' lib directories, which match the CUDA runtime torch uses).
std::string gpu_start(const std::vector<std::string>& lib_dirs);

// Hands completed activity buffers to the tree. With wait_s > 0 it keeps flushing until every
// launched kernel has been seen or wait_s passed (bounded: never syncs the device).
void gpu_flush(double wait_s);

// Final flush (bounded by wait_s), then unsubscribes so another CUPTI client may start.
void gpu_stop(double wait_s);

// A schedule is done (no step will be captured again): stops tracing and detaches CUPTI once the
// records of earlier launches are in (now, or at a later flush: it never waits). No-op when
// capture is off or PC sampling is on.
void gpu_release();

struct GpuDeviceStats {
  uint32_t id = 0;
  std::string name;
  int sms = 0;
  uint64_t memory = 0;  // bytes
  int cc_major = 0, cc_minor = 0;
  double kernel_time = 0, memcpy_time = 0, memset_time = 0;  // seconds
  uint64_t kernels = 0, memcpys = 0, memsets = 0, memcpy_bytes = 0, memset_bytes = 0;
};

struct GpuStats {
  bool active = false;
  std::string library;           // path of the libcupti in use
  double kernel_time = 0;        // sum of all folded kernel durations (seconds)
  uint64_t kernels = 0;          // kernel records folded
  uint64_t records = 0;          // activity records read
  uint64_t unattributed = 0;     // records whose launch context was unknown
  uint64_t ignored = 0;          // records of launches made while capture was paused
  uint64_t incomplete = 0;       // records without timestamps (forced final flush)
  uint64_t dropped = 0;          // records CUPTI reports as dropped (buffer pressure)
  uint64_t graph_unmapped = 0;   // graph-replayed records whose capture context was unknown
  uint64_t nested_matches = 0;   // records matched through a nested driver call's id
  uint64_t graph_nodes = 0;      // graph nodes seen made (created or cloned: resource callbacks)
  int64_t pending = 0;           // kernel/graph launches not yet seen in a record
  uint64_t attaches = 0;         // times CUPTI was attached (at start)
  uint64_t detaches = 0;         // times it was detached (at a schedule's end, or at stop)
  std::vector<GpuDeviceStats> devices;
};

GpuStats gpu_stats();

}  // namespace dc
