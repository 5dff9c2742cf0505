/* Test-only extension: a known chain of native functions dcn_chain_a -> dcn_chain_b ->
 * dcn_chain_c that calls a Python callable, so the splice test knows the exact interleaved path.
 * Each function does work after its call (and the build turns sibling calls off), so every
 * frame stays on the stack; the marker comments give the call lines to the test. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

volatile int dcn_sink;

__attribute__((noinline)) PyObject* dcn_chain_c(PyObject* fn) {
  PyObject* r = PyObject_CallObject(fn, NULL); /* call:c */
  dcn_sink++;
  return r;
}

__attribute__((noinline)) PyObject* dcn_chain_b(PyObject* fn) {
  PyObject* r = dcn_chain_c(fn); /* call:b */
  dcn_sink++;
  return r;
}

__attribute__((noinline)) PyObject* dcn_chain_a(PyObject* self, PyObject* fn) {
  PyObject* r = dcn_chain_b(fn); /* call:a */
  dcn_sink++;
  return r;
}

/* twin(fn, site): calls fn from one of two call sites of one frame, so that the two calls run at
 * the same depth under the same frames, only the return address into dcn_twin differing. The
 * statements after the calls differ, so the compiler cannot merge the two calls into one. */
__attribute__((noinline)) PyObject* dcn_twin(PyObject* self, PyObject* args) {
  PyObject* fn;
  int site;
  if (!PyArg_ParseTuple(args, "Oi", &fn, &site)) return NULL;
  PyObject* r;
  if (site) {
    r = PyObject_CallObject(fn, NULL); /* call:twin1 */
    dcn_sink += 1;
  } else {
    r = PyObject_CallObject(fn, NULL); /* call:twin0 */
    dcn_sink += 2;
  }
  return r;
}

static PyMethodDef methods[] = {
    {"chain", dcn_chain_a, METH_O, "chain(fn): dcn_chain_a -> dcn_chain_b -> dcn_chain_c -> fn()"},
    {"twin", dcn_twin, METH_VARARGS, "twin(fn, site): fn() from call site twin0 or twin1"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dcnative_chain", NULL, -1, methods};

PyMODINIT_FUNC PyInit_dcnative_chain(void) { return PyModule_Create(&module); }
