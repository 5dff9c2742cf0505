// The PyTorch operator layer: a global RecordFunction callback that feeds the core's per-thread
// operator stack. Compiled at first use against the installed torch (capture/torch_ops.py), so
// the core itself never links libtorch; the two meet through the dc_api capsule.
#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <torch/extension.h>

#include "c_api.h"

namespace {

const dc_api* g_api = nullptr;
bool g_installed = false;
at::CallbackHandle g_handle = 0;

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  if (g_api->enabled()) {
    // name() may point into a temporary (backward names): the core copies it.
    g_api->op_enter(fn.name(), fn.handle(), fn.seqNr(), fn.threadId(), fn.forwardThreadId(),
                    fn.scope() == at::RecordScope::BACKWARD_FUNCTION ? 1 : 0);
  }
  return nullptr;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  // An op only peeks at the next sequence number; the one that creates the autograd node
  // consumes it, and that is the forward line its backward belongs to.
  int64_t seq = fn.seqNr();
  int consumed = seq >= 0 && static_cast<int64_t>(at::sequence_number::peek()) > seq ? 1 : 0;
  g_api->op_exit(fn.handle(), consumed);
}

// Installed once per process and never removed (removing a global callback is only safe when no
// other code runs); between sessions it is disabled, so unprofiled code pays nothing for it.
void install(py::capsule capsule) {
  if (g_installed) {
    at::reenableCallback(g_handle);
    return;
  }
  auto* api = static_cast<const dc_api*>(capsule.get_pointer());
  if (api == nullptr || api->version != DC_API_VERSION)
    throw std::runtime_error("deepcontext core and torch hook disagree on the C API version");
  g_api = api;
  g_handle = at::addGlobalCallback(at::RecordFunctionCallback(on_enter, on_exit)
                            .needsInputs(false)
                            .needsOutputs(false)
                            .needsIds(true)
                            .scopes({at::RecordScope::FUNCTION,
                                     at::RecordScope::BACKWARD_FUNCTION,
                                     at::RecordScope::USER_SCOPE}));
  g_installed = true;
}

}  // namespace

void uninstall() {
  if (g_installed) at::disableCallback(g_handle);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("install", &install, "Install (or re-enable) the global RecordFunction callback.");
  m.def("uninstall", &uninstall, "Disable the callback until the next install().");
  m.attr("api_version") = DC_API_VERSION;
}
