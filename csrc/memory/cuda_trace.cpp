// What the CUDA caching allocator itself does (segments it cudaMallocs and cudaFrees, retries
// after freeing its cache, out-of-memory errors), from its trace tracker, charged to the context
// of the thread that made it happen. Trace trackers run without record_history (no history ring
// is kept). Compiled at first use only where torch has CUDA (capture/memory.py); a separate
// extension so that a CUDA-less build of the operator hook never needs CUDA headers.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/extension.h>

#include <atomic>
#include <string>

#include "c_api.h"

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

constexpr int kDevices = 64;
const dc_api* g_api = nullptr;
bool g_attached = false;
std::atomic<int> g_slots[kDevices];       // device -> slot + 1 (0: not asked yet)
std::atomic<int64_t> g_retries[kDevices];  // the allocator's retry count last seen

int slot_of(int device) {
  if (device < 0 || device >= kDevices) return -1;
  int s = g_slots[device].load(std::memory_order_relaxed);
  if (s != 0) return s - 1;
  s = g_api->mem_device(("cuda" + std::to_string(device)).c_str(), 1);
  g_slots[device].store(s + 1, std::memory_order_relaxed);
  return s;
}

// The tracker runs under the device allocator's (recursive) lock, so reading its stats here is
// safe; it is done only at segment allocations and OOMs, which follow any retry.
void charge_retries(int device, int slot) {
  const int64_t now = cca::getDeviceStats(static_cast<c10::DeviceIndex>(device)).num_alloc_retries;
  const int64_t before = g_retries[device].exchange(now);
  if (now > before) g_api->mem_allocator_event(DC_MEM_RETRY, slot, static_cast<uint64_t>(now - before));
}

void on_trace(const cca::TraceEntry& te) {
  if (g_api == nullptr || !g_api->mem_active()) return;
  const int device = static_cast<int>(te.device_);
  switch (te.action_) {
    case cca::TraceEntry::SEGMENT_ALLOC:
    case cca::TraceEntry::SEGMENT_MAP: {
      const int slot = slot_of(device);
      charge_retries(device, slot);
      g_api->mem_allocator_event(DC_MEM_SEGMENT_ALLOC, slot, te.size_);
      break;
    }
    case cca::TraceEntry::SEGMENT_FREE:
    case cca::TraceEntry::SEGMENT_UNMAP:
      g_api->mem_allocator_event(DC_MEM_SEGMENT_FREE, slot_of(device), te.size_);
      break;
    case cca::TraceEntry::OOM: {
      const int slot = slot_of(device);
      charge_retries(device, slot);
      g_api->mem_allocator_event(DC_MEM_OOM, slot, 0);
      break;
    }
    default:
      break;
  }
}

// Attaches once per process, after CUDA is initialized (before, the allocator has no devices
// to attach to). Returns "" or why the allocator's actions are not tracked.
std::string attach(py::capsule capsule, int device_count) {
  auto* api = static_cast<const dc_api*>(capsule.get_pointer());
  if (api == nullptr || api->version != DC_API_VERSION)
    return "deepcontext core and CUDA trace hook disagree on the C API version";
  g_api = api;
  if (g_attached) return "";
  try {
    for (int d = 0; d < device_count && d < kDevices; ++d)
      g_retries[d].store(cca::getDeviceStats(static_cast<c10::DeviceIndex>(d)).num_alloc_retries);
    cca::attachAllocatorTraceTracker(on_trace);
  } catch (const std::exception& e) {
    std::string what = e.what();
    return what.substr(0, what.find('\n'));
  }
  g_attached = true;
  return "";
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("attach", &attach, "Track the CUDA caching allocator's segments, retries and OOMs.");
  m.attr("api_version") = DC_API_VERSION;
}
