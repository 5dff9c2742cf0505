/* The C ABI of the DeepContext core, handed to plug-ins (the RecordFunction hook compiled against
 * the installed torch, the CUPTI layer) through a capsule, so that neither links against the
 * other. Bump DC_API_VERSION on any change. */
#ifndef DEEPCONTEXT_C_API_H
#define DEEPCONTEXT_C_API_H
#include <stdint.h>

#define DC_API_VERSION 8
#define DC_API_CAPSULE "deepcontext._core.c_api"

enum dc_frame_kind {
  DC_KIND_ROOT = 0, DC_KIND_PYTHON, DC_KIND_OP, DC_KIND_NATIVE, DC_KIND_KERNEL,
  DC_KIND_MEMCPY, DC_KIND_MEMSET, DC_KIND_SYNC, DC_KIND_MARKER, DC_KIND_THREAD,
  DC_KIND_MODULE, DC_KIND_INSTRUCTION, DC_KIND_COUNT
};

enum dc_op_flags { DC_OP_BACKWARD = 1, DC_OP_SCOPE = 2, DC_OP_AFTER_NODE = 4 };

typedef struct dc_api {
  uint32_t version;
  /* Operator entry/exit on the calling thread. handle identifies the event (exit pops only a
   * matching entry, so callbacks installed mid-op stay balanced). seq_nr < 0 means none;
   * flags: DC_OP_BACKWARD for autograd's BACKWARD_FUNCTION scope, DC_OP_SCOPE for a USER_SCOPE
   * (record_function), whose body runs after its opening frame returns; DC_OP_AFTER_NODE for
   * an operator the autograd engine runs for the node it just ran (its gradients' bookkeeping),
   * where the engine's own wrapper around the node was not recorded; fwd_tid the forward
   * thread. */
  void (*op_enter)(const char* name, uint64_t handle, int64_t seq_nr, uint64_t rf_tid,
                   uint64_t fwd_tid, int flags);
  /* seq_consumed: how many sequence numbers autograd nodes took while the op ran, starting
   * from the op's own (the op created the nodes their backward will name), 0 if none, -1 if
   * unknown. */
  void (*op_exit)(uint64_t handle, int seq_consumed);
  /* Whether capture is on (plug-ins skip work when it is not). */
  int (*enabled)(void);
  /* The calling thread's current context node (Python path + operator stack). */
  uint32_t (*current_node)(void);
  /* The child of `parent` with the given frame; `extra` is "k=v;k=v" or NULL. */
  uint32_t (*child)(uint32_t parent, int kind, const char* name, const char* extra);
  uint32_t (*metric_id)(const char* name);
  void (*add_metric)(uint32_t node, uint32_t metric, double value);
  /* Report a one-line note into the profile metadata (e.g. why GPU capture is off). */
  void (*note)(const char* text);

  /* The memory layer (csrc/memory, docs/memory.md). */
  /* Whether allocators should report now (the whole session, pauses included). */
  int (*mem_active)(void);
  /* The slot of a device by name ("cpu", "cuda0"); allocator_totals: the allocator passes its
   * own live total with each event. -1: no slot left. */
  int (*mem_device)(const char* name, int allocator_totals);
  /* bytes > 0: ptr allocated on device `slot` by the calling thread; bytes < 0: ptr freed.
   * total_allocated: the allocator's live bytes on that device after the event. */
  void (*mem_event)(const void* ptr, int64_t bytes, int slot, uint64_t total_allocated);
  /* What the caching allocator did, charged to the calling thread's context: action is one of
   * DC_MEM_SEGMENT_ALLOC, DC_MEM_SEGMENT_FREE (bytes: the segment), DC_MEM_RETRY (bytes: how
   * many retries), DC_MEM_OOM. */
  void (*mem_allocator_event)(int action, int slot, uint64_t bytes);

  /* An operator the calling thread runs for operator node `issuer` of another thread (a
   * backend's worker running a collective that thread enqueued): nested under `issuer`, closed
   * by op_exit(handle). */
  void (*op_enter_linked)(const char* name, uint64_t handle, uint32_t issuer);

  /* Points every loaded object's binding of the mangled `symbol` at `replacement`, except in
   * the object containing `keep_in`; returns the number of slots that point there. */
  int (*rebind)(const char* symbol, void* replacement, const void* keep_in);
  /* How many of those bindings point at `value` now (nothing is written). */
  int (*bindings)(const char* symbol, const void* value, const void* keep_in);
} dc_api;

enum dc_mem_action {
  DC_MEM_SEGMENT_ALLOC = 1, DC_MEM_SEGMENT_FREE = 2, DC_MEM_RETRY = 3, DC_MEM_OOM = 4
};

#endif
