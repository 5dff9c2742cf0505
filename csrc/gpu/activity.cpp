// Activity records -> tree. CUPTI hands back filled buffers (on its worker thread, or inside
// cuptiActivityFlushAll); each buffer is parsed without locks, then folded into the tree in
// chunks: the launch's context node (from the correlation map) gets a kernel / memcpy / memset
// child carrying time, counts and bytes. Graph-replayed work is grafted below the replay's
// context, under the context where its graph node was captured.
#include <cxxabi.h>

#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "../cct/capture.h"
#include "../cct/tree.h"
#include "deepcontext/c_api.h"
#include "gpu.h"
#include "gpu_internal.h"

namespace dc {
namespace gpu {

#if defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 130000
using KernelRecord = CUpti_ActivityKernel10;
using MemcpyRecord = CUpti_ActivityMemcpy6;
#else
using KernelRecord = CUpti_ActivityKernel9;
using MemcpyRecord = CUpti_ActivityMemcpy5;
#endif
using MemsetRecord = CUpti_ActivityMemset4;

namespace {

constexpr size_t kBufferSize = 4u << 20;
constexpr size_t kPoolMax = 8;
constexpr uint32_t kMaxDevices = 64;
constexpr size_t kChunk = 256;  // records folded per tree-lock hold

enum ItemType : uint8_t { kKernel, kMemcpy, kMemset };

struct Item {
  ItemType type;
  uint8_t copy_kind, src_kind, dst_kind;
  uint32_t corr, corr2, device;
  uint64_t graph_node, start, end, bytes;
  const char* name;
  int32_t grid[3], block[3], smem;
  uint16_t regs;
};

// A kernel's node is keyed by its context, device and name only: with dynamic shapes every new
// grid would otherwise grow the tree. The node's shape properties are its first launch's.
struct KernelKey {
  uint32_t ctx, device, name;
  bool operator==(const KernelKey& o) const {
    return ctx == o.ctx && device == o.device && name == o.name;
  }
};
struct KernelKeyHash {
  size_t operator()(const KernelKey& k) const {
    return std::hash<uint64_t>()((uint64_t(k.ctx) << 32) ^ (uint64_t(k.name) << 8) ^ k.device);
  }
};

// Heap-allocated and never freed: CUPTI may deliver a buffer while static destructors run.
struct FoldState {
  std::mutex pool_mu;
  std::vector<uint8_t*> pool;
  std::unordered_set<uint8_t*> lent;  // buffers CUPTI holds now: only these come back to us
  std::mutex fold_mu;  // one fold at a time; guards everything below
  std::unordered_map<KernelKey, uint32_t, KernelKeyHash> kernel_nodes;
  std::unordered_map<uint64_t, uint32_t> copy_nodes;   // ctx | kind bits | device
  std::unordered_map<uint64_t, uint32_t> grafts;       // replay ctx << 32 | capture ctx
  std::unordered_map<const char*, uint32_t> by_pointer;  // record name pointer -> name id
  std::unordered_map<std::string, uint32_t> by_text;     // mangled name -> name id
  std::vector<std::string> raw, demangled;               // by name id
  uint32_t unattributed = 0;
  GpuStats stats;
  GpuDeviceStats dev[kMaxDevices];
};
FoldState& S() {
  static FoldState* s = new FoldState();
  return *s;
}
uint32_t m_gpu_time, m_launches, m_cp_time, m_cp_bytes, m_cp_count, m_ms_time, m_ms_bytes,
    m_ms_count;

// A stable id for a kernel's (mangled) name. Records point into CUPTI-owned strings; a cached
// pointer is trusted only while its text still matches (CUPTI may reuse memory across sessions).
uint32_t name_id(const char* name) {
  if (name == nullptr) name = "<unnamed kernel>";
  auto it = S().by_pointer.find(name);
  if (it != S().by_pointer.end() && S().raw[it->second] == name) return it->second;
  auto text = S().by_text.find(name);
  uint32_t id;
  if (text != S().by_text.end()) {
    id = text->second;
  } else {
    id = static_cast<uint32_t>(S().raw.size());
    S().raw.emplace_back(name);
    int status = 0;
    char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    S().demangled.emplace_back(d != nullptr && status == 0 ? d : name);
    std::free(d);
    S().by_text.emplace(S().raw.back(), id);
  }
  S().by_pointer[name] = id;
  return id;
}

const char* copy_direction(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return "HtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return "AtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD: return "AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return "DtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA: return "AtoA";
    default: return "copy";
  }
}

const char* memory_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return "pageable";
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return "pinned";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE: return "device";
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY: return "array";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED: return "managed";
    default: return "unknown";
  }
}

// The replayed work's parent: the replay context, a "cuda graph" marker, then the capture
// context's frames that the replay path does not already share.
uint32_t graft(TreeWriter& t, uint32_t replay, uint32_t capture) {
  uint64_t key = (uint64_t(replay) << 32) | capture;
  auto it = S().grafts.find(key);
  if (it != S().grafts.end()) return it->second;
  std::vector<uint32_t> cap, rep;
  for (uint32_t n = capture; n != 0 && t.has_node(n); n = t.parent(n)) cap.push_back(n);
  for (uint32_t n = replay; n != 0 && t.has_node(n); n = t.parent(n)) rep.push_back(n);
  size_t common = 0;
  while (common < cap.size() && common < rep.size() &&
         cap[cap.size() - 1 - common] == rep[rep.size() - 1 - common])
    ++common;
  uint32_t node = t.child(replay, t.named_frame(Kind::Marker, "cuda graph"));
  for (size_t i = cap.size() - common; i-- > 0;) node = t.child(node, t.frame_of(cap[i]));
  S().grafts.emplace(key, node);
  return node;
}

// The context node for an item, or kIgnored.
uint32_t context_of(TreeWriter& t, const Item& it) {
  uint32_t v = 0, corr = it.corr;
  bool found = it.corr2 != 0 && correlations().get(it.corr2, &v);
  if (found) corr = it.corr2;
  else found = correlations().get(it.corr, &v);
  if (found && v == kIgnored) {
    ++S().stats.ignored;
    return kIgnored;
  }
  if (found && (v & kCountFlag) && correlations().settle(corr)) g_settled.fetch_add(1);
  if (found && (v & kNestedFlag)) ++S().stats.nested_matches;
  uint32_t ctx = v & kNodeMask;
  if (!found || !t.has_node(ctx)) {
    ++S().stats.unattributed;
    if (S().unattributed == 0) S().unattributed = t.child(0, t.named_frame(Kind::Marker, "<unattributed>"));
    ctx = S().unattributed;
  }
  if (it.graph_node != 0) {
    uint32_t cap = 0;
    if (graph_nodes().get(it.graph_node, &cap) && t.has_node(cap)) return graft(t, ctx, cap);
    ++S().stats.graph_unmapped;
    return t.child(ctx, t.named_frame(Kind::Marker, "cuda graph"));
  }
  return ctx;
}

void fold(TreeWriter& t, const Item& it) {
  if (it.start == 0 || it.end < it.start) {
    ++S().stats.incomplete;
    return;
  }
  uint32_t ctx = context_of(t, it);
  if (ctx == kIgnored) return;
  double secs = (it.end - it.start) * 1e-9;
  GpuDeviceStats& dev = S().dev[it.device < kMaxDevices ? it.device : kMaxDevices - 1];
  dev.id = it.device;
  if (it.type == kKernel) {
    uint32_t name = name_id(it.name);
    KernelKey key{ctx, it.device, name};
    auto f = S().kernel_nodes.find(key);
    uint32_t node;
    if (f != S().kernel_nodes.end()) {
      node = f->second;
    } else {
      char extra[160];
      std::snprintf(extra, sizeof extra, "grid=%dx%dx%d;block=%dx%dx%d;regs=%u;smem=%d;device=%u",
                    it.grid[0], it.grid[1], it.grid[2], it.block[0], it.block[1], it.block[2],
                    unsigned(it.regs), it.smem, it.device);
      node = t.child(ctx, t.named_frame(Kind::Kernel, S().demangled[name], extra));
      S().kernel_nodes.emplace(key, node);
    }
    t.add(node, m_gpu_time, secs);
    t.add(node, m_launches, 1.0);
    S().stats.kernel_time += secs;
    ++S().stats.kernels;
    dev.kernel_time += secs;
    ++dev.kernels;
    return;
  }
  bool copy = it.type == kMemcpy;
  uint64_t key = (uint64_t(ctx) << 32) | (uint64_t(it.type) << 28) | (uint64_t(it.copy_kind) << 20) |
                 (uint64_t(it.src_kind) << 16) | (uint64_t(it.dst_kind) << 12) | (it.device & 0xfff);
  auto f = S().copy_nodes.find(key);
  uint32_t node;
  if (f != S().copy_nodes.end()) {
    node = f->second;
  } else {
    std::string name, extra = "device=" + std::to_string(it.device);
    if (copy) {
      name = copy_direction(it.copy_kind);
      uint8_t host = it.copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD ? it.src_kind
                     : it.copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? it.dst_kind : 0;
      if (host != 0) name += std::string(" ") + memory_kind(host);
      extra += std::string(";src=") + memory_kind(it.src_kind) + ";dst=" + memory_kind(it.dst_kind);
    } else {
      name = std::string("memset ") + memory_kind(it.dst_kind);
    }
    node = t.child(ctx, t.named_frame(copy ? Kind::Memcpy : Kind::Memset, name, extra));
    S().copy_nodes.emplace(key, node);
  }
  t.add(node, copy ? m_cp_time : m_ms_time, secs);
  t.add(node, copy ? m_cp_bytes : m_ms_bytes, double(it.bytes));
  t.add(node, copy ? m_cp_count : m_ms_count, 1.0);
  if (copy) {
    dev.memcpy_time += secs, dev.memcpy_bytes += it.bytes, ++dev.memcpys;
  } else {
    dev.memset_time += secs, dev.memset_bytes += it.bytes, ++dev.memsets;
  }
}

bool parse(const CUpti_Activity* rec, Item* it) {
  std::memset(it, 0, sizeof *it);
  switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const KernelRecord*>(rec);
      it->type = kKernel;
      it->corr = k->correlationId;
      it->device = k->deviceId;
      it->graph_node = k->graphNodeId;
      it->start = k->start, it->end = k->end;
      it->name = k->name;
      it->grid[0] = k->gridX, it->grid[1] = k->gridY, it->grid[2] = k->gridZ;
      it->block[0] = k->blockX, it->block[1] = k->blockY, it->block[2] = k->blockZ;
      it->regs = k->registersPerThread;
      it->smem = k->staticSharedMemory + k->dynamicSharedMemory;
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const MemcpyRecord*>(rec);
      it->type = kMemcpy;
      it->corr = m->correlationId, it->corr2 = m->runtimeCorrelationId;
      it->device = m->deviceId;
      it->graph_node = m->graphNodeId;
      it->start = m->start, it->end = m->end, it->bytes = m->bytes;
      it->copy_kind = m->copyKind, it->src_kind = m->srcKind, it->dst_kind = m->dstKind;
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const MemsetRecord*>(rec);
      it->type = kMemset;
      it->corr = m->correlationId;
      it->device = m->deviceId;
      it->graph_node = m->graphNodeId;
      it->start = m->start, it->end = m->end, it->bytes = m->bytes;
      it->dst_kind = static_cast<uint8_t>(m->memoryKind);
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

const std::vector<CUpti_ActivityKind>& activity_kinds() {
  static const auto* kinds = new std::vector<CUpti_ActivityKind>{
      CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};
  return *kinds;
}

void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  uint8_t* b = nullptr;
  {
    std::lock_guard<std::mutex> g(S().pool_mu);
    if (!S().pool.empty()) {
      b = S().pool.back();
      S().pool.pop_back();
    }
  }
  if (b == nullptr) b = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferSize));
  if (b != nullptr) {
    std::lock_guard<std::mutex> g(S().pool_mu);
    S().lent.insert(b);
  }
  *buffer = b;
  *size = b ? kBufferSize : 0;
  *max_records = 0;
}

void CUPTIAPI on_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t,
                                  size_t valid) {
  // A plain local: CUPTI may deliver buffers from its exit handler, after this thread's
  // thread_local objects were destroyed.
  std::vector<Item> items;
  items.reserve(valid / sizeof(KernelRecord) + 1);
  CUpti_Activity* rec = nullptr;
  uint64_t read = 0;
  while (buffer && cupti().cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    ++read;
    Item it;
    if (parse(rec, &it)) items.push_back(it);
  }
  size_t dropped = 0;
  if (ctx != nullptr) cupti().cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped);
  {
    std::lock_guard<std::mutex> fg(S().fold_mu);
    S().stats.records += read;
    S().stats.dropped += dropped;
    for (size_t i = 0; i < items.size(); i += kChunk) {
      TreeWriter t(tree());
      for (size_t j = i; j < items.size() && j < i + kChunk; ++j) fold(t, items[j]);
    }
  }
  if (buffer == nullptr) return;
  std::lock_guard<std::mutex> g(S().pool_mu);
  // A buffer we did not lend (another client's, after it registered its own callbacks), or one
  // delivered twice, is never pooled or freed here: that would corrupt the heap.
  if (S().lent.erase(buffer) == 0) return;
  if (S().pool.size() < kPoolMax) S().pool.push_back(buffer);
  else std::free(buffer);
}

void init_activity_metrics() {
  m_gpu_time = dc::metric_id("gpu.time");
  m_launches = dc::metric_id("gpu.launches");
  m_cp_time = dc::metric_id("memcpy.time");
  m_cp_bytes = dc::metric_id("memcpy.bytes");
  m_cp_count = dc::metric_id("memcpy.count");
  m_ms_time = dc::metric_id("memset.time");
  m_ms_bytes = dc::metric_id("memset.bytes");
  m_ms_count = dc::metric_id("memset.count");
}

void reset_stats() {
  std::lock_guard<std::mutex> fg(S().fold_mu);
  S().stats = GpuStats{};
  for (auto& d : S().dev) d = GpuDeviceStats{};
}

void fill_stats(GpuStats* out) {
  std::lock_guard<std::mutex> fg(S().fold_mu);
  std::string library = out->library;
  bool active = out->active;
  *out = S().stats;
  out->library = library;
  out->active = active;
  out->pending = g_issued.load() - g_settled.load();
  out->graph_nodes = g_graph_nodes.load();
  for (uint32_t d = 0; d < kMaxDevices; ++d)
    if (S().dev[d].kernels + S().dev[d].memcpys + S().dev[d].memsets > 0) out->devices.push_back(S().dev[d]);
}

}  // namespace gpu
}  // namespace dc
