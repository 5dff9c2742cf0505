// Capture lifecycle (start, stop, pause, the session epoch), notes, and the small entry points
// the binding and the GPU layer use.
#include "capture.h"

#include <cstring>
#include <mutex>
#include <vector>

#include "../callpath/native_stack.h"
#include "capture_internal.h"
#include "clock.h"
#include "registry.h"

namespace dc {
namespace detail {

std::atomic<bool> g_started{false};
std::atomic<bool> g_enabled{false};
std::atomic<uint32_t> g_epoch{0};
Options g_opts;
uint32_t m_cpu_time, m_op_time, m_op_count, m_op_first_time, m_autograd_nodes;

}  // namespace detail

using namespace detail;

namespace {
std::mutex& g_notes_mu = *new std::mutex();
auto& g_notes = *new std::vector<std::string>();  // never destroyed (threads outlive exit)

// Unwinds once on the calling thread, outside a signal handler, so that libunwind's per-thread
// cache (TLS that glibc allocates at a thread's first touch) exists before its first sample.
// Safety does not rest on it: the handler unwinds only outside the allocator's, libc's and the
// loader's code (may_unwind, sampler.cpp). It runs at a session's start and once per new thread.
void warm_native() {
  if (!g_opts.native) return;
  uintptr_t ips[4];
  native::backtrace(ips, 4, 0);
}
}  // namespace

void start(const Options& opts) {
  Tree& t = tree();
  m_cpu_time = t.metric_id("cpu.time");
  m_op_time = t.metric_id("op.time");
  m_op_count = t.metric_id("op.count");
  // The analyzer's steady state (docs/analyzer.md): an operator context's first call (cuBLAS and
  // cuDNN handles, allocator growth, lazy loading) and the autograd nodes forward ops created.
  m_op_first_time = t.metric_id("op.first_time");
  m_autograd_nodes = t.metric_id("autograd.nodes");
  g_opts = opts;
  init_clock();  // before the first event reads it
  g_epoch.fetch_add(1);  // every event source compares its epoch with this one
  if (opts.native) {
    native::init();
    g_native_in_handler = std::strcmp(native::unwinder_name(), "libunwind") == 0;
  }
  if (opts.sample) install_handler();
  g_started.store(true);
  registry::arm_all();
  register_current_thread();  // (the starting thread runs Python)
  g_enabled.store(true);
  start_sampler_thread();
}

void stop() {
  stop_sampler_thread();  // its last poll charges workers while capture is still enabled
  g_enabled.store(false);
  g_started.store(false);
  registry::disarm_all();
  registry::drain_all();  // rings of this session, folded before the final snapshot
  registry::reap();
  uint64_t refused = registry::refused_registrations();
  if (refused > 0)
    add_note("sampler: " + std::to_string(refused) + " thread(s) could not be registered and were "
             "not sampled");
}

bool is_enabled() { return g_enabled.load(std::memory_order_relaxed); }

void set_paused(bool paused) {
  if (g_started.load()) g_enabled.store(!paused);
}

void drop_pending_sample() { registry::drop_self_pending_expiry(); }

void reset_metrics() {
  registry::drain_all();
  tree().reset_metrics();
}

void checkpoint_metrics() {
  registry::drain_all();
  tree().checkpoint_metrics();
}

void rollback_metrics() {
  registry::drain_all();
  tree().rollback_metrics();
}

void register_current_thread() {
  // (a Python thread that runs no operator is registered only here; unregistered, the sampler
  // thread's scan would find it and poll it as a worker, its time under `[thread] <name>`)
  registry::self();
  warm_native();
}

void register_thread(unsigned long pthread_id, pid_t tid) {
  if (tid > 0) registry::adopt(tid, pthread_id);
}

void ignore_thread(pid_t tid) {
  if (tid > 0) registry::ignore(tid);
}

uint32_t child_node(uint32_t parent, int kind, const char* name, const char* extra) {
  TreeWriter t(tree());
  if (!t.has_node(parent)) parent = 0;
  return t.child(parent, t.named_frame(static_cast<Kind>(kind), name ? name : "",
                                       extra ? extra : ""));
}

void add_metric(uint32_t node, uint32_t metric, double value) {
  TreeWriter t(tree());
  t.add(node, metric, value);
}

uint32_t metric_id(const char* name) { return tree().metric_id(name); }

uint32_t epoch() { return g_epoch.load(std::memory_order_relaxed); }

void add_note(const std::string& text) {
  std::lock_guard<std::mutex> g(g_notes_mu);
  for (const auto& n : g_notes)
    if (n == text) return;
  g_notes.push_back(text);
}

std::string notes_joined() {
  std::lock_guard<std::mutex> g(g_notes_mu);
  std::string out;
  for (const auto& n : g_notes) out.append(n).push_back('\n');
  return out;
}

void drain_samples() { registry::drain_all(); }

uint64_t dropped_samples() { return registry::dropped_samples(); }
void native_stack_memo(uint64_t* unwound, uint64_t* recalled, uint64_t* learned) {
  registry::stack_memo_counts(unwound, recalled, learned);
}

size_t live_thread_states() { return registry::live_states(); }

}  // namespace dc
