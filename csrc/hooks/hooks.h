// Declared hooks: functions of a device runtime (or any shared library) listed by the user,
// intercepted at their dynamic bindings (GOT slots of every loaded object, dlsym lookups,
// libraries dlopen'ed later) and recorded as `hook` frames under the calling context.
#pragma once
#include <string>
#include <vector>

namespace dc::hooks {

enum class HookKind { Launch, Copy, Sync, Alloc, Free, Call };

struct HookSpec {
  std::string library;  // soname or path of the defining library
  std::string function;
  HookKind kind;
  int bytes_arg;        // argument holding a byte count, -1: none
};

// Checks every spec whose library is loaded now, then patches every loaded object; libraries
// loaded later are patched when dlopen returns. Returns "" or a one-line error, in which case
// nothing was patched. Replaces any previous set.
std::string install(const std::vector<HookSpec>& specs);
// Restores every patched slot; handed-out stubs keep forwarding to their functions.
void uninstall();

struct HookInfo {
  std::string library, function;
  bool loaded;          // its library is loaded (the function is hooked)
  int bindings;         // GOT slots patched for it so far
};
std::vector<HookInfo> installed();

}  // namespace dc::hooks
