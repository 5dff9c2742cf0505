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

// Copies the file, qualified name and line of a code object that is alive (its frame is on the
// calling thread's stack) into the buffers, NUL-terminated and truncated. Pure reads: no GIL,
// no allocation, safe in a signal handler. Returns the line.
int dc_describe_code(void* code, int32_t offset, char* file, int file_cap, char* name,
                     int name_cap);

// The same for a signal handler, where the interrupted thread may be linking a frame: every
// frame and code object is probed (process_vm_readv) before it is read, so a stale pointer ends
// the walk instead of faulting. About 1 us per frame.
int dc_walk_python_checked(void* tstate, dc_raw_frame* out, int max);
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
