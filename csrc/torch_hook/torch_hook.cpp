// The PyTorch operator layer: a global RecordFunction callback that feeds the core's per-thread
// operator stack; and the memory layer's allocation reporter. Compiled at first use against the
// installed torch (capture/torch_ops.py), so the core itself never links libtorch; the two meet
// through the dc_api capsule.
// libtorch is built with NDEBUG, and so is this hook: torch's headers then agree with it (its
// debug-only check in RecordFunction::inputs() reads a flag a release libtorch never sets).
#ifndef NDEBUG
#define NDEBUG
#endif
#include <ATen/Parallel.h>
#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/profiler/orchestration/observer.h>
#include <torch/extension.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "c_api.h"

namespace {

const dc_api* g_api = nullptr;
bool g_installed = false;
at::CallbackHandle g_handle = 0, g_scope_handle = 0;

// -- nested operators (docs/design.md, "Which operators") ---------------------------------------
// An operator's own calls (aten::linear -> aten::t, aten::addmm) are 70% of a training step's
// operator events, and RecordFunction costs each about 1,000 instructions before our callback
// runs. By default only the operators that Python (or an autograd node) calls are recorded:
// while one runs, the dispatcher's query for the callbacks of a FUNCTION-scope call finds none
// when ours would be the only one, so its nested calls take the dispatcher's fast path. The
// query is rebound in every loaded library's GOT (the dispatcher's inline code calls it through
// the PLT). Kernels, samples and allocations inside land on the outer operator.
// Python that runs inside an operator (a TorchDispatchMode, a tensor subclass: the dispatcher
// opens a "PythonDispatchMode" or "PythonSubclass" scope for it) calls operators the way a
// program does, so those scopes show what they call while they run.
// (Thread-locals are read through TLS descriptors where the build passes -mtls-dialect=gnu2,
// torch_ops.py: the query below runs for every dispatcher call, hidden ones included; and calls
// into libtorch through the GOT with -fno-plt, so no PLT stub is one more line to fetch.)
bool g_nested = true;  // record every operator (the `nested` context layer)

// `hiding` of a thread not classified yet, and of an intra-op worker (below): no RecordFunction
// has either handle.
constexpr uint64_t kUnclassified = ~0ull - 1, kIntraOpWorker = ~0ull;

// The hook's state of a thread.
struct HookThread {
  // RecordFunction handle of the operator hiding its calls (0: none). A new thread starts
  // unclassified, so that its first visible call takes the hiding path, where it is classified:
  // the common call (nothing hidden) pays nothing for it.
  uint64_t hiding = kUnclassified;
  uint64_t showing = 0, shown_hider = 0;  // the scope showing calls, the hider it paused
  // Whether ours was the only FUNCTION callback at the last query (alone), and when the hiding
  // operator was entered (hide_alone): while it holds, a nested call's query is answered
  // without asking torch (its copy of the callback list is most of a query's cost).
  bool alone = false, hide_alone = false;
  // The autograd node whose engine wrapper was left unrecorded last (null: none, or the engine
  // has finished since), and whether that node's own event has begun (engine_flag).
  const void* engine_node = nullptr;
  bool node_entered = false;
};
thread_local HookThread t_hook;

// -- intra-op workers ---------------------------------------------------------------------------
// ATen's intra-op pool runs a share of a kernel on each worker thread, and some kernels call
// operators there (CPU flash attention's backward allocates its per-thread buffers with
// aten::empty). Those calls are the kernel's own, as nested calls are: recorded, their first one
// made the worker a thread of its own, sampled on its own clock, so from then on its share of
// every kernel landed under `[thread] <name>` at the root instead of under the operator that
// opened the parallel region (the sampler's worker rule). A thread is classified at its first
// call that reaches the hook: a worker (inside ATen's parallel region, not its first thread)
// hides every call from then on, as an operator hiding its calls does. `alone`: what the
// call's query found.
[[gnu::noinline]] void classify_thread(HookThread& th, bool alone) {
  const bool worker = at::in_parallel_region() && at::get_thread_num() != 0;
  th.hiding = worker ? kIntraOpWorker : 0;
  if (worker) th.hide_alone = alone;  // (as a hiding operator: its queries answered at once)
}

using StepQuery = std::optional<at::StepCallbacks> (*)(at::RecordScope);
StepQuery g_query = nullptr;     // torch's own getStepCallbacksUnlessEmpty
std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn);

std::optional<at::StepCallbacks> query_unless_hidden(at::RecordScope scope) {
  const bool function = scope == at::RecordScope::FUNCTION;
  HookThread& th = t_hook;
  const bool hidden = function && th.hiding != 0 && th.hide_alone;
  // (One named result, returned on every path and built from torch's in place: with a second
  // returned object, every visible call moved the callback list's small vector once more.)
  std::optional<at::StepCallbacks> cbs =
      hidden ? std::optional<at::StepCallbacks>() : g_query(scope);
  if (function && !hidden) {
    const bool alone = cbs && cbs->callbacks_.size() == 1 && cbs->callbacks_[0].start_ == &on_enter;
    if (__builtin_expect(th.hiding == kUnclassified, 0)) classify_thread(th, alone);
    if (th.hiding != 0 && alone)
      cbs.reset();  // another profiler's callbacks (torch.profiler) still see every call
    else
      th.alone = alone;
  }
  return cbs;
}

// -- the autograd engine's wrapper ---------------------------------------------------------------
// The engine runs each backward node inside a FUNCTION-scope RecordFunction named
// "autograd::engine::evaluate_function: <node>", a name torch builds (c10::str, an ostringstream)
// only when a callback will see it: ~3,200 instructions, then RecordFunction's and our own work
// for one more event. On GPT-2 training that wrapper was half of what recording its operators
// cost (benchmarks/results/cpu-2026-12-08-engine-wrapper-b63a5aa.md). Where ours is the only
// callback, the wrapper is not started: its query (getStepCallbacks: the RECORD_FUNCTION macro's,
// which the dispatcher does not use) finds none for the first FUNCTION-scope call after the
// engine took up a new node. The node's own event (BACKWARD_FUNCTION) stays, under its forward
// line; what the engine runs for the node after it (gradient accumulation, DDP's hooks) goes
// under the node (DC_OP_AFTER_NODE). torch.profiler beside a session still sees every wrapper.
using StepQueryAll = at::StepCallbacks (*)(at::RecordScope);
StepQueryAll g_step = nullptr;  // torch's own getStepCallbacks

at::StepCallbacks step_unless_wrapper(at::RecordScope scope) {
  at::StepCallbacks cbs = g_step(scope);
  HookThread& th = t_hook;
  if (scope == at::RecordScope::FUNCTION && th.hiding == 0 && cbs.callbacks_.size() == 1 &&
      cbs.callbacks_[0].start_ == &on_enter) {
    const auto node = torch::autograd::get_current_node();
    if (node && node.get() != th.engine_node) {
      th.engine_node = node.get();
      th.node_entered = false;
      return at::StepCallbacks();
    }
  }
  return cbs;
}

// The flag of an event on a thread whose engine left a wrapper unrecorded: DC_OP_AFTER_NODE for
// an operator that the engine runs for that node after the node's own event began (an operator
// inside the node is flagged too; the core places only those outside any operator by it).
[[gnu::noinline]] int engine_flag(HookThread& th, at::RecordScope scope) {
  const auto node = torch::autograd::get_current_node();
  if (!node) {  // the backward pass has ended
    th.engine_node = nullptr;
    return 0;
  }
  if (node.get() != th.engine_node) return 0;  // (a node whose wrapper was recorded)
  if (scope == at::RecordScope::BACKWARD_FUNCTION) {
    th.node_entered = true;
    return 0;
  }
  return scope == at::RecordScope::FUNCTION && th.node_entered ? DC_OP_AFTER_NODE : 0;
}

// -- torch's per-thread callback cache ----------------------------------------------------------
// Every ThreadLocalStateGuard (the autograd engine's, around each backward node) sets the
// thread's RecordFunction state, and torch then rebuilds each scope's callback cache from a copy
// of the global callbacks taken under a mutex: ~1,800 instructions with no callbacks, ~3,400
// with ours, twice per backward node. The state set is nearly always the one already there, and
// then the rebuild changes nothing (a change of the global callbacks is caught at the next query
// anyway); only a sampled callback's countdown would have been drawn again.
using SetTls = void (*)(const at::RecordFunctionTLS&);
SetTls g_set_tls = nullptr;      // torch's own set_record_function_tls_

bool same_tls(const at::RecordFunctionTLS& a, const at::RecordFunctionTLS& b) {
  if (a.tls_record_function_enabled_ != b.tls_record_function_enabled_) return false;
  const at::RecordFunctionCallbacks& x = a.sorted_tls_callbacks_;
  const at::RecordFunctionCallbacks& y = b.sorted_tls_callbacks_;
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)  // (a handle names one callback for good)
    if (x[i].handle_ != y[i].handle_ || x[i].enabled_ != y[i].enabled_) return false;
  return true;
}

void set_tls_unless_same(const at::RecordFunctionTLS& tls) {
  if (!same_tls(at::get_record_function_tls_(), tls)) g_set_tls(tls);
}

// Operators whose calls the analyzer reads: a layout op copied only if it called aten::copy_.
// (Runs for every recorded operator: the first letter after "aten::" rules out most names.)
bool is_aten(const char* n) {  // (stops at a shorter name's NUL)
  return n[0] == 'a' && n[1] == 't' && n[2] == 'e' && n[3] == 'n' && n[4] == ':' && n[5] == ':';
}

bool shows_its_calls(const char* name) {
  if (!is_aten(name)) return true;  // custom ops, c10d: their parts too
  const char* n = name + 6;
  switch (n[0]) {
    case 'c': return std::strcmp(n, "contiguous") == 0 || std::strcmp(n, "clone") == 0;
    case 'r': return std::strcmp(n, "reshape") == 0;
    case 'f': return std::strcmp(n, "flatten") == 0;
    default: return false;
  }
}

// The dispatcher's scope around Python that runs inside an operator ("PythonDispatchMode",
// "PythonSubclass"): what that Python calls is shown.
bool shows_python(const char* name) { return std::strncmp(name, "Python", 6) == 0; }

// name: fn.name(), which may point into a temporary (backward names): the core copies it.
// (Inline in each caller: on every operator event's path, a call of its own was a line more.)
[[gnu::always_inline]] inline void enter_op(const at::RecordFunction& fn, const char* name,
                                            int flags = 0) {
  const at::RecordScope scope = fn.scope();
  g_api->op_enter(name, fn.handle(), fn.seqNr(), fn.threadId(), fn.forwardThreadId(),
                  flags | (scope == at::RecordScope::BACKWARD_FUNCTION ? DC_OP_BACKWARD
                           : scope == at::RecordScope::USER_SCOPE      ? DC_OP_SCOPE
                                                                       : 0));
}

// -- collectives (docs/multi-rank.md) -----------------------------------------------------------
// A ProcessGroup operator (c10d::allreduce_, ...) enqueues its work; the backend runs it in an
// async RecordFunction ("gloo:all_reduce", "nccl:all_reduce") whose inputs are the tensors sent,
// gloo's on its own worker thread. Torch hands the issuing thread's debug info to that thread
// (the work's callbacks propagate its thread-local state), so each c10d operator puts its node
// there for as long as it runs, and the backend's scope finds its issuer through it.
struct Issuer final : c10::DebugInfoBase {
  Issuer(uint32_t n, uint64_t t) : node(n), thread(t) {}
  uint32_t node;    // the c10d operator's context node
  uint64_t thread;  // RecordFunction's id of the issuing thread
};

// The debug-info slot of issuers: named by a pointer since torch 2.13, a fixed enum before it
// (one value nobody else uses: slots are only compared, and kept in a list).
template <typename Kind = c10::DebugInfoKind>
Kind issuer_kind() {
  if constexpr (std::is_enum_v<Kind>) {
    return static_cast<Kind>(0xDC);
  } else {
    static constexpr std::string_view kName = "deepcontext.collective_issuer";
    return Kind(&kName);
  }
}
const c10::DebugInfoKind g_issuer_kind = issuer_kind();

struct IssuerScope final : at::ObserverContext {
  std::optional<c10::DebugInfoGuard> guard;
};

// The ProcessGroup operators and the functional collectives (``_c10d_functional::all_reduce``,
// the older ``c10d_functional::``); the first character keeps every other operator's test short.
bool is_process_group_op(const char* name) {
  if (name[0] == 'c')
    return std::strncmp(name, "c10d::", 6) == 0 || std::strncmp(name, "c10d_functional::", 17) == 0;
  return name[0] == '_' && std::strncmp(name, "_c10d_functional::", 18) == 0;
}

uint64_t tensor_bytes(const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    return t.defined() ? t.numel() * t.element_size() : 0;
  }
  uint64_t sum = 0;
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec())
      sum += t.defined() ? t.numel() * t.element_size() : 0;
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) sum += tensor_bytes(e);
  }
  return sum;
}

// A backend's async scope: under the operator that issued it, its input bytes on that operator.
void enter_backend_scope(const at::RecordFunction& fn, const Issuer* issuer) {
  uint64_t bytes = 0;
  for (const c10::IValue& v : fn.inputs()) bytes += tensor_bytes(v);
  if (bytes > 0) {
    static const uint32_t kBytes = g_api->metric_id("comm.bytes");
    g_api->add_metric(issuer->node, kBytes, static_cast<double>(bytes));
  }
  if (issuer->thread != at::RecordFunction::currentThreadId())
    g_api->op_enter_linked(fn.name(), fn.handle(), issuer->node);
  else
    enter_op(fn, fn.name());  // NCCL: started on the issuing thread, inside its operator
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  // (No check that capture is on before the operator's: op_enter makes it, and hiding calls
  // while a schedule pauses the session only saves their RecordFunctions.)
  // A hidden call that runs a RecordFunction for another profiler's callbacks: still hidden
  // here, so the profile does not depend on whether torch.profiler runs beside it.
  const char* name = fn.name();
  HookThread& th = t_hook;
  if (th.hiding != 0 && fn.scope() == at::RecordScope::FUNCTION) {
    if (th.hiding == kUnclassified) classify_thread(th, th.alone);  // (the query not ours: nested)
    if (th.hiding == kIntraOpWorker || (th.hiding != 0 && !shows_python(name))) return nullptr;
  }
  const bool engine = __builtin_expect(th.engine_node != nullptr, 0);
  enter_op(fn, name, engine ? engine_flag(th, fn.scope()) : 0);
  if (!g_nested && fn.scope() == at::RecordScope::FUNCTION) {
    if (!shows_its_calls(name)) {  // (th.hiding is 0 here: a hidden call returned above)
      th.hiding = fn.handle();
      th.hide_alone = th.alone;  // what this operator's own query found
      th.alone = false;
    } else if (th.hiding != 0 && shows_python(name)) {
      th.showing = fn.handle();  // (a second level overwrites the first: it then hides less)
      th.shown_hider = th.hiding;
      th.hiding = 0;
    }
  }
  if (!is_process_group_op(name) || !g_api->enabled()) return nullptr;
  auto scope = std::make_unique<IssuerScope>();
  scope->guard.emplace(g_issuer_kind,
                       std::make_shared<Issuer>(g_api->current_node(), fn.threadId()));
  return scope;
}

// USER_SCOPE record functions (record_function, the backends' scopes): with their inputs.
std::unique_ptr<at::ObserverContext> on_enter_scope(const at::RecordFunction& fn) {
  if (!g_api->enabled()) return nullptr;
  const auto* issuer = fn.isAsync() ? static_cast<const Issuer*>(
                                          c10::ThreadLocalDebugInfo::get(g_issuer_kind))
                                    : nullptr;
  if (issuer != nullptr)
    enter_backend_scope(fn, issuer);
  else
    enter_op(fn, fn.name());
  return nullptr;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  HookThread& th = t_hook;
  if (th.hiding == fn.handle()) {
    th.hiding = 0;
  } else if (th.showing == fn.handle()) {
    th.hiding = th.shown_hider;
    th.showing = 0;
  }
  if (ctx != nullptr) static_cast<IssuerScope*>(ctx)->guard.reset();
  // An op only peeks at the next sequence number; the one that creates the autograd node
  // consumes it, and that is the forward line its backward belongs to.
  // With its nested calls hidden, every node they created is the op's.
  const int64_t seq = fn.seqNr();
  const int64_t taken = seq >= 0 ? static_cast<int64_t>(at::sequence_number::peek()) - seq : 0;
  const int consumed = static_cast<int>(std::clamp<int64_t>(taken, 0, 1 << 20));
  g_api->op_exit(fn.handle(), consumed);
}

// The mangled name of torch's function `fn`, or null.
const char* symbol_of(void* fn) {
  Dl_info info{};
  return dladdr(fn, &info) != 0 ? info.dli_sname : nullptr;
}

// Points every loaded library's binding of torch's function `fn` at `to` (ours, or torch's own
// again); returns how many bindings point there (0 for ours: e.g. a torch linked -Bsymbolic).
int rebind(void* fn, void* to) {
  const char* symbol = symbol_of(fn);
  return symbol ? g_api->rebind(symbol, to, reinterpret_cast<void*>(&rebind)) : 0;
}

// The replacements above, in the libraries loaded now, for a session; returns the count of the
// query's bindings rebound (nested: the query stays torch's).
int rebind_for_session(bool nested) {
  if (g_query == nullptr) {
    g_query = &at::getStepCallbacksUnlessEmpty;  // (through our own GOT, which stays torch's)
    g_set_tls = &at::set_record_function_tls_;
    g_step = &at::getStepCallbacks;
  }
  rebind(reinterpret_cast<void*>(g_set_tls), reinterpret_cast<void*>(&set_tls_unless_same));
  if (nested) return 0;  // (every operator, and the engine's wrappers)
  // (DEEPCONTEXT_OP_DIAG=keep-wrappers: the wrappers recorded as before 7988687, a measuring aid
  // for benchmarks/models.py's "%op-keep-wrappers", never a user setting)
  const char* diag = std::getenv("DEEPCONTEXT_OP_DIAG");
  if (diag == nullptr || std::strcmp(diag, "keep-wrappers") != 0)
    rebind(reinterpret_cast<void*>(g_step), reinterpret_cast<void*>(&step_unless_wrapper));
  return rebind(reinterpret_cast<void*>(g_query), reinterpret_cast<void*>(&query_unless_hidden));
}

// How many bindings of torch's `fn` point at `to` now.
int bound(void* fn, void* to) {
  const char* symbol = symbol_of(fn);
  return symbol ? g_api->bindings(symbol, to, reinterpret_cast<void*>(&rebind)) : 0;
}

// (query bindings, state-setter bindings, wrapper-query bindings) pointing at ours now: what a
// session has rebound.
std::tuple<int, int, int> rebound() {
  if (g_query == nullptr) return {0, 0, 0};
  return {bound(reinterpret_cast<void*>(g_query), reinterpret_cast<void*>(&query_unless_hidden)),
          bound(reinterpret_cast<void*>(g_set_tls), reinterpret_cast<void*>(&set_tls_unless_same)),
          bound(reinterpret_cast<void*>(g_step), reinterpret_cast<void*>(&step_unless_wrapper))};
}

// Between sessions torch's own functions are bound again: unprofiled code pays nothing.
void unbind_after_session() {
  if (g_query == nullptr) return;
  rebind(reinterpret_cast<void*>(g_query), reinterpret_cast<void*>(g_query));
  rebind(reinterpret_cast<void*>(g_set_tls), reinterpret_cast<void*>(g_set_tls));
  rebind(reinterpret_cast<void*>(g_step), reinterpret_cast<void*>(g_step));
}

// Installed once per process and never removed (removing a global callback is only safe when no
// other code runs); between sessions it is disabled.
// nested: record the operators that operators call too. Returns the rebound bindings' count.
int install(py::capsule capsule, bool nested) {
  if (g_installed) {
    g_nested = nested;
    at::reenableCallback(g_handle);
    at::reenableCallback(g_scope_handle);
    return rebind_for_session(nested);
  }
  auto* api = static_cast<const dc_api*>(capsule.get_pointer());
  if (api == nullptr || api->version != DC_API_VERSION)
    throw std::runtime_error("deepcontext core and torch hook disagree on the C API version");
  g_api = api;
  // Operators without their inputs (copying them would cost every op); scopes with them (the
  // backends' scopes carry the tensors a collective sends, and scopes are few).
  g_handle = at::addGlobalCallback(at::RecordFunctionCallback(on_enter, on_exit)
                            .needsInputs(false)
                            .needsOutputs(false)
                            .needsIds(true)
                            .scopes({at::RecordScope::FUNCTION,
                                     at::RecordScope::BACKWARD_FUNCTION}));
  g_scope_handle = at::addGlobalCallback(at::RecordFunctionCallback(on_enter_scope, on_exit)
                                  .needsInputs(true)
                                  .needsOutputs(false)
                                  .needsIds(true)
                                  .scopes({at::RecordScope::USER_SCOPE}));
  g_installed = true;
  g_nested = nested;
  return rebind_for_session(nested);
}

// -- memory layer (docs/memory.md) --------------------------------------------------------------
// c10's allocators (CPU and CUDA) report every allocation and free to the PROFILER_STATE debug
// info of the calling thread. Torch's own profiler code reads that slot as a ProfilerStateBase,
// so ours is one, with a disabled config: torch.autograd._profiler_enabled() stays false.
namespace prof = torch::profiler::impl;

constexpr int kTypes = static_cast<int>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES);
constexpr int kIndices = 16;
std::atomic<int> g_slots[kTypes][kIndices + 1];  // +1: index -1 (the CPU); 0: not asked yet

// A device's first event while the layer is on: its slot from the core (-1 while it is off, and
// nothing registered). Out of line, so that every other event's path saves no registers for it.
[[gnu::noinline]] int register_device(c10::Device device, std::atomic<int>& cached) {
  if (!g_api->mem_active()) return -1;
  std::string name = c10::DeviceTypeName(device.type(), /*lower_case=*/true);
  if (device.index() >= 0 && !device.is_cpu()) name += std::to_string(device.index());
  const int s = g_api->mem_device(name.c_str(), device.is_cpu() ? 0 : 1);
  cached.store(s + 1, std::memory_order_relaxed);
  return s;
}

int device_slot(c10::Device device) {
  const int type = static_cast<int>(device.type());
  const int index = device.index() + 1;
  if (type < 0 || type >= kTypes || index < 0 || index > kIndices) return -1;
  std::atomic<int>& cached = g_slots[type][index];
  const int s = cached.load(std::memory_order_relaxed);
  return s != 0 ? s - 1 : register_device(device, cached);
}

class MemoryReporter final : public prof::ProfilerStateBase {
 public:
  MemoryReporter() : prof::ProfilerStateBase(prof::ProfilerConfig(prof::ProfilerState::Disabled)) {}

  void reportMemoryUsage(void* ptr, int64_t alloc_size, size_t total_allocated, size_t,
                         c10::Device device) override {
    // (mem_event checks that the layer is on; device_slot registers nothing while it is off)
    if (g_api != nullptr) g_api->mem_event(ptr, alloc_size, device_slot(device), total_allocated);
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
  if (!g_installed) return;
  unbind_after_session();
  at::disableCallback(g_handle);
  at::disableCallback(g_scope_handle);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("install", &install, py::arg("capsule"), py::arg("nested") = false,
        "Install (or re-enable) the global RecordFunction callback; returns the number of "
        "dispatcher bindings rebound to hide nested operators (0 with nested=True).");
  m.def("uninstall", &uninstall, "Disable the callback until the next install().");
  m.def("rebound", &rebound,
        "(dispatcher query, RecordFunction state setter, RECORD_FUNCTION query) bindings that "
        "point at ours now.");
  m.def("memory_attach", &memory_attach,
        "Report the calling thread's allocations to the memory layer (False: slot taken).");
  m.def("memory_detach", &memory_detach, "Stop reporting the calling thread's allocations.");
  m.attr("api_version") = DC_API_VERSION;
}
