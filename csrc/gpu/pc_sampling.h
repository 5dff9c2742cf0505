// Instruction-level GPU capture (docs/pc-sampling.md): CUPTI PC sampling per CUDA context, the
// cubins seen at module load (for SASS and line mapping, done later in Python), and raw per-PC
// stall counts read at stop. Everything here is off unless the `pc` context layer configured it.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace dc {
namespace pc {

// Before gpu_start: turn the layer on (period: log2 of the sampling interval in cycles; mode:
// "serialized" joins samples to launches by correlation id, "continuous" does not serialize).
void configure(bool on, int period_log2, const std::string& mode);
// One relaxed load: the launch path asks this before doing anything for the layer.
bool active();

// One sampled PC, summed over the launches it could be told apart by.
struct Record {
  uint64_t cubin_crc = 0;
  std::string function;   // demangled where possible
  std::string mangled;
  uint64_t pc_offset = 0;
  uint32_t context_node = 0xFFFFFFFFu;  // launch context (serialized mode); else unknown
  std::vector<std::pair<uint32_t, uint64_t>> stalls;  // (reason slot, samples)
};

struct Collected {
  std::string mode;
  int period_log2 = 0;
  std::vector<std::string> reasons;   // by reason slot, short names (long_scoreboard)
  std::vector<Record> records;
  std::unordered_map<uint64_t, std::string> cubins;  // crc -> cubin bytes
  uint64_t total_samples = 0, dropped_samples = 0, non_user_samples = 0;
  uint64_t ignored_records = 0;   // launches made while capture was paused (schedule)
  uint64_t ranges = 0;            // continuous mode: sampling ranges started (capture on)
  std::vector<std::string> log;   // what CUPTI answered at each step (diagnostics)
};

// Takes (and clears) what was collected so far; call after gpu_stop.
Collected take();

}  // namespace pc
}  // namespace dc

#ifdef DC_HAVE_CUPTI
#include <cuda.h>
#include <cupti_callbacks.h>

namespace dc {
namespace pc {
// The CUPTI-side hooks, called from gpu.cpp / callbacks.cpp only while active().
CUptiResult enable_callbacks(CUpti_SubscriberHandle sub);  // module-load callbacks
void on_module_loaded(const CUpti_ResourceData* rd);        // copies the cubin, keyed by CRC
void on_launch(bool enter, CUcontext ctx);                   // enables sampling per context;
                                                             // serialized: reads after each kernel
void stop();  // reads what is left, disables sampling on every context (before unsubscribe)
}  // namespace pc
}  // namespace dc
#endif
