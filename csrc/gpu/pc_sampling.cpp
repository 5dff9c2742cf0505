// CUPTI PC sampling (docs/pc-sampling.md). Sampling is enabled lazily on each CUDA context at its
// first kernel launch (the context exists by then), configured with every stall reason and one
// parsed-data buffer; the records are read after each kernel in serialized mode (where they
// carry the launch's correlation id) and at stop otherwise (measured on the H200: GetData gives
// nothing during the run in continuous mode, the configured buffer holds the records after
// cuptiPCSamplingDisable). Cubins are copied at module load so SASS and source lines can be
// recovered at the end, off the hot path. Nothing here runs unless configure(true, ...) was called.
#include "pc_sampling.h"

#include "../cct/capture.h"

#include <atomic>
#include <mutex>

namespace dc {
namespace pc {
namespace {
std::atomic<bool> g_on{false};
std::string g_mode = "continuous";
int g_period = 0;
}  // namespace

void configure(bool on, int period_log2, const std::string& mode) {
  g_mode = mode;
  g_period = period_log2;
  g_on.store(on, std::memory_order_relaxed);
}

bool active() { return g_on.load(std::memory_order_relaxed); }

}  // namespace pc
}  // namespace dc

#ifndef DC_HAVE_CUPTI
namespace dc {
namespace pc {
Collected take() {
  Collected c;
  c.mode = g_mode;
  c.period_log2 = g_period;
  if (active()) c.log.push_back("PC sampling off: this build has no CUPTI headers");
  return c;
}
}  // namespace pc
}  // namespace dc
#else
#include <cupti_pcsampling.h>
#include <cxxabi.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "gpu_internal.h"

namespace dc {
namespace pc {
namespace {

constexpr size_t kPcsPerRead = 4096;     // PC records per cuptiPCSamplingGetData
constexpr size_t kPcsConfigured = 16384; // the buffer CUPTI fills until disable (continuous mode
                                         // reads nothing earlier): every distinct PC of the run

// One buffer in CUPTI's parsed format: `capacity` PCs, each with room for every reason.
struct Buffer {
  CUpti_PCSamplingData data{};
  std::vector<CUpti_PCSamplingPCData> pcs;
  std::vector<CUpti_PCSamplingStallReason> stalls;
  size_t capacity = 0;
  void init(size_t reasons, size_t count) {
    capacity = count;
    pcs.assign(count, CUpti_PCSamplingPCData{});
    stalls.assign(count * reasons, CUpti_PCSamplingStallReason{});
    for (size_t i = 0; i < count; ++i) {
      pcs[i].size = sizeof(CUpti_PCSamplingPCData);
      pcs[i].stallReasonCount = reasons;
      pcs[i].stallReason = &stalls[i * reasons];
    }
    data = CUpti_PCSamplingData{};
    data.size = sizeof(CUpti_PCSamplingData);
    data.collectNumPcs = count;
    data.pPcData = pcs.data();
  }
};

struct ContextState {
  bool enabled = false;
  bool ranged = false;    // continuous mode under start/stop control: samples only while capturing
  bool sampling = false;  // between cuptiPCSamplingStart and Stop (ranged only)
  size_t reasons = 0;
  std::vector<uint32_t> reason_index;  // CUPTI's index, by slot
  Buffer configured;                   // handed to CUPTI as the sampling data buffer
  Buffer read;                         // for cuptiPCSamplingGetData
};

struct Key {
  uint64_t crc, pc;
  std::string function;
  uint32_t node;
  bool operator<(const Key& o) const {
    if (crc != o.crc) return crc < o.crc;
    if (pc != o.pc) return pc < o.pc;
    if (node != o.node) return node < o.node;
    return function < o.function;
  }
};

struct State {
  std::mutex mu;
  std::map<CUcontext, std::unique_ptr<ContextState>> contexts;
  std::vector<std::string> reason_names;             // by slot (first context's list)
  std::map<std::string, uint32_t> slot_of;           // full CUPTI name -> slot
  std::map<Key, std::vector<uint64_t>> counts;       // per slot, + total at the end
  std::unordered_map<uint64_t, std::string> cubins;
  uint64_t total = 0, dropped = 0, non_user = 0, ignored = 0, ranges = 0;
  std::atomic<uint64_t> crc_failures{0};
  std::vector<std::string> log;
  std::map<std::string, int> log_count;  // repeated messages are logged a few times only
};

State& S() {
  static State* s = new State();  // never destroyed: CUPTI may call back at exit
  return *s;
}

// CUPTI's answers for the profile (bounded: serialized mode reads after every kernel).
void note(const std::string& what, CUptiResult r) {
  std::string line = what + ": " + (r == CUPTI_SUCCESS ? std::string("ok") : gpu::result_name(r));
  if (++S().log_count[line] <= 3 && S().log.size() < 200) S().log.push_back(line);
}

// Set while this thread is inside a PC sampling call, so a callback CUPTI might raise from
// within it (a module load, a launch) does not take S().mu again.
thread_local bool t_busy = false;
struct Busy {
  Busy() { t_busy = true; }
  ~Busy() { t_busy = false; }
};
std::mutex g_cubin_mu;  // the cubins, apart from S().mu: module loads never wait on a read

std::string short_reason(const char* name) {
  std::string s = name ? name : "?";
  static const char* prefixes[] = {"smsp__pcsamp_warps_issue_stalled_", "smsp__pcsamp_"};
  for (const char* p : prefixes) {
    if (s.rfind(p, 0) == 0) return s.substr(std::strlen(p));
  }
  return s;
}

std::string demangle(const char* name) {
  if (name == nullptr) return "<unnamed kernel>";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = d != nullptr && status == 0 ? d : name;
  std::free(d);
  return out;
}

// Folds one read buffer into the counts (mu held).
void fold(ContextState& c, Buffer& b, const char* where) {
  CUpti_PCSamplingData& d = b.data;
  State& s = S();
  s.total += d.totalSamples;
  s.dropped += d.droppedSamples;
  s.non_user += d.nonUsrKernelsTotalSamples;
  if (d.totalNumPcs > 0 || d.hardwareBufferFull) {
    note(std::string(where) + ": " + std::to_string(d.totalNumPcs) + " PCs, " +
         std::to_string(d.remainingNumPcs) + " remaining" +
         (d.hardwareBufferFull ? ", hardware buffer full" : ""), CUPTI_SUCCESS);
  }
  size_t n = std::min(d.totalNumPcs, b.capacity);
  for (size_t i = 0; i < n; ++i) {
    const CUpti_PCSamplingPCData& p = d.pPcData[i];
    uint32_t node = gpu::kIgnored;
    uint32_t v = 0;
    if (p.correlationId != 0 && gpu::correlations().get(p.correlationId, &v)) {
      if (v == gpu::kIgnored) {  // launched while paused (outside the schedule's steps)
        ++s.ignored;
        continue;
      }
      node = v & gpu::kNodeMask;
    }
    Key k{p.cubinCrc, p.pcOffset, p.functionName ? p.functionName : "", node};
    auto& row = s.counts[k];
    if (row.empty()) row.assign(s.reason_names.size(), 0);
    for (size_t r = 0; r < p.stallReasonCount && r < c.reasons; ++r) {
      const CUpti_PCSamplingStallReason& sr = p.stallReason[r];
      for (size_t slot = 0; slot < c.reason_index.size(); ++slot) {
        if (c.reason_index[slot] == sr.pcSamplingStallReasonIndex) {
          if (slot < row.size()) row[slot] += sr.samples;
          break;
        }
      }
    }
  }
  d.totalNumPcs = 0;
  d.remainingNumPcs = 0;
}

void read_all(CUcontext ctx, ContextState& c, const char* where) {
  for (int round = 0; round < 64; ++round) {
    c.read.data.totalNumPcs = 0;
    CUpti_PCSamplingGetDataParams p{};
    p.size = CUpti_PCSamplingGetDataParamsSize;
    p.ctx = ctx;
    p.pcSamplingData = &c.read.data;
    CUptiResult r = gpu::cupti().cuptiPCSamplingGetData(&p);
    if (r != CUPTI_SUCCESS) {
      note(std::string("cuptiPCSamplingGetData (") + where + ")", r);
      return;
    }
    bool more = c.read.data.remainingNumPcs > 0;
    bool any = c.read.data.totalNumPcs > 0;
    fold(c, c.read, where);
    if (!more || !any) return;
  }
}

// Starts or stops a ranged context's sampling; a range's samples are read at its end (CUPTI
// asks for a flush after every cuptiPCSamplingStop).
void set_range(CUcontext ctx, ContextState& c, bool on) {
  gpu::CuptiApi& a = gpu::cupti();
  CUptiResult r;
  if (on) {
    CUpti_PCSamplingStartParams p{};
    p.size = CUpti_PCSamplingStartParamsSize;
    p.ctx = ctx;
    r = a.cuptiPCSamplingStart(&p);
    note("cuptiPCSamplingStart", r);
  } else {
    CUpti_PCSamplingStopParams p{};
    p.size = CUpti_PCSamplingStopParamsSize;
    p.ctx = ctx;
    r = a.cuptiPCSamplingStop(&p);
    note("cuptiPCSamplingStop", r);
  }
  if (r != CUPTI_SUCCESS) return;
  c.sampling = on;
  if (on) ++S().ranges;
  else read_all(ctx, c, "at range end");
}

bool have_api() {
  gpu::CuptiApi& a = gpu::cupti();
  return a.cuptiPCSamplingEnable && a.cuptiPCSamplingDisable && a.cuptiPCSamplingGetData &&
         a.cuptiPCSamplingGetNumStallReasons && a.cuptiPCSamplingGetStallReasons &&
         a.cuptiPCSamplingSetConfigurationAttribute;
}

void enable_on(CUcontext ctx, ContextState& c) {
  gpu::CuptiApi& a = gpu::cupti();
  State& s = S();
  CUpti_PCSamplingEnableParams ep{};
  ep.size = CUpti_PCSamplingEnableParamsSize;
  ep.ctx = ctx;
  CUptiResult r = a.cuptiPCSamplingEnable(&ep);
  note("cuptiPCSamplingEnable", r);
  if (r != CUPTI_SUCCESS) return;

  CUpti_PCSamplingGetNumStallReasonsParams np{};
  np.size = CUpti_PCSamplingGetNumStallReasonsParamsSize;
  np.ctx = ctx;
  np.numStallReasons = &c.reasons;
  r = a.cuptiPCSamplingGetNumStallReasons(&np);
  note("cuptiPCSamplingGetNumStallReasons (" + std::to_string(c.reasons) + ")", r);
  if (r != CUPTI_SUCCESS || c.reasons == 0) return;
  std::vector<std::vector<char>> names(c.reasons, std::vector<char>(CUPTI_STALL_REASON_STRING_SIZE));
  std::vector<char*> name_ptrs(c.reasons);
  for (size_t i = 0; i < c.reasons; ++i) name_ptrs[i] = names[i].data();
  std::vector<uint32_t> index(c.reasons);
  CUpti_PCSamplingGetStallReasonsParams sp{};
  sp.size = CUpti_PCSamplingGetStallReasonsParamsSize;
  sp.ctx = ctx;
  sp.numStallReasons = c.reasons;
  sp.stallReasonIndex = index.data();
  sp.stallReasons = name_ptrs.data();
  r = a.cuptiPCSamplingGetStallReasons(&sp);
  note("cuptiPCSamplingGetStallReasons", r);
  if (r != CUPTI_SUCCESS) return;
  // Slots are shared by all contexts: a reason's slot comes from its name.
  c.reason_index.assign(s.reason_names.size(), 0xFFFFFFFFu);
  for (size_t i = 0; i < c.reasons; ++i) {
    std::string full = names[i].data();
    auto it = s.slot_of.find(full);
    uint32_t slot;
    if (it == s.slot_of.end()) {
      slot = uint32_t(s.reason_names.size());
      s.slot_of[full] = slot;
      s.reason_names.push_back(full);
      for (auto& kv : s.counts) kv.second.resize(s.reason_names.size(), 0);
      c.reason_index.push_back(0xFFFFFFFFu);
    } else {
      slot = it->second;
    }
    c.reason_index[slot] = index[i];
  }

  c.configured.init(c.reasons, kPcsConfigured);
  c.read.init(c.reasons, kPcsPerRead);
  CUpti_PCSamplingConfigurationInfo info[5] = {};
  info[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON;
  info[0].attributeData.stallReasonData.stallReasonCount = c.reasons;
  info[0].attributeData.stallReasonData.pStallReasonIndex = index.data();
  info[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER;
  info[1].attributeData.samplingDataBufferData.samplingDataBuffer = &c.configured.data;
  info[2].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
  info[2].attributeData.collectionModeData.collectionMode =
      g_mode == "serialized" ? CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED
                             : CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
  // Continuous records carry no correlation id, so a schedule's paused steps cannot be told
  // apart afterwards: sample only while capture is on, through start/stop ranges.
  const bool ranged = g_mode != "serialized" && a.cuptiPCSamplingStart && a.cuptiPCSamplingStop;
  info[3].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL;
  info[3].attributeData.enableStartStopControlData.enableStartStopControl = ranged ? 1 : 0;
  size_t n = 4;
  if (g_period > 0) {
    info[4].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
    info[4].attributeData.samplingPeriodData.samplingPeriod = uint32_t(g_period);
    n = 5;
  }
  CUpti_PCSamplingConfigurationInfoParams cp{};
  cp.size = CUpti_PCSamplingConfigurationInfoParamsSize;
  cp.ctx = ctx;
  cp.numAttributes = n;
  cp.pPCSamplingConfigurationInfo = info;
  r = a.cuptiPCSamplingSetConfigurationAttribute(&cp);
  note("cuptiPCSamplingSetConfigurationAttribute (mode " + g_mode + ", period 2^" +
       std::to_string(g_period) + ")", r);
  for (size_t i = 0; i < n; ++i) {
    if (info[i].attributeStatus != CUPTI_SUCCESS)
      note("  attribute " + std::to_string(int(info[i].attributeType)), info[i].attributeStatus);
  }
  if (r != CUPTI_SUCCESS) {
    CUpti_PCSamplingDisableParams dp{};
    dp.size = CUpti_PCSamplingDisableParamsSize;
    dp.ctx = ctx;
    a.cuptiPCSamplingDisable(&dp);
    return;
  }
  c.enabled = true;
  c.ranged = ranged;
  if (ranged && dc::is_enabled()) set_range(ctx, c, true);  // else at the first launch after resume
}

}  // namespace

CUptiResult enable_callbacks(CUpti_SubscriberHandle sub) {
  if (!active()) return CUPTI_SUCCESS;
  CUptiResult r = gpu::cupti().cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE,
                                                   CUPTI_CBID_RESOURCE_MODULE_LOADED);
  std::lock_guard<std::mutex> g(S().mu);
  note("cuptiEnableCallback (module loaded)", r);
  if (!have_api()) note("PC sampling entry points missing in " + gpu::cupti().path, CUPTI_SUCCESS);
  return r;
}

void on_module_loaded(const CUpti_ResourceData* rd) {
  if (!active() || rd == nullptr) return;
  const auto* m = static_cast<const CUpti_ModuleResourceData*>(rd->resourceDescriptor);
  if (m == nullptr || m->pCubin == nullptr || m->cubinSize == 0) return;
  uint64_t crc = 0;
  CUptiResult r = CUPTI_ERROR_NOT_SUPPORTED;
  if (gpu::cupti().cuptiGetCubinCrc != nullptr) {
    CUpti_GetCubinCrcParams p{};
    p.size = CUpti_GetCubinCrcParamsSize;
    p.cubinSize = m->cubinSize;
    p.cubin = m->pCubin;
    r = gpu::cupti().cuptiGetCubinCrc(&p);
    crc = p.cubinCrc;
  }
  std::lock_guard<std::mutex> g(g_cubin_mu);
  if (r != CUPTI_SUCCESS) ++S().crc_failures;
  if (r == CUPTI_SUCCESS && !S().cubins.count(crc))
    S().cubins.emplace(crc, std::string(m->pCubin, m->cubinSize));
}

void on_launch(bool enter, CUcontext ctx) {
  if (!active() || ctx == nullptr || t_busy || !have_api()) return;
  Busy busy;
  std::lock_guard<std::mutex> g(S().mu);
  auto it = S().contexts.find(ctx);
  if (it == S().contexts.end()) {
    if (!enter) return;
    it = S().contexts.emplace(ctx, std::unique_ptr<ContextState>(new ContextState())).first;
    enable_on(ctx, *it->second);
  }
  ContextState* slot = it->second.get();
  // Ranged: the first launch after capture paused or resumed (a schedule's step boundary)
  // stops or starts sampling; kernels already queued run on in the range they were in.
  if (enter && slot->ranged && slot->sampling != dc::is_enabled())
    set_range(ctx, *slot, !slot->sampling);
  // Serialized: the kernel has ended when its launch returns; read its samples now, while
  // their correlation id still maps to the launch's context.
  if (!enter && slot->enabled && g_mode == "serialized") read_all(ctx, *slot, "after kernel");
}

void stop() {
  if (!active() || !have_api()) return;
  Busy busy;
  std::lock_guard<std::mutex> g(S().mu);
  for (auto& kv : S().contexts) {
    ContextState& c = *kv.second;
    if (!c.enabled) continue;
    if (c.sampling) set_range(kv.first, c, false);
    read_all(kv.first, c, "at stop");
    CUpti_PCSamplingDisableParams dp{};
    dp.size = CUpti_PCSamplingDisableParamsSize;
    dp.ctx = kv.first;
    CUptiResult r = gpu::cupti().cuptiPCSamplingDisable(&dp);
    note("cuptiPCSamplingDisable", r);
    fold(c, c.configured, "configured buffer after disable");
    c.enabled = false;
  }
  S().contexts.clear();
}

Collected take() {
  State& s = S();
  std::lock_guard<std::mutex> g(s.mu);
  Collected c;
  c.mode = g_mode;
  c.period_log2 = g_period;
  for (const auto& n : s.reason_names) c.reasons.push_back(short_reason(n.c_str()));
  for (auto& kv : s.counts) {
    Record r;
    r.cubin_crc = kv.first.crc;
    r.pc_offset = kv.first.pc;
    r.mangled = kv.first.function;
    r.function = demangle(kv.first.function.c_str());
    r.context_node = kv.first.node;
    for (size_t slot = 0; slot < kv.second.size(); ++slot) {
      if (kv.second[slot] == 0) continue;
      r.stalls.emplace_back(uint32_t(slot), kv.second[slot]);
    }
    c.records.push_back(std::move(r));
  }
  {
    std::lock_guard<std::mutex> gc(g_cubin_mu);
    c.cubins = s.cubins;
  }
  if (uint64_t f = s.crc_failures.exchange(0))
    c.log.push_back("cuptiGetCubinCrc failed for " + std::to_string(f) + " modules");
  c.total_samples = s.total;
  c.dropped_samples = s.dropped;
  c.non_user_samples = s.non_user;
  c.ignored_records = s.ignored;
  c.ranges = s.ranges;
  c.log.insert(c.log.begin(), s.log.begin(), s.log.end());
  s.counts.clear();
  s.total = s.dropped = s.non_user = s.ignored = s.ranges = 0;
  s.log.clear();
  s.log_count.clear();
  return c;
}

}  // namespace pc
}  // namespace dc
#endif
