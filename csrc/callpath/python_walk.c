/* The interpreter's frame chain, read directly: ~1 ns per frame and no GIL, which the public
 * API (5-30 ns per frame, GIL, frame objects created on 3.11+) cannot match. One code path per
 * CPython layout; compiled as C because the internal headers are not C++-clean. */
#define Py_BUILD_CORE_MODULE 1
#include <Python.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_frame.h>
#else
#include <frameobject.h>
#endif
#include "python_walk.h"

#include <errno.h>
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
  /* Four 8-byte words: the first, and the last three (overlapping the first in a short str). */
  const size_t at[4] = {0, n - 8, n >= 16 ? n - 16 : 0, n >= 24 ? n - 24 : 0};
  for (int k = 0; k < 4; ++k) {
    uint64_t w;
    memcpy(&w, data + at[k], 8);
    f = (f ^ w) * 0x9E3779B97F4A7C15ull;
    f ^= f >> 29;
  }
  return f;
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

void* dc_this_thread_state(void) { return (void*)PyGILState_GetThisThreadState(); }

/* Inlined into each entry point, so that dc_python_frame's copy keeps only what finds the frame
 * (the other fields it fills are dead there). */
static inline __attribute__((always_inline)) int walk(void* tstate_v, dc_raw_frame* out, int max,
                                                      int checked);

int dc_walk_python(void* tstate_v, dc_raw_frame* out, int max) { return walk(tstate_v, out, max, 0); }

const void* dc_python_frame(void* tstate_v) {
  dc_raw_frame f;
  return walk(tstate_v, &f, 1, 0) > 0 ? f.frame : NULL;
}

int dc_walk_python_checked(void* tstate_v, dc_raw_frame* out, int max) {
  return walk(tstate_v, out, max, 1);
}

/* checked: every frame and code object is probed with readable() before it is dereferenced. */
static inline __attribute__((always_inline)) int walk(void* tstate_v, dc_raw_frame* out, int max,
                                                      int checked) {
  PyThreadState* ts = (PyThreadState*)tstate_v;
  int n = 0;
  if (ts == NULL) return 0;
#if PY_VERSION_HEX >= 0x030D0000
  _PyInterpreterFrame* f = ts->current_frame;
#elif PY_VERSION_HEX >= 0x030B0000
  _PyInterpreterFrame* f = ts->cframe ? ts->cframe->current_frame : NULL;
#else
  PyFrameObject* f = ts->frame;
#endif
  while (f != NULL && n < max) {
    if (!plausible(f) || (checked && !readable(f, sizeof(*f)))) break;
#if PY_VERSION_HEX >= 0x030B0000
#if PY_VERSION_HEX >= 0x030C0000
    if (f->owner == FRAME_OWNED_BY_CSTACK) { f = f->previous; continue; }
#endif
#if PY_VERSION_HEX >= 0x030D0000
    PyObject* exe = f->f_executable;
    if (exe != NULL && (!plausible(exe) || (checked && !readable(exe, sizeof(PyCodeObject))))) break;
    if (exe == NULL || Py_TYPE(exe) != &PyCode_Type) { f = f->previous; continue; }
    PyCodeObject* code = (PyCodeObject*)exe;
    if (_PyFrame_IsIncomplete(f)) { f = f->previous; continue; }
    int32_t off = (int32_t)((f->instr_ptr - _PyCode_CODE(code)) * sizeof(_Py_CODEUNIT));
#else
    PyCodeObject* code = f->f_code;
    if (code != NULL && (!plausible(code) || (checked && !readable(code, sizeof(PyCodeObject))) ||
                         Py_TYPE(code) != &PyCode_Type))
      break;
    if (code == NULL || _PyFrame_IsIncomplete(f)) { f = f->previous; continue; }
    int32_t off = (int32_t)((f->prev_instr - _PyCode_CODE(code)) * sizeof(_Py_CODEUNIT));
#endif
    if (off < 0) off = 0;
    out[n].frame = f;
    out[n].code = code;
    out[n].offset = off;
    out[n].firstlineno = code->co_firstlineno;
    out[n].filename = code->co_filename;
    out[n].name = code->co_name;
#if PY_VERSION_HEX >= 0x030C0000
    /* The eval loop pushes a shim frame before the first frame it runs (gh-96421). */
    out[n].entry = f->previous == NULL || f->previous->owner == FRAME_OWNED_BY_CSTACK;
#else
    out[n].entry = f->is_entry ? 1 : 0;
#endif
    ++n;
    f = f->previous;
#else
    PyCodeObject* code = f->f_code;
    if (code != NULL && (!plausible(code) || (checked && !readable(code, sizeof(PyCodeObject))) ||
                         Py_TYPE(code) != &PyCode_Type))
      break;
    if (code != NULL) {
      out[n].frame = f;
      out[n].code = code;
      out[n].offset = f->f_lasti < 0 ? 0 : f->f_lasti * (int32_t)sizeof(_Py_CODEUNIT);
      out[n].firstlineno = code->co_firstlineno;
      out[n].filename = code->co_filename;
      out[n].name = code->co_name;
      out[n].entry = 1; /* <= 3.10: one eval-loop call per frame */
      ++n;
    }
    f = f->f_back;
#endif
  }
  return n;
}
