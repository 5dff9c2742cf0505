// GPU capture lifecycle: load CUPTI, subscribe (or say clearly why not), enable the launch
// callbacks and activity kinds, flush with a bounded wait, and unsubscribe at stop so another
// CUPTI client (torch.profiler, Nsight) can start afterwards.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "../cct/capture.h"
#include "gpu.h"
#include "gpu_internal.h"
#include "pc_sampling.h"

namespace dc {

namespace {

std::mutex g_life_mu;  // start / flush / stop
CUpti_SubscriberHandle g_sub = nullptr;
bool g_active = false;
bool g_attached = false;  // CUPTI holds its hooks in the driver (any CUPTI call attaches it)
bool g_registered_once = false;
uint64_t g_attaches = 0, g_detaches = 0;

// Device descriptions, read once per device through the driver.
std::mutex g_dev_mu;
auto& g_dev_info = *new std::unordered_map<uint32_t, GpuDeviceStats>();  // never destroyed

void describe(GpuDeviceStats* d) {
  std::lock_guard<std::mutex> g(g_dev_mu);
  auto it = g_dev_info.find(d->id);
  if (it == g_dev_info.end()) {
    GpuDeviceStats info;
    gpu::DriverApi& drv = gpu::driver();
    CUdevice dev;
    // Only devices that ran work are described: the program has initialized CUDA by then.
    if (drv.cuDeviceGet && drv.cuDeviceGet(&dev, static_cast<int>(d->id)) == CUDA_SUCCESS) {
      char name[256] = {0};
      if (drv.cuDeviceGetName(name, sizeof name - 1, dev) == CUDA_SUCCESS) info.name = name;
      drv.cuDeviceGetAttribute(&info.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
      drv.cuDeviceGetAttribute(&info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
      drv.cuDeviceGetAttribute(&info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
      size_t mem = 0;
      if (drv.cuDeviceTotalMem && drv.cuDeviceTotalMem(&mem, dev) == CUDA_SUCCESS) info.memory = mem;
    }
    it = g_dev_info.emplace(d->id, info).first;
  }
  d->name = it->second.name;
  d->sms = it->second.sms;
  d->memory = it->second.memory;
  d->cc_major = it->second.cc_major;
  d->cc_minor = it->second.cc_minor;
}

void disable_all() {
  gpu::CuptiApi& api = gpu::cupti();
  for (CUpti_ActivityKind k : gpu::activity_kinds()) api.cuptiActivityDisable(k);
  if (g_sub != nullptr) api.cuptiUnsubscribe(g_sub);
  g_sub = nullptr;
}

void flush_locked(double wait_s) {
  gpu::CuptiApi& api = gpu::cupti();
  api.cuptiActivityFlushAll(0);
  if (wait_s <= 0) return;
  auto now = std::chrono::steady_clock::now;
  auto deadline = now() + std::chrono::duration<double>(wait_s);
  auto last_progress = now();
  int64_t settled = gpu::g_settled.load();
  while (gpu::g_issued.load() - gpu::g_settled.load() > 0 && now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    api.cuptiActivityFlushAll(0);
    if (gpu::g_settled.load() != settled) {
      settled = gpu::g_settled.load();
      last_progress = now();
    } else if (now() - last_progress > std::chrono::seconds(2)) {
      break;  // nothing arrives any more (records taken by another client, or lost)
    }
  }
}

// -- detaching CUPTI at stop --------------------------------------------------------------------
// Once attached, CUPTI stays in every driver call of the program after it is unsubscribed and
// its records disabled: GPT-2 generate on the H200 spent 11 ms of a 140 ms step in libcupti
// with nothing enabled after a session, about what it costs while tracing (benchmarks/where.py,
// results/h200-2026-12-03-where.md). cuptiFinalize detaches it; its header asks for the call to
// be made at the exit site of a CUDA call, so a driver call is issued for the purpose and the
// detach happens in its exit callback. A later session attaches CUPTI again.
// DEEPCONTEXT_CUPTI_DETACH=0 keeps it attached (a measuring aid).
std::atomic<bool> g_detach_requested{false};
std::atomic<bool> g_detached{false};

void CUPTIAPI on_detach_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cbid != CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion ||
      cb == nullptr || cb->callbackSite != CUPTI_API_EXIT || !g_detach_requested.exchange(false))
    return;
  gpu::cupti().cuptiFinalize();
  g_detached.store(true);
}

void detach() {
  gpu::CuptiApi& api = gpu::cupti();
  const char* keep = std::getenv("DEEPCONTEXT_CUPTI_DETACH");
  if (api.cuptiFinalize == nullptr || (keep != nullptr && keep[0] == '0')) return;
  g_attached = false;
  ++g_detaches;
  CUpti_SubscriberHandle sub = nullptr;
  int version = 0;
  g_detached.store(false);
  if (gpu::driver().cuDriverGetVersion != nullptr &&
      api.cuptiSubscribe(&sub, on_detach_callback, nullptr) == CUPTI_SUCCESS) {
    if (api.cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API,
                                CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion) == CUPTI_SUCCESS) {
      g_detach_requested.store(true);
      gpu::driver().cuDriverGetVersion(&version);
    }
    g_detach_requested.store(false);
    if (!g_detached.load()) api.cuptiUnsubscribe(sub);
  }
  // (no exit site came: the records were flushed and the subscriptions removed above)
  if (!g_detached.load()) api.cuptiFinalize();
}

std::string fail(const std::string& what, CUptiResult r) {
  disable_all();
  return "GPU capture off: " + what + " failed (" + gpu::result_name(r) + "); profiling CPU only";
}

}  // namespace

bool gpu_compiled() { return true; }

namespace {

// Subscribes, enables the callbacks and the activity kinds.
std::string attach_locked() {
  gpu::CuptiApi& api = gpu::cupti();
  gpu::g_generation.fetch_add(1);  // per-thread API scopes cut by a stop start afresh
  CUptiResult r;
  char other[128] = {0};
  if (api.cuptiSubscribe_v2 != nullptr) {
    CUpti_SubscriberParams p{};
    p.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    p.subscriberName = "deepcontext";
    p.oldSubscriberName = other;
    p.oldSubscriberSize = sizeof other;
    r = api.cuptiSubscribe_v2(&g_sub, gpu::on_callback, nullptr, &p);
  } else {
    r = api.cuptiSubscribe(&g_sub, gpu::on_callback, nullptr);
  }
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    g_sub = nullptr;
    std::string who = other;
    if (who.empty() || who.find("not provided") != std::string::npos)
      who = "torch.profiler, Nsight or another profiler";
    return "GPU capture off: another CUPTI client is already active (" + who +
           "); profiling CPU only";
  }
  if (r != CUPTI_SUCCESS) {
    g_sub = nullptr;
    return fail("cuptiSubscribe", r);
  }
  g_attached = true;
  ++g_attaches;
  if ((r = gpu::enable_callbacks(g_sub)) != CUPTI_SUCCESS) return fail("enabling CUPTI callbacks", r);
  if ((r = pc::enable_callbacks(g_sub)) != CUPTI_SUCCESS) return fail("enabling module callbacks", r);
  // Registered again at every start: another client (torch.profiler) may have replaced ours.
  r = api.cuptiActivityRegisterCallbacks(gpu::on_buffer_requested, gpu::on_buffer_completed);
  if (r != CUPTI_SUCCESS && !g_registered_once) return fail("cuptiActivityRegisterCallbacks", r);
  g_registered_once = true;
  // Diagnostic (DEEPCONTEXT_GPU_DIAG=no-activity): callbacks without activity records.
  const bool records = std::strcmp(gpu::gpu_diag(), "no-activity") != 0;
  const bool kernels_only = std::strcmp(gpu::gpu_diag(), "kernels-only") == 0;
  for (CUpti_ActivityKind k : gpu::activity_kinds()) {
    if (!records || (kernels_only && k != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) continue;
    if ((r = api.cuptiActivityEnable(k)) != CUPTI_SUCCESS) return fail("cuptiActivityEnable", r);
  }
  return "";
}

// -- the end of a schedule ---------------------------------------------------------------------
// Once a schedule is done the session ignores every launch, but an attached CUPTI would still
// cost each one what tracing costs (see detach()). So the records and callbacks are disabled at
// once, and CUPTI is detached as soon as the records of the launches made before are in: at once
// if the GPU has caught up, else at a later flush (the flusher's, about every second), never
// waiting on the program's thread. A wait phase keeps it attached: attaching it again costs the
// program's thread 65-90 ms on the H200 (GPT-2 training with a schedule recording one step in five
// ran 1.9x slower with a detach at each wait), and an attached CUPTI with nothing enabled costs
// launches about what tracing does.
bool g_released = false;
bool g_detach_pending = false;

void try_detach_locked() {
  if (!g_detach_pending) return;
  gpu::cupti().cuptiActivityFlushAll(0);
  if (gpu::g_issued.load() - gpu::g_settled.load() > 0) return;
  gpu::cupti().cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  g_detach_pending = false;
  detach();
}

}  // namespace

std::string gpu_start(const std::vector<std::string>& lib_dirs) {
  std::lock_guard<std::mutex> g(g_life_mu);
  if (g_active) return "";
  std::string why = gpu::load_driver();
  if (why.empty()) why = gpu::load_cupti(lib_dirs);
  if (!why.empty()) return "GPU capture off: " + why;
  gpu::init_metrics();
  gpu::init_activity_metrics();
  gpu::g_issued.store(0);  // per session: the last session's stragglers were flushed at its stop
  gpu::g_settled.store(0);
  gpu::reset_stats();
  g_attaches = g_detaches = 0;
  g_released = g_detach_pending = false;
  why = attach_locked();
  g_active = why.empty();
  return why;
}

void gpu_flush(double wait_s) {
  std::lock_guard<std::mutex> g(g_life_mu);
  if (!g_active || !g_attached) return;  // (a CUPTI call would attach it again)
  flush_locked(wait_s);
  try_detach_locked();
}

void gpu_release() {
  std::lock_guard<std::mutex> g(g_life_mu);
  if (!g_active || g_released || pc::active()) return;
  g_released = true;
  disable_all();
  g_detach_pending = true;
  try_detach_locked();
}

void gpu_stop(double wait_s) {
  std::lock_guard<std::mutex> g(g_life_mu);
  if (!g_active) return;
  g_active = false;
  if (!g_attached) return;  // detached at the schedule's end, every record in
  flush_locked(wait_s);
  pc::stop();  // reads the PC samples left, while CUPTI and the contexts are still there
  gpu::CuptiApi& api = gpu::cupti();
  disable_all();
  api.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  int64_t missing = gpu::g_issued.load() - gpu::g_settled.load();
  // (records that never came went to another client, torch.profiler say, whose CUPTI use a
  // detach would end: then it stays attached)
  if (missing <= 0) detach();
  if (missing > 0) {
    add_note("GPU capture: " + std::to_string(missing) +
             " kernel launches got no activity record (another CUPTI client such as "
             "torch.profiler took the records, or the program ended before they completed)");
  }
}

GpuStats gpu_stats() {
  GpuStats s;
  {
    std::lock_guard<std::mutex> g(g_life_mu);
    s.active = g_active;
  }
  s.library = gpu::cupti().path;
  gpu::fill_stats(&s);
  {
    std::lock_guard<std::mutex> g(g_life_mu);
    s.attaches = g_attaches;
    s.detaches = g_detaches;
  }
  for (auto& d : s.devices) describe(&d);
  return s;
}

}  // namespace dc
