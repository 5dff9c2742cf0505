// Reading the calling thread's Python frames without the GIL (see python_walk.c).
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dc_raw_frame {
  const void* frame;  // interpreter frame address: identity while the frame is live
  void* code;         // PyCodeObject*
  int32_t offset;     // bytecode offset in bytes, for PyCode_Addr2Line
  int32_t firstlineno;     // fingerprint: checked before a late resolution trusts `code`
  const void* filename;    // fingerprint: the code's co_filename object
  const void* name;        // fingerprint: the code's co_name object (generated code shares files)
  // 1 when this is the first Python frame run by its own C-level call of the eval loop (one
  // `_PyEval_EvalFrameDefault` native frame per run of frames ending at an entry frame): 3.10
  // every frame; 3.11 `is_entry`; 3.12-3.13 the frame after a shim (FRAME_OWNED_BY_CSTACK).
  // The native splice (native_stack.h) uses it; the Python-only paths ignore it.
  int32_t entry;
} dc_raw_frame;

// Fills `out` innermost first; returns the count (at most `max`). Safe without the GIL for the
// calling thread, including from a signal handler: it only reads.
int dc_walk_python(void* tstate, dc_raw_frame* out, int max);
// The innermost frame dc_walk_python would give (its `frame`), or NULL: a few loads where the
// caller only asks whether Python ran since it last looked (an allocation inside an operator).
const void* dc_python_frame(void* tstate);
// 0 when `frame` is not on the calling thread's chain of interpreter frames (by address: the
// chain's own pointers are followed, `frame` is never read), so no walk would give it; 1 when
// it is there or the chain is longer than `max_links`. About 3 instructions a frame, against
// ~12 for a walk that describes each.
int dc_python_frame_on_chain(void* tstate, const void* frame, int max_links);

// The calling thread's interpreter frames as the last dc_walk_python_since saw them, outermost
// first, by identity: addresses are compared with the live chain, never followed. The caller keeps
// its own result per frame beside them (`node`, `py_frame`).
#define DC_CHAIN_MAX 320   // frames, shims included; a deeper chain is walked in full each time
#define DC_CHAIN_SLOTS 128
typedef struct dc_chain_link {
  const void* frame;
  const void* instr;  // its instruction pointer: where it is, while it is live
} dc_chain_link;
typedef struct dc_chain {
  int n;
  uint32_t deaths;                  // dc_code_epoch() when it was recorded
  // (a frame beside its instruction pointer: the check of an unchanged caller reads one line)
  dc_chain_link link[DC_CHAIN_MAX];
  // The code object each frame runs, or NULL for one with no node of its own (a shim, a frame
  // being set up): what dc_walk_python would describe, not yet described.
  const void* code[DC_CHAIN_MAX];
  int16_t described[DC_CHAIN_MAX];  // frames with code at and outside this one
  uint16_t slot[DC_CHAIN_SLOTS];    // frame address -> index + 1 (0: none; may be stale)
  // The caller's, for every frame: the context node and the innermost described frame at and
  // outside it.
  uint32_t node[DC_CHAIN_MAX];
  const void* py_frame[DC_CHAIN_MAX];
} dc_chain;

// Records the calling thread's chain of interpreter frames in `chain`, reading only the frames
// newer than the outermost run of the last chain that is still live and unchanged (the frame
// whose instruction pointer moved, and those it called): sets *kept to the chain's index of the
// innermost frame kept (-1: none) and returns how many of the frames after it have code (would
// be described: dc_describe_frame). About 8 instructions a kept frame and ~50 a new one (its
// slot looked up, its code object read and recorded); nothing is described. Returns -1 (and
// empties the chain) where it cannot serve: CPython 3.10, a chain deeper than DC_CHAIN_MAX,
// `max` frames with code or more in all, or no dc_watch_code_deaths (the caller walks the whole
// path then).
int dc_walk_python_since(void* tstate, dc_chain* chain, int max, int* kept);

// dc_walk_python's description of one live frame of the calling thread (a chain's, while it is
// live): 1 when described into *out, 0 when it has no code (chain->code NULL), -1 when it ends a
// walk.
int dc_describe_frame(const void* frame, dc_raw_frame* out);

// A freed code object's address can be taken by a new one, whose frame then has the old frame's
// address and instruction pointer: dc_walk_python_since trusts a recorded chain only while no
// code object has been freed since, which this counts (a code watcher on 3.12+; on 3.11, the code
// type's dealloc, wrapped). With the GIL; `on` 0 restores what was there. Returns 0 when it
// cannot watch (dc_walk_python_since then declines).
int dc_watch_code_deaths(int on);
// Equal at two times only if no code object was freed between them, so that what was learned
// from a code object's address then still holds (unwatched: never equal twice).
uint32_t dc_code_epoch(void);

// Copies the file, qualified name and line of a code object that is alive (its frame is on the
// calling thread's stack) into the buffers, NUL-terminated and truncated. Pure reads: no GIL,
// no allocation, safe in a signal handler. Returns the line.
int dc_describe_code(void* code, int32_t offset, char* file, int file_cap, char* name,
                     int name_cap);

// What a code object's address was seen to hold, in a thread's memo (its signal handler's, or
// its operator path's, each with one writer): the code object was live at dc_code_epoch()
// `epoch`, with that fingerprint.
typedef struct dc_code_memo {
  const void* code;
  uint32_t epoch;
  uint64_t fingerprint;
} dc_code_memo;
// Direct-mapped. A sample walks every frame of the stack, so the memo must hold all of a deep
// stack's code objects at once: with 256 slots GPT-2 generate's ~90 frames collided in every
// sample (5-10 probes a sample), with 1,024 about one (cpu-2026-12-03-models-f35933d.md).
#define DC_CODE_MEMO_SLOTS 1024
static inline unsigned dc_code_memo_slot(const void* code) {
  return (unsigned)(((uintptr_t)code >> 4) * 0x9E3779B97F4A7C15ull >> 54);
}

// The CPU sampler's walk, for its signal handler, where the interrupted thread may be linking a
// frame: a frame or code object is probed (process_vm_readv) before it is read, so a stale
// pointer ends the walk instead of faulting, unless it is known readable without the system
// call: a frame in the thread's data stack (3.11+: every frame no generator owns), a code object
// that `memo` (DC_CODE_MEMO_SLOTS entries) saw live with no code object freed since (its frame
// holds it, so the address is still that object). Each frame's dc_code_fingerprint goes into
// `fingerprints`. The probes, ~0.5-1 us each and eight a frame, made a 50-frame sample cost
// ~300 us; with the memo warm a sample costs the walk.
int dc_walk_python_sampled(void* tstate, dc_raw_frame* out, uint64_t* fingerprints, int max,
                           dc_code_memo* memo);
int dc_describe_code_checked(void* code, int32_t offset, char* file, int file_cap, char* name,
                             int name_cap);

// Longest file name or qualified name kept for a frame (longer ones are cut with no error).
#define DC_MAX_CODE_TEXT 8192

// What tells two code objects at one address apart once the first is freed: the cached hashes of
// its filename and qualified name (the objects' addresses are recycled too). `checked`: read
// through the probe (signal handler). Pure reads.
uint64_t dc_code_fingerprint(void* code, int checked);

// The calling thread's PyThreadState, or NULL (no GIL needed).
void* dc_this_thread_state(void);

#ifdef __cplusplus
}
#endif
