// The one binding file: the Python face of the native core. Logic lives on either side.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "../callpath/native_bindings.h"
#include "../callpath/python_walk.h"
#include "../callpath/native_stack.h"
#include "../cct/capture.h"
#include "../cct/native_context.h"
#include "../cct/thread_state.h"
#include "../cct/tree.h"
#include "../gpu/gpu.h"
#include "../hooks/got_patch.h"
#include "../hooks/hooks.h"
#include "../gpu/pc_sampling.h"
#include "../memory/memory.h"
#include "../perf/perf_counters.h"
#include "deepcontext/c_api.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

std::atomic<uint64_t> g_py_handles{1ULL << 62};  // dispatch-tier handles, disjoint from torch's
nb::object* g_op_observer = nullptr;

void py_observer(const char* name, int phase, uint32_t node) {
  PyGILState_STATE st = PyGILState_Ensure();
  if (g_op_observer != nullptr) {
    try {
      nb::object n = name ? nb::object(nb::str(name)) : nb::none();
      (*g_op_observer)(n, phase, node);
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("deepcontext monitor callback");
    }
  }
  PyGILState_Release(st);
}

int api_enabled() { return dc::is_enabled() ? 1 : 0; }
void api_note(const char* text) { dc::add_note(text ? text : ""); }

int api_mem_active() { return dc::memory::active() ? 1 : 0; }
int api_mem_device(const char* name, int totals) {
  return dc::memory::device_slot(name ? name : "?", totals != 0);
}

// DEEPCONTEXT_OP_DIAG=empty-callbacks: the torch hook runs as always (nested calls hidden) but
// each operator event returns at once, so what is left is RecordFunction's own cost around our
// callbacks: a measuring aid (benchmarks/models.py "op%op-empty-callbacks"), never a user
// setting. Read at each start; the entry points are rewritten only when it changes.
// DEEPCONTEXT_OP_DIAG=no-prefetch: each event's lookups are not fetched ahead (ops.cpp:
// prefetch_next_event), to measure what that buys.
void op_enter_ignored(const char*, uint64_t, int64_t, uint64_t, uint64_t, int) {}
void op_exit_ignored(uint64_t, int) {}

dc_api g_api = {DC_API_VERSION, dc::op_enter, dc::op_exit, api_enabled, dc::current_node,
                dc::child_node,  dc::metric_id,  dc::add_metric, api_note,
                api_mem_active, api_mem_device, dc::memory::event, dc::memory::allocator_event,
                dc::op_enter_linked, dc::hooks::rebind_everywhere, dc::hooks::count_bindings};

using NodeRow = std::tuple<uint32_t, uint32_t>;
using FrameRow = std::tuple<std::string, std::string, std::string, int, std::string>;
using MetricRow = std::tuple<uint32_t, uint32_t, double>;

// What the Python side needs to rebuild the session's tree (buffered samples folded in first):
// the contexts that carry a metric or are in `keep`, with their ancestors (Tree::snapshot).
std::tuple<std::vector<NodeRow>, std::vector<FrameRow>, std::vector<std::string>,
           std::vector<MetricRow>, std::vector<uint32_t>>
snapshot(const std::vector<uint32_t>& keep) {
  dc::Snapshot snap;
  {
    // The core's own locks guard all of this (its sampler thread drains the same way): the
    // program's threads run meanwhile instead of waiting on the flusher for the GIL.
    nb::gil_scoped_release release;
    dc::drain_samples();
    std::vector<MetricRow> memory;  // (kept by the memory layer, by tree id)
    dc::memory::export_metrics(memory);
    snap = dc::tree().snapshot(keep, memory);
  }
  std::vector<FrameRow> frames;
  frames.reserve(snap.frames.size());
  for (auto& f : snap.frames)
    frames.emplace_back(dc::kind_name(f.kind), std::move(f.name), std::move(f.file), f.line,
                        std::move(f.extra));
  std::vector<NodeRow> nodes;
  nodes.reserve(snap.nodes.size());
  for (const auto& n : snap.nodes) nodes.emplace_back(n.first, n.second);
  return {std::move(nodes), std::move(frames), std::move(snap.metric_names),
          std::move(snap.metrics), std::move(snap.ids)};
}

std::vector<FrameRow> path_frames(uint32_t node) {
  dc::tree().describe_native_frames();
  std::vector<dc::SnapshotFrame> path;
  {
    dc::TreeWriter t(dc::tree());
    path = t.path(node);
  }
  std::vector<FrameRow> out;
  for (auto& f : path) out.emplace_back(dc::kind_name(f.kind), f.name, f.file, f.line, f.extra);
  return out;
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "DeepContext native core: Python frame walk, operator stack, sampler, tree.";

  m.def("start", [](bool python, bool ops, bool sample, double interval, bool native) {
        dc::Options o;
        o.python = python;
        o.ops = ops;
        o.native = native;
        o.sample = sample;
        o.sample_interval = interval;
        if (python) dc_watch_code_deaths(1);  // (the GIL is held here: the walk's chain needs it)
        const char* diag = std::getenv("DEEPCONTEXT_OP_DIAG");
        const bool ignored = diag != nullptr && std::strcmp(diag, "empty-callbacks") == 0;
        dc::set_op_prefetch(diag == nullptr || std::strcmp(diag, "no-prefetch") != 0);
        if ((g_api.op_enter == op_enter_ignored) != ignored) {
          g_api.op_enter = ignored ? op_enter_ignored : dc::op_enter;
          g_api.op_exit = ignored ? op_exit_ignored : dc::op_exit;
        }
        dc::start(o);
      }, "python"_a = true, "ops"_a = true, "sample"_a = true, "interval"_a = 0.01,
      "native"_a = false);
  m.def("stop", [](double gpu_wait) {
    dc::stop();
    dc_watch_code_deaths(0);
    nb::gil_scoped_release release;  // CUPTI may deliver buffers on its own thread meanwhile
    dc::gpu_stop(gpu_wait);
  }, "gpu_wait"_a = 5.0, "Stop capture; GPU records still in flight are awaited up to gpu_wait s.");
  m.def("enabled", &dc::is_enabled);
  m.def("set_paused", &dc::set_paused, "paused"_a);
  m.def("drop_pending_sample", &dc::drop_pending_sample);
  m.def("reset_metrics", [] {
    dc::reset_metrics();
    dc::memory::reset_metrics();
  });
  m.def("memory_start", &dc::memory::start, "Start the memory layer (a fresh live table).");
  m.def("memory_stop", &dc::memory::stop);
  m.def("memory_footprint", [] {
    dc::memory::Footprint f = dc::memory::footprint();
    nb::dict out;
    out["live_allocations"] = f.live_allocations;
    out["table_bytes"] = f.table_bytes;
    out["high_water"] = f.high_water;
    out["context_bytes"] = f.context_bytes;
    out["unmatched_frees"] = f.unmatched_frees;
    return out;
  }, "The memory layer's own memory: live-table entries and bytes, per-context bytes.");
  m.def("memory_devices", &dc::memory::device_names);
  m.def("checkpoint_metrics", [] {
    dc::checkpoint_metrics();
    dc::memory::checkpoint_metrics();
  }, "Save every metric (a warm-up begins).");
  m.def("rollback_metrics", [] {
    dc::rollback_metrics();
    dc::memory::rollback_metrics();
  }, "Restore the metrics saved by checkpoint_metrics (a warm-up ends).");
  m.def("resolve", &dc::drain_samples, "Fold buffered CPU samples into the tree.");
  m.def("register_thread", &dc::register_current_thread,
        "Register the calling thread with the sampler.");
  m.def("register_other_thread", [](unsigned long ident, long native_id) {
        dc::register_thread(ident, static_cast<pid_t>(native_id));
      }, "ident"_a, "native_id"_a);
  m.def("register_python_threads", [](long skip_native_id) {
#if PY_VERSION_HEX >= 0x030B0000
    // Threads started from C (PyGILState_Ensure) never pass threading's profile hook.
    PyInterpreterState* interp = PyInterpreterState_Get();
    for (PyThreadState* ts = PyInterpreterState_ThreadHead(interp); ts != nullptr;
         ts = PyThreadState_Next(ts)) {
      auto tid = static_cast<long>(ts->native_thread_id);
      if (tid != skip_native_id) dc::register_thread(ts->thread_id, static_cast<pid_t>(tid));
    }
#endif
  }, "skip_native_id"_a,
     "Sample every thread the interpreter knows (3.11+), but one.");
  m.def("ignore_thread", [](long tid) { dc::ignore_thread(static_cast<pid_t>(tid)); }, "tid"_a,
        "Never measure this thread (the profiler's own).");
  m.def("op_enter", [](const std::string& name, int64_t seq_nr, bool is_backward, uint64_t fwd_tid,
                       uint64_t rf_tid) {
        uint64_t h = g_py_handles.fetch_add(1);
        dc::op_enter(name.c_str(), h, seq_nr, rf_tid, fwd_tid, is_backward ? DC_OP_BACKWARD : 0);
        return h;
      }, "name"_a, "seq_nr"_a = -1, "is_backward"_a = false, "fwd_tid"_a = 0, "rf_tid"_a = 0);
  m.def("op_exit", [](uint64_t handle) { dc::op_exit(handle, -1); }, "handle"_a);
  // (const char*: the module layer passes the same cached strings every call, read in place;
  // the core's frame memo knows them by address)
  m.def("scope_enter", [](const char* name, const char* extra, int skip_py) {
        uint64_t h = g_py_handles.fetch_add(1);
        dc::scope_enter(DC_KIND_MODULE, name, extra, h, skip_py);  // (None is refused: non-null)
        return h;
      }, "name"_a, "extra"_a = "", "skip_py"_a = 0,
      "Open a module scope (closed by op_exit) that later ops and samples nest under.");
  m.def("current_node", &dc::current_node);
  m.def("child_node", [](uint32_t parent, int kind, const std::string& name,
                         const std::string& extra) {
        return dc::child_node(parent, kind, name.c_str(), extra.c_str());
      });
  m.def("metric_id", [](const std::string& n) { return dc::metric_id(n.c_str()); });
  m.def("add_metric", &dc::add_metric);
  m.def("note", [](const std::string& s) { dc::add_note(s); });
  m.def("notes", &dc::notes_joined);
  m.def("op_clock", &dc::op_clock);
  m.def("dropped_samples", &dc::dropped_samples);
  m.def("native_stack_memo", [] {
    uint64_t unwound, recalled, learned;
    dc::native_stack_memo(&unwound, &recalled, &learned);
    return nb::make_tuple(unwound, recalled, learned);
  }, "(native stacks unwound for operator events and launches, events that took a remembered "
     "stack instead, stacks remembered).");
  m.def("splice_mismatches", &dc::splice_mismatches,
        "Events whose native and Python stacks could not be paired (Python-only path used).");
  m.def("snapshot", &snapshot, "keep"_a = std::vector<uint32_t>(),
        "The session's part of the tree: (nodes, frames, metric names, metrics, tree ids).");
  m.def("tree_size", [] { return dc::tree().size(); },
        "Contexts in the core's tree, every session's (it outlives them).");
  m.def("path_frames", &path_frames, "node"_a, "Frames from the root to a node, outermost first.");
  m.def("set_op_observer", [](nb::object cb) {
    if (cb.is_none()) {
      dc::set_op_observer(nullptr);
      return;
    }
    if (g_op_observer == nullptr) g_op_observer = new nb::object();
    *g_op_observer = cb;
    dc::set_op_observer(py_observer);
  }, "callback"_a.none());
  m.def("gpu_start", &dc::gpu_start, "lib_dirs"_a = std::vector<std::string>(),
        "Start CUPTI capture; returns '' or why it is off.");
  m.def("gpu_flush", [](double wait) {
    nb::gil_scoped_release release;
    dc::gpu_flush(wait);
  }, "wait"_a = 0.0, "Fold completed GPU activity into the tree (waiting up to `wait` s).");
  m.def("gpu_stop", [](double wait) {
    nb::gil_scoped_release release;
    dc::gpu_stop(wait);
  }, "wait"_a = 5.0);
  m.def("gpu_release", [] {
    nb::gil_scoped_release release;
    dc::gpu_release();
  }, "A schedule is done: stop tracing, detach CUPTI once the records due are in.");
  m.def("gpu_stats", [] {
    dc::GpuStats s = dc::gpu_stats();
    nb::dict out;
    out["active"] = s.active;
    out["library"] = s.library;
    out["kernel_time"] = s.kernel_time;
    for (auto [k, v] : {std::pair<const char*, uint64_t>{"kernels", s.kernels},
                        {"records", s.records}, {"unattributed", s.unattributed},
                        {"ignored", s.ignored}, {"incomplete", s.incomplete},
                        {"dropped", s.dropped}, {"graph_unmapped", s.graph_unmapped},
                        {"nested_matches", s.nested_matches}, {"graph_nodes", s.graph_nodes},
                        {"attaches", s.attaches}, {"detaches", s.detaches}})
      out[k] = v;
    out["pending"] = s.pending;
    nb::list devices;
    for (const auto& d : s.devices) {
      nb::dict dd;
      dd["id"] = d.id;
      dd["name"] = d.name;
      dd["sms"] = d.sms;
      dd["memory"] = d.memory;
      dd["compute_capability"] = std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
      dd["kernel_time"] = d.kernel_time;
      dd["kernels"] = d.kernels;
      dd["memcpy_time"] = d.memcpy_time;
      dd["memcpy_bytes"] = d.memcpy_bytes;
      dd["memcpys"] = d.memcpys;
      dd["memset_time"] = d.memset_time;
      dd["memset_bytes"] = d.memset_bytes;
      dd["memsets"] = d.memsets;
      devices.append(dd);
    }
    out["devices"] = devices;
    return out;
  }, "GPU capture counters and per-device totals (with device name, SMs, memory).");
  m.def("gpu_available", &dc::gpu_compiled);
  m.def("native_info", [] {
    nb::dict d;
    d["unwinder"] = dc::native::unwinder_name();
    d["line_reader"] = dc::native::line_reader_name();
    return d;
  }, "Which unwinder and line reader this process uses.");
  m.def("native_add_self_object", &dc::native::add_self_object, "address"_a,
        "Hide the frames of the object (shared library) that maps `address`, e.g. the torch hook.");
  m.def("pc_configure", &dc::pc::configure, "on"_a, "period_log2"_a = 0, "mode"_a = "continuous",
        "Turn PC sampling on or off (before gpu_start).");
  m.def("pc_take", [] {
    dc::pc::Collected c = dc::pc::take();
    nb::dict out;
    out["mode"] = c.mode;
    out["period_log2"] = c.period_log2;
    out["reasons"] = c.reasons;
    nb::list records;
    for (const auto& r : c.records) {
      nb::dict stalls;
      for (auto [slot, n] : r.stalls) stalls[nb::int_(slot)] = n;
      records.append(nb::make_tuple(r.cubin_crc, r.function, r.mangled, r.pc_offset,
                                    r.context_node == 0xFFFFFFFFu ? -1 : int64_t(r.context_node),
                                    stalls));
    }
    out["records"] = records;
    nb::dict cubins;
    for (const auto& [crc, bytes] : c.cubins) cubins[nb::int_(crc)] = nb::bytes(bytes.data(), bytes.size());
    out["cubins"] = cubins;
    out["total_samples"] = c.total_samples;
    out["dropped_samples"] = c.dropped_samples;
    out["non_user_samples"] = c.non_user_samples;
    out["ignored_records"] = c.ignored_records;
    out["ranges"] = c.ranges;
    out["log"] = c.log;
    return out;
  }, "PC samples collected (after gpu_stop): reasons, (crc, function, mangled, pc, node, "
     "{slot: samples}) records, cubins by CRC, counters and CUPTI's answers at each step.");
  m.attr("c_api") = nb::capsule(&g_api, DC_API_CAPSULE);
  m.attr("API_VERSION") = DC_API_VERSION;

  // -- declared hooks and CPU counters (docs/hooks.md) --
  m.def("hooks_install", [](const std::vector<std::tuple<std::string, std::string, int, int>>& specs) {
    std::vector<dc::hooks::HookSpec> out;
    for (const auto& [lib, fn, kind, bytes_arg] : specs)
      out.push_back({lib, fn, static_cast<dc::hooks::HookKind>(kind), bytes_arg});
    return dc::hooks::install(out);
  }, "specs"_a, "Hook (library, function, kind index, bytes_arg); '' or a one-line error.");
  m.def("hooks_uninstall", &dc::hooks::uninstall);
  m.def("hooks_installed", [] {
    std::vector<std::tuple<std::string, std::string, bool, int>> out;
    for (const auto& h : dc::hooks::installed()) out.emplace_back(h.library, h.function, h.loaded, h.bindings);
    return out;
  }, "(library, function, loaded, GOT slots patched) per declared hook.");
  m.def("perf_configure", &dc::perf::configure, "on"_a, "CPU counters for threads armed next; returns a note.");
  m.def("perf_close", [] {
    dc::perf::close_all();
    return dc::perf::budget_reached();
  }, "Close every thread's counters; True if some thread went without (fd budget).");

  // Test and benchmark entry points live apart from the production API: `_core.testing`
  // (native stack pieces, the frame walk, registry counters; csrc/callpath/native_bindings.cpp).
  nb::module_ testing = m.def_submodule("testing", "Entry points for tests and benchmarks only.");
  dc::native::bind_testing(testing);
  testing.def("walk_depth", [] {
    dc_raw_frame buf[dc::kMaxPyDepth];
    return dc_walk_python(dc_this_thread_state(), buf, dc::kMaxPyDepth);
  }, "Number of Python frames the native walk sees on this thread.");
  testing.def("watch_code_deaths", &dc_watch_code_deaths, "on"_a,
              "Count code objects' deaths (what the chain walk needs); returns whether it does.");
  testing.def("chain_walk", [] {
    // One chain for the calling test (its own thread), kept as op_enter keeps a thread's.
    static dc_chain* chain = new dc_chain();
    int kept = -1;
    const int m = dc_walk_python_since(dc_this_thread_state(), chain, dc::kMaxPyDepth, &kept);
    if (m < 0) return nb::object(nb::none());
    nb::list path;  // outermost first: (file, line) of every frame with code (all live now)
    for (int i = 0; i < chain->n; ++i) {
      dc_raw_frame f;
      if (chain->code[i] == nullptr || dc_describe_frame(chain->link[i].frame, &f) != 1) continue;
      char file[512], name[256];
      const int line = dc_describe_code(f.code, f.offset, file, sizeof file, name, sizeof name);
      path.append(nb::make_tuple(std::string(file), line));
    }
    return nb::object(nb::make_tuple(kept < 0 ? 0 : chain->described[kept], m, path));
  }, "(frames kept from the last call's chain, frames described anew, the whole path) or None.");
  testing.def("live_thread_states", &dc::live_thread_states,
              "Thread states the registry holds now (not yet reaped).");
}
