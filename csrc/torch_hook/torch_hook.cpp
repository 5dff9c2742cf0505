// The PyTorch operator layer: a global RecordFunction callback that feeds the core's per-thread
// operator stack; and the memory layer's allocation reporter. Compiled at first use against the
// installed torch (capture/torch_ops.py), so the core itself never links libtorch; the two meet
// through the dc_api capsule.
#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>
#include <torch/extension.h>

#include <atomic>

#include "c_api.h"

namespace {

const dc_api* g_api = nullptr;
bool g_installed = false;
at::CallbackHandle g_handle = 0;

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  if (g_api->enabled()) {
    // name() may point into a temporary (backward names): the core copies it.
    g_api->op_enter(fn.name(), fn.handle(), fn.seqNr(), fn.threadId(), fn.forwardThreadId(),
                    fn.scope() == at::RecordScope::BACKWARD_FUNCTION ? 1 : 0);
  }
  return nullptr;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  // An op only peeks at the next sequence number; the one that creates the autograd node
  // consumes it, and that is the forward line its backward belongs to.
  int64_t seq = fn.seqNr();
  int consumed = seq >= 0 && static_cast<int64_t>(at::sequence_number::peek()) > seq ? 1 : 0;
  g_api->op_exit(fn.handle(), consumed);
}

// Installed once per process and never removed (removing a global callback is only safe when no
// other code runs); between sessions it is disabled, so unprofiled code pays nothing for it.
void install(py::capsule capsule) {
  if (g_installed) {
    at::reenableCallback(g_handle);
    return;
  }
  auto* api = static_cast<const dc_api*>(capsule.get_pointer());
  if (api == nullptr || api->version != DC_API_VERSION)
    throw std::runtime_error("deepcontext core and torch hook disagree on the C API version");
  g_api = api;
  g_handle = at::addGlobalCallback(at::RecordFunctionCallback(on_enter, on_exit)
                            .needsInputs(false)
                            .needsOutputs(false)
                            .needsIds(true)
                            .scopes({at::RecordScope::FUNCTION,
                                     at::RecordScope::BACKWARD_FUNCTION,
                                     at::RecordScope::USER_SCOPE}));
  g_installed = true;
}

// -- memory layer (docs/memory.md) --------------------------------------------------------------
// c10's allocators (CPU and CUDA) report every allocation and free to the PROFILER_STATE debug
// info of the calling thread. Torch's own profiler code reads that slot as a ProfilerStateBase,
// so ours is one, with a disabled config: torch.autograd._profiler_enabled() stays false.
namespace prof = torch::profiler::impl;

constexpr int kTypes = static_cast<int>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES);
constexpr int kIndices = 16;
std::atomic<int> g_slots[kTypes][kIndices + 1];  // +1: index -1 (the CPU); 0: not asked yet

int device_slot(c10::Device device) {
  const int type = static_cast<int>(device.type());
  const int index = device.index() + 1;
  if (type < 0 || type >= kTypes || index < 0 || index > kIndices) return -1;
  int s = g_slots[type][index].load(std::memory_order_relaxed);
  if (s != 0) return s - 1;
  std::string name = c10::DeviceTypeName(device.type(), /*lower_case=*/true);
  if (device.index() >= 0 && !device.is_cpu()) name += std::to_string(device.index());
  s = g_api->mem_device(name.c_str(), device.is_cpu() ? 0 : 1);
  g_slots[type][index].store(s + 1, std::memory_order_relaxed);
  return s;
}

class MemoryReporter final : public prof::ProfilerStateBase {
 public:
  MemoryReporter() : prof::ProfilerStateBase(prof::ProfilerConfig(prof::ProfilerState::Disabled)) {}

  void reportMemoryUsage(void* ptr, int64_t alloc_size, size_t total_allocated, size_t,
                         c10::Device device) override {
    if (g_api == nullptr || !g_api->mem_active()) return;
    g_api->mem_event(ptr, alloc_size, device_slot(device), total_allocated);
  }
  // Out-of-memory errors reach the core through the CUDA allocator's trace (cuda_trace.cpp).
  void reportOutOfMemory(int64_t, size_t, size_t, c10::Device) override {}
  bool memoryProfilingEnabled() const override { return g_api != nullptr && g_api->mem_active(); }
  prof::ActiveProfilerType profilerType() override { return prof::ActiveProfilerType::NONE; }
};

// One reporter for every thread; never destroyed (threads' debug-info chains point at it).
auto& g_reporter = *new std::shared_ptr<MemoryReporter>();

// Gives the calling thread the reporter; false when another profiler holds its slot.
bool memory_attach(py::capsule capsule) {
  if (g_api == nullptr) {
    auto* api = static_cast<const dc_api*>(capsule.get_pointer());
    if (api == nullptr || api->version != DC_API_VERSION)
      throw std::runtime_error("deepcontext core and torch hook disagree on the C API version");
    g_api = api;
  }
  if (!g_reporter) g_reporter = std::make_shared<MemoryReporter>();
  auto* current = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
  if (current == g_reporter.get()) return true;
  if (current != nullptr) return false;
  c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, g_reporter);
  return true;
}

// Takes the reporter off the calling thread when it is the innermost debug info there (other
// threads keep theirs, silent once the layer is off).
void memory_detach() {
  if (!g_reporter) return;
  try {
    if (c10::ThreadLocalDebugInfo::_peek(c10::DebugInfoKind::PROFILER_STATE) == g_reporter)
      c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
  } catch (const c10::Error&) {
    // Something newer sits on top; leaving ours below it is harmless.
  }
}

}  // namespace

void uninstall() {
  if (g_installed) at::disableCallback(g_handle);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("install", &install, "Install (or re-enable) the global RecordFunction callback.");
  m.def("uninstall", &uninstall, "Disable the callback until the next install().");
  m.def("memory_attach", &memory_attach,
        "Report the calling thread's allocations to the memory layer (False: slot taken).");
  m.def("memory_detach", &memory_detach, "Stop reporting the calling thread's allocations.");
  m.attr("api_version") = DC_API_VERSION;
}
