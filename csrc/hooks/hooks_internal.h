// Shared by hooks.cpp (installation) and hook_record.cpp (what a hooked call records).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "hooks.h"
#include "trampoline.h"

namespace dc::hooks::detail {

// A stub's binding. Once a stub is bound to (library, function) it stays bound for the life of
// the process: pointers to it handed out by dlsym must keep calling that function.
struct Slot {
  std::atomic<void*> real{nullptr};  // the function; null until its library is loaded
  std::atomic<bool> active{false};   // declared by the running session
  // Set by each session's install while calls of an earlier session may still be running.
  std::atomic<HookKind> kind{HookKind::Call};
  std::atomic<int> bytes_arg{-1};
  std::string library, function;  // written once, when the slot is bound
  std::atomic<int> bindings{0};
};

extern Slot g_slots[kMaxStubs];
extern std::atomic<int> g_n_slots;

// hook_record.cpp: metric ids, fetched at install.
void init_metrics();
// "launch", "copy", ... as in the hooks file.
const char* kind_name(HookKind k);

}  // namespace dc::hooks::detail
