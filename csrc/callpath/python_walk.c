/* The interpreter's frame chain, read directly: ~1 ns per frame and no GIL, which the public
 * API (5-30 ns per frame, GIL, frame objects created on 3.11+) cannot match. One code path per
 * CPython layout; compiled as C because the internal headers are not C++-clean. */
#define Py_BUILD_CORE_MODULE 1
#include <Python.h>
#include <stdio.h>
#include <internal/pycore_runtime.h> /* _PyRuntime: the GIL-state slot's key */
#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_frame.h>
#else
#include <frameobject.h>
#endif
#include "python_walk.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* In a signal handler a pointer may be stale (see plausible() below); process_vm_readv copies
 * from our own address space and fails with EFAULT instead of faulting. One system call per
 * probe (~0.5 us), used only on the sampler's path. */
static int g_probe_usable = 1; /* 0 where seccomp forbids the call (e.g. Docker's default) */

static int readable(const void* p, size_t n) {
  char scratch[512];
  static pid_t self = 0;
  if (!g_probe_usable) return 1; /* fall back to plausible() alone */
  if (self == 0) self = getpid();
  while (n > 0) {
    size_t k = n < sizeof(scratch) ? n : sizeof(scratch);
    struct iovec local = {scratch, k};
    struct iovec remote = {(void*)p, k};
    if (process_vm_readv(self, &local, 1, &remote, 1, 0) != (ssize_t)k) {
      if (errno == EPERM || errno == ENOSYS) {
        g_probe_usable = 0;
        return 1;
      }
      return 0;
    }
    p = (const char*)p + k;
    n -= k;
  }
  return 1;
}

static int readable_str(PyObject* s) {
  if (s == NULL || !readable(s, sizeof(PyASCIIObject))) return 0;
  if (!PyUnicode_Check(s)) return 1; /* utf8_of ignores it */
  return readable(PyUnicode_DATA(s), (size_t)PyUnicode_GET_LENGTH(s) * PyUnicode_KIND(s) + 1);
}

/* UTF-8 of a str object by reading its canonical representation (no cached UTF-8 buffer is
 * created, which would need the GIL). Lone surrogates become U+FFFD. */
static void utf8_of(PyObject* s, char* out, int cap) {
  int n = 0;
  if (cap <= 0) return;
  if (s != NULL && PyUnicode_Check(s)
#if PY_VERSION_HEX < 0x030C0000
      && PyUnicode_IS_READY(s)
#endif
  ) {
    int kind = PyUnicode_KIND(s);
    const void* data = PyUnicode_DATA(s);
    Py_ssize_t len = PyUnicode_GET_LENGTH(s);
    for (Py_ssize_t i = 0; i < len; ++i) {
      Py_UCS4 c = PyUnicode_READ(kind, data, i);
      if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFD;
      char enc[4];
      int k;
      if (c < 0x80) { enc[0] = (char)c; k = 1; }
      else if (c < 0x800) { enc[0] = (char)(0xC0 | (c >> 6)); enc[1] = (char)(0x80 | (c & 0x3F)); k = 2; }
      else if (c < 0x10000) { enc[0] = (char)(0xE0 | (c >> 12)); enc[1] = (char)(0x80 | ((c >> 6) & 0x3F)); enc[2] = (char)(0x80 | (c & 0x3F)); k = 3; }
      else { enc[0] = (char)(0xF0 | (c >> 18)); enc[1] = (char)(0x80 | ((c >> 12) & 0x3F)); enc[2] = (char)(0x80 | ((c >> 6) & 0x3F)); enc[3] = (char)(0x80 | (c & 0x3F)); k = 4; }
      if (n + k >= cap) break;
      for (int j = 0; j < k; ++j) out[n++] = enc[j];
    }
  }
  out[n] = '\0';
}

int dc_describe_code_checked(void* code_v, int32_t offset, char* file, int file_cap, char* name,
                             int name_cap) {
  PyCodeObject* code = (PyCodeObject*)code_v;
  PyObject* table = (PyObject*)code->co_linetable;
#if PY_VERSION_HEX >= 0x030B0000
  PyObject* qual = code->co_qualname;
#else
  PyObject* qual = code->co_name;
#endif
  if (!readable_str(code->co_filename) || !readable_str(qual) || table == NULL ||
      !readable(table, sizeof(PyVarObject)) || !readable(table, sizeof(PyBytesObject) + Py_SIZE(table))) {
    file[0] = '\0';
    snprintf(name, (size_t)name_cap, "<unreadable code object>");
    return 0;
  }
  return dc_describe_code(code_v, offset, file, file_cap, name, name_cap);
}

int dc_describe_code(void* code_v, int32_t offset, char* file, int file_cap, char* name,
                     int name_cap) {
  PyCodeObject* code = (PyCodeObject*)code_v;
  utf8_of(code->co_filename, file, file_cap);
#if PY_VERSION_HEX >= 0x030B0000
  utf8_of(code->co_qualname, name, name_cap);
#else
  utf8_of(code->co_name, name, name_cap);
#endif
  int line = PyCode_Addr2Line(code, offset);
  return line < 0 ? code->co_firstlineno : line;
}

/* A signal can arrive while the eval loop links a frame: 3.11 publishes tstate->cframe before
 * that cframe's current_frame is written, and a frame being pushed can still hold a stale
 * `previous`. A pointer that cannot be a live object (misaligned, in the first 64 KiB, beyond user
 * space) ends the walk instead of being dereferenced. This cannot rule out every stale pointer,
 * but the stale values seen in a SIGPROF crash (0xfff800000003) fail it. */
static int plausible(const void* p) {
  uintptr_t a = (uintptr_t)p;
#if defined(__x86_64__)
  const uintptr_t user_top = (uintptr_t)1 << 47;
#else
  const uintptr_t user_top = (uintptr_t)1 << 48;
#endif
  return (a & 7) == 0 && a >= 65536 && a < user_top;
}

/* A str's identity by content: its cached hash, or when not computed yet (names made at run
 * time are not interned, nor are code objects' filenames) a hash of its length and of its first
 * 8 and last 24 bytes, a word at a time: paths and names differ at their ends, and this runs for
 * every frame an operator event looks up (hashing whole paths was ~250 instructions per GPT-2
 * operator event; these bytes one at a time, ~110).
 * `checked`: probed first. */
static uint64_t str_hash(PyObject* s, int checked) {
  if (s == NULL || !plausible(s)) return 0;
  if (checked && !readable(s, sizeof(PyASCIIObject))) return 0;
  Py_hash_t h = ((PyASCIIObject*)s)->hash;
  if (h != -1) return (uint64_t)h;
  if (!PyUnicode_Check(s) || (checked && !readable_str(s))) return (uint64_t)(uintptr_t)s;
#if PY_VERSION_HEX < 0x030C0000
  if (!PyUnicode_IS_READY(s)) return (uint64_t)(uintptr_t)s;
#endif
  const unsigned char* data = (const unsigned char*)PyUnicode_DATA(s);
  size_t n = (size_t)PyUnicode_GET_LENGTH(s) * (size_t)PyUnicode_KIND(s);
  uint64_t f = 0xcbf29ce484222325ull ^ n;
  if (n < 8) {
    for (size_t i = 0; i < n; ++i) f = (f ^ data[i]) * 0x100000001b3ull;
    return f;
  }
  /* Four 8-byte words: the first, and the last three (overlapping the first in a short str).
   * Written out, not looped over an array of offsets: the loop was ~95 instructions a str. */
  uint64_t w0, w1, w2, w3;
  memcpy(&w0, data, 8);
  memcpy(&w1, data + n - 8, 8);
  memcpy(&w2, data + (n >= 16 ? n - 16 : 0), 8);
  memcpy(&w3, data + (n >= 24 ? n - 24 : 0), 8);
  f = (f ^ w0) * 0x9E3779B97F4A7C15ull;
  f ^= f >> 29;
  f = (f ^ w1) * 0x9E3779B97F4A7C15ull;
  f ^= f >> 29;
  f = (f ^ w2) * 0x9E3779B97F4A7C15ull;
  f ^= f >> 29;
  f = (f ^ w3) * 0x9E3779B97F4A7C15ull;
  return f ^ (f >> 29);
}

uint64_t dc_code_fingerprint(void* code_v, int checked) {
  PyCodeObject* code = (PyCodeObject*)code_v;
  if (code == NULL) return 0;
#if PY_VERSION_HEX >= 0x030B0000
  PyObject* qual = code->co_qualname;
#else
  PyObject* qual = code->co_name;
#endif
  return str_hash(qual, checked) * 0x9E3779B97F4A7C15ull ^ str_hash(code->co_filename, checked);
}

/* The thread's own PyThreadState whether or not it holds the GIL (torch's bindings release it
 * around each operator): the GIL-state slot, read as PyGILState_GetThisThreadState reads it, with
 * pthread_getspecific, called directly. Through the API the read went through two more functions
 * in libpython and their PLT stubs: ~20 instructions and ~6 L1i misses an operator event on GPT-2
 * generate (CPU), all spent before the walk starts. */
void* dc_this_thread_state(void) {
#if PY_VERSION_HEX >= 0x030C0000
  Py_tss_t* key = &_PyRuntime.autoTSSkey;
#else
  Py_tss_t* key = &_PyRuntime.gilstate.autoTSSkey;
#endif
  return key->_is_initialized ? pthread_getspecific(key->_key) : NULL;
}

#if PY_VERSION_HEX >= 0x030B0000
typedef _PyInterpreterFrame dc_frame_t;
#define DC_PREVIOUS(f) ((f)->previous)
#if PY_VERSION_HEX >= 0x030D0000
#define DC_INSTR(f) ((const void*)(f)->instr_ptr)
#else
#define DC_INSTR(f) ((const void*)(f)->prev_instr)
#endif
#else
typedef PyFrameObject dc_frame_t;
#define DC_PREVIOUS(f) ((f)->f_back)
#endif

static dc_frame_t* innermost(void* tstate_v) {
  PyThreadState* ts = (PyThreadState*)tstate_v;
  if (ts == NULL) return NULL;
#if PY_VERSION_HEX >= 0x030D0000
  return ts->current_frame;
#elif PY_VERSION_HEX >= 0x030B0000
  return ts->cframe ? ts->cframe->current_frame : NULL;
#else
  return ts->frame;
#endif
}

/* The signal handler's probes, made cheap where the answer is known without a system call. */
#define DC_MAX_CHUNKS 8
typedef struct sampled_walk {
  void* tstate;
  dc_code_memo* memo;  /* NULL: every code object is probed */
  uint32_t epoch;      /* dc_code_epoch() at the start of the walk */
  int chunks;          /* -1 until the data stack's chunks are read (at the first frame) */
  const char* chunk_lo[DC_MAX_CHUNKS];
  const char* chunk_hi[DC_MAX_CHUNKS];
} sampled_walk;

#if PY_VERSION_HEX >= 0x030B0000
/* Whether [p, p + n) lies in one of the thread's data-stack chunks, where every frame that no
 * generator owns lives. A chunk stays mapped while it is in the thread's list (a popped chunk
 * leaves the list before it is freed), so such a frame can be read without a probe. The current
 * chunk is the thread's own; an older one is probed before its header is read, once a walk:
 * the chunks' bounds are read at its first frame (GPT-2 generate's ~90 frames span several
 * chunks, and a probe of each older chunk's header for each frame was most of a sample's
 * system calls). */
static int in_datastack(sampled_walk* w, const void* p, size_t n) {
  if (w->chunks < 0) {
    const _PyStackChunk* c = ((const PyThreadState*)w->tstate)->datastack_chunk;
    w->chunks = 0;
    for (int i = 0; i < DC_MAX_CHUNKS && c != NULL; ++i) {
      if (!plausible(c) || (i > 0 && !readable(c, sizeof(*c)))) break;
      w->chunk_lo[i] = (const char*)c;
      w->chunk_hi[i] = (const char*)c + c->size;
      w->chunks = i + 1;
      c = c->previous;
    }
  }
  for (int i = 0; i < w->chunks; ++i)
    if ((const char*)p >= w->chunk_lo[i] && (const char*)p + n <= w->chunk_hi[i]) return 1;
  return 0;
}
#endif

/* Whether frame memory can be read: always (checked 0), after a probe (1), or, in the handler's
 * walk (2), inside the thread's data stack or after a probe. */
static inline __attribute__((always_inline)) int frame_readable(const void* f, size_t n,
                                                                int checked, sampled_walk* w) {
  if (checked == 0) return 1;
#if PY_VERSION_HEX >= 0x030B0000
  if (checked == 2 && in_datastack(w, f, n)) return 1;
#else
  (void)w;
#endif
  return readable(f, n);
}

/* Whether a code object can be read: always (checked 0), after a probe (1), or (2) when the
 * thread's memo saw it live with no code object freed since (its frame still holds it, so it is
 * that same object), else after a probe. */
static inline __attribute__((always_inline)) int code_readable(const void* code, int checked,
                                                               sampled_walk* w) {
  if (checked == 0) return 1;
  if (checked == 2 && w->memo != NULL) {
    const dc_code_memo* m = &w->memo[dc_code_memo_slot(code)];
    if (m->code == code && m->epoch == w->epoch) return 1;
  }
  return readable(code, sizeof(PyCodeObject));
}

/* The code object frame `f` runs, into *code: 1; 0 (and NULL) where it runs none of its own (a
 * shim, a frame being set up, one that runs no code object); -1 where a walk ends (a pointer that
 * cannot be live). checked: the code object is probed as describe's frame is. describe()'s tests,
 * and all the chain walk reads of a new frame. */
static inline __attribute__((always_inline)) int frame_code(dc_frame_t* f, PyCodeObject** code,
                                                            int checked, sampled_walk* w) {
  *code = NULL;
#if PY_VERSION_HEX >= 0x030C0000
  if (f->owner == FRAME_OWNED_BY_CSTACK) return 0;
#endif
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* exe = f->f_executable;
  if (exe != NULL && (!plausible(exe) || !code_readable(exe, checked, w))) return -1;
  if (exe == NULL || Py_TYPE(exe) != &PyCode_Type) return 0;
  PyCodeObject* c = (PyCodeObject*)exe;
#else
  PyCodeObject* c = f->f_code;
  if (c != NULL && (!plausible(c) || !code_readable(c, checked, w) || Py_TYPE(c) != &PyCode_Type))
    return -1;
  if (c == NULL) return 0;
#endif
#if PY_VERSION_HEX >= 0x030B0000
  if (_PyFrame_IsIncomplete(f)) return 0;
#endif
  *code = c;
  return 1;
}

/* One frame of the chain: 1 when it is described into *out, 0 when it is passed over (a shim, a
 * frame being set up, one that runs no code object), -1 when it ends the walk (a pointer that
 * cannot be live). checked: the frame and its code object are probed before they are read (1),
 * or as frame_readable and code_readable say (2). */
static inline __attribute__((always_inline)) int describe(dc_frame_t* f, dc_raw_frame* out,
                                                          int checked, sampled_walk* w) {
  if (!plausible(f) || !frame_readable(f, sizeof(*f), checked, w)) return -1;
  PyCodeObject* code;
  const int r = frame_code(f, &code, checked, w);
  if (r <= 0) return r;
#if PY_VERSION_HEX >= 0x030B0000
#if PY_VERSION_HEX >= 0x030D0000
  int32_t off = (int32_t)((f->instr_ptr - _PyCode_CODE(code)) * sizeof(_Py_CODEUNIT));
#else
  int32_t off = (int32_t)((f->prev_instr - _PyCode_CODE(code)) * sizeof(_Py_CODEUNIT));
#endif
  if (off < 0) off = 0;
#if PY_VERSION_HEX >= 0x030C0000
  /* The eval loop pushes a shim frame before the first frame it runs (gh-96421). */
  out->entry = f->previous == NULL || f->previous->owner == FRAME_OWNED_BY_CSTACK;
#else
  out->entry = f->is_entry ? 1 : 0;
#endif
#else
  int32_t off = f->f_lasti < 0 ? 0 : f->f_lasti * (int32_t)sizeof(_Py_CODEUNIT);
  out->entry = 1; /* <= 3.10: one eval-loop call per frame */
#endif
  out->frame = f;
  out->code = code;
  out->offset = off;
  out->firstlineno = code->co_firstlineno;
  out->filename = code->co_filename;
  out->name = code->co_name;
  return 1;
}

/* Inlined into each entry point, so that dc_python_frame's copy keeps only what finds the frame
 * (the other fields it fills are dead there). */
static inline __attribute__((always_inline)) int walk(void* tstate_v, dc_raw_frame* out, int max,
                                                      int checked, sampled_walk* w) {
  int n = 0;
  for (dc_frame_t* f = innermost(tstate_v); f != NULL && n < max; f = DC_PREVIOUS(f)) {
    const int r = describe(f, &out[n], checked, w);
    if (r < 0) break;
    n += r;
  }
  return n;
}

int dc_walk_python(void* tstate_v, dc_raw_frame* out, int max) {
  return walk(tstate_v, out, max, 0, NULL);
}

const void* dc_python_frame(void* tstate_v) {
  dc_raw_frame f;
  return walk(tstate_v, &f, 1, 0, NULL) > 0 ? f.frame : NULL;
}

int dc_python_frame_on_chain(void* tstate_v, const void* frame, int max_links) {
  int links = 0;
  for (dc_frame_t* f = innermost(tstate_v); f != NULL; f = DC_PREVIOUS(f)) {
    if ((const void*)f == frame || ++links > max_links) return 1;
    if (!plausible(f)) return 0; /* (where a walk ends too) */
  }
  return 0;
}

int dc_walk_python_sampled(void* tstate_v, dc_raw_frame* out, uint64_t* fingerprints, int max,
                           dc_code_memo* memo) {
  sampled_walk w = {tstate_v, memo, dc_code_epoch(), -1, {0}, {0}};
  if (w.epoch & 0x80000000u) w.memo = NULL; /* deaths unwatched: nothing learned can be trusted */
  const int n = walk(tstate_v, out, max, 2, &w);
  for (int i = 0; i < n; ++i) {
    dc_code_memo* m = w.memo ? &w.memo[dc_code_memo_slot(out[i].code)] : NULL;
    if (m != NULL && m->code == out[i].code && m->epoch == w.epoch) {
      fingerprints[i] = m->fingerprint;
      continue;
    }
    fingerprints[i] = dc_code_fingerprint(out[i].code, 1);
    if (m != NULL) {
      m->code = out[i].code;
      m->epoch = w.epoch;
      m->fingerprint = fingerprints[i];
    }
  }
  return n;
}

static uint32_t g_code_deaths = 0; /* atomic builtins: bumped with the GIL, read by any thread */
static int g_watching = 0;      /* written with the GIL too */

#if PY_VERSION_HEX >= 0x030C0000
static int g_watcher = -1;
static int count_deaths(PyCodeEvent event, PyCodeObject* code) {
  (void)code;
  if (event == PY_CODE_EVENT_DESTROY) __atomic_add_fetch(&g_code_deaths, 1, __ATOMIC_RELAXED);
  return 0;
}
#else
static destructor g_code_dealloc = NULL;
static void counting_code_dealloc(PyObject* code) {
  __atomic_add_fetch(&g_code_deaths, 1, __ATOMIC_RELAXED);
  g_code_dealloc(code);
}
#endif

int dc_watch_code_deaths(int on) {
  __atomic_add_fetch(&g_code_deaths, 1, __ATOMIC_RELAXED); /* no chain outlives a change */
#if PY_VERSION_HEX >= 0x030C0000
  if (on && g_watcher < 0) g_watcher = PyCode_AddWatcher(count_deaths);
  if (on && g_watcher < 0) PyErr_Clear(); /* all watcher slots taken: decline */
  if (!on && g_watcher >= 0 && PyCode_ClearWatcher(g_watcher) == 0) g_watcher = -1;
  __atomic_store_n(&g_watching, g_watcher >= 0, __ATOMIC_RELAXED);
#else
  if (on && PyCode_Type.tp_dealloc != counting_code_dealloc) {
    g_code_dealloc = PyCode_Type.tp_dealloc;
    PyCode_Type.tp_dealloc = counting_code_dealloc;
  }
  if (!on && PyCode_Type.tp_dealloc == counting_code_dealloc) PyCode_Type.tp_dealloc = g_code_dealloc;
  __atomic_store_n(&g_watching, PyCode_Type.tp_dealloc == counting_code_dealloc, __ATOMIC_RELAXED);
#endif
  return __atomic_load_n(&g_watching, __ATOMIC_RELAXED);
}

uint32_t dc_code_epoch(void) {
  static uint32_t unwatched = 0;
  if (__atomic_load_n(&g_watching, __ATOMIC_RELAXED))
    return __atomic_load_n(&g_code_deaths, __ATOMIC_RELAXED) & 0x7FFFFFFFu;
  return 0x80000000u | __atomic_add_fetch(&unwatched, 1, __ATOMIC_RELAXED);
}

#if PY_VERSION_HEX >= 0x030B0000
static inline unsigned chain_slot(const void* f) {
  return (unsigned)(((uintptr_t)f >> 3) * 0x9E3779B97F4A7C15ull >> 57); /* DC_CHAIN_SLOTS = 128 */
}

/* Whether the live frame `f`, found where the chain's frame `at` was, is that same frame still:
 * every frame outside it has the address and instruction pointer the chain recorded, and the
 * chain ends where it ended. Returns 0 when it is; else how many frames out the first difference
 * is (a frame returned and another pushed at its address: the same code called again from a
 * moved line, or from another caller), so that the frames up to it are known to be new. */
static int differs_outside(const dc_frame_t* f, const dc_chain* ch, int at) {
  /* Each step checks a recorded frame's own fields against the next recorded address, not the
   * live `previous` pointer's target, so no load waits for the one before it: the recorded
   * address is dereferenced only once the frame inside it has named it as its caller (it is
   * live then), and the processor runs ahead of those checks on its own. The pointer chase this
   * replaces needed a pass of prefetches first (GPT-2 generate's ~90 frames: ~0.3 us an event
   * without them). Two frames a turn: every frame of the stack is checked at every top-level
   * event, and one a turn spent 3 of its 10 instructions a frame on the loop itself. */
  const dc_frame_t* g = f;
  int i = at - 1;
  for (; i >= 1; i -= 2) {
    const dc_frame_t* r = (const dc_frame_t*)ch->link[i].frame;
    if (g->previous != r || DC_INSTR(r) != ch->link[i].instr) return at - i;
    const dc_frame_t* q = (const dc_frame_t*)ch->link[i - 1].frame;
    if (r->previous != q || DC_INSTR(q) != ch->link[i - 1].instr) return at - i + 1;
    g = q;
  }
  if (i == 0) {
    const dc_frame_t* r = (const dc_frame_t*)ch->link[0].frame;
    if (g->previous != r || DC_INSTR(r) != ch->link[0].instr) return at;
    g = r;
  }
  return g->previous == NULL ? 0 : DC_CHAIN_MAX; /* more frames outside than recorded: all new */
}
#endif

int dc_walk_python_since(void* tstate_v, dc_chain* ch, int max, int* kept) {
#if PY_VERSION_HEX >= 0x030B0000
  const void* frames[DC_CHAIN_MAX];
  const void* instrs[DC_CHAIN_MAX];
  const void* codes[DC_CHAIN_MAX];
  if (!__atomic_load_n(&g_watching, __ATOMIC_RELAXED)) {
    ch->n = 0;
    return -1;
  }
  const uint32_t deaths = dc_code_epoch();
  int r = 0, m = 0, hit = -1, look = ch->n > 0 && ch->deaths == deaths;
  int quiet = 0; /* frames known to be new, not looked up */
  for (dc_frame_t* f = innermost(tstate_v); f != NULL; f = f->previous) {
    if (!plausible(f)) break;
    const void* ip = DC_INSTR(f);
    if (quiet > 0) {
      --quiet;
    } else if (look) {
      const int at = (int)ch->slot[chain_slot(f)] - 1;
      if (at >= 0 && at < ch->n && ch->link[at].frame == (const void*)f && ch->link[at].instr == ip) {
        const int outside = differs_outside(f, ch, at);
        if (outside == 0) {
          hit = at;
          break;
        }
        quiet = outside; /* this frame, and those out to the difference, are new */
      }
    }
    if (r == DC_CHAIN_MAX) goto unusable;
    PyCodeObject* code;
    const int d = frame_code(f, &code, 0, NULL);
    if (d < 0) break;
    codes[r] = code;
    frames[r] = f;
    instrs[r] = ip;
    m += d;
    ++r;
  }
  const int base = hit + 1;
  const int described_kept = hit >= 0 ? ch->described[hit] : 0;
  if (base + r > DC_CHAIN_MAX || described_kept + m >= max) goto unusable;
  for (int i = base; i < base + r; ++i) {  /* outermost first, for the running count */
    const int k = base + r - 1 - i;
    ch->link[i].frame = frames[k];
    ch->link[i].instr = instrs[k];
    ch->code[i] = codes[k];
    ch->described[i] = (int16_t)((i > 0 ? ch->described[i - 1] : 0) + (codes[k] != NULL));
    ch->slot[chain_slot(frames[k])] = (uint16_t)(i + 1);
  }
  ch->n = base + r;
  ch->deaths = deaths;
  *kept = hit;
  return m;
unusable:
  ch->n = 0;
  return -1;
#else
  (void)tstate_v; (void)max; (void)kept;
  ch->n = 0;
  return -1; /* a frame object per call (3.10): addresses say nothing about the path */
#endif
}

int dc_describe_frame(const void* frame, dc_raw_frame* out) {
  return describe((dc_frame_t*)frame, out, 0, NULL);
}
