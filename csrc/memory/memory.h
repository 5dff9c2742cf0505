// The memory layer: allocations and frees reported by the framework's allocators, attributed
// online to the calling context of the allocation. No per-event log: a table of live
// allocations keyed by address (live_table.h) and per-context live / peak accounting.
#pragma once
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace dc::memory {

constexpr int kMaxDevices = 16;

// Lifecycle (GIL held). start() forgets the previous session's live table and accounting.
void start();
void stop();
// Allocators ask this before reporting: on for the whole session, pauses included, so that
// frees of tracked allocations are always seen.
bool active();
// Zeroes the additive metrics and restarts peak tracking from the bytes live now (end of a
// warm-up phase); the live table is kept.
void reset_metrics();
void checkpoint_metrics();  // a schedule's warm-up begins
void rollback_metrics();    // it ends: its allocation counts are discarded

// The slot of a device by name ("cpu", "cuda0"), registered on first use; -1 when the table of
// devices is full. `allocator_totals`: the allocator reports its own live total with each
// event (the CUDA caching allocator does), so the peak counts memory allocated before capture.
int device_slot(const char* name, bool allocator_totals);
// bytes > 0: `ptr` was allocated on device `slot`; bytes < 0: it was freed. total_allocated:
// the allocator's live bytes on that device after the event (used when the device has totals).
void event(const void* ptr, int64_t bytes, int slot, uint64_t total_allocated);

// What the caching allocator itself did, charged to the calling thread's context.
enum AllocatorAction { kSegmentAlloc = 1, kSegmentFree = 2, kRetry = 3, kOom = 4 };
void allocator_event(int action, int slot, uint64_t bytes);

// Appends (node, metric id, value) rows for every context with memory activity. Caller holds
// the tree lock (the snapshot), which this never takes.
void export_metrics(std::vector<std::tuple<uint32_t, uint32_t, double>>& rows);

// The profiler's own memory for the layer, for the bounded-memory guarantee.
struct Footprint {
  uint64_t live_allocations;  // entries in the live table now
  uint64_t table_bytes;       // the table's storage
  uint64_t high_water;        // most entries the table has held
  uint64_t context_bytes;     // per-context accounting
  uint64_t unmatched_frees;   // frees of allocations the table never saw (made before capture)
};
Footprint footprint();
// "name=slot" for each device seen, for metadata and tests.
std::vector<std::string> device_names();

}  // namespace dc::memory
