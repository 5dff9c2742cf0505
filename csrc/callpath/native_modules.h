// Internal to csrc/callpath/native_*: the process's loaded objects (from dl_iterate_phdr) and
// their ELF symbols, shared by the symbolizer and the splice's address ranges.
#pragma once
#include <cstdint>
#include <string>

#include "native_elf.h"

namespace dc::native {

struct ModuleInfo {
  uintptr_t lo = 0, hi = 0;  // span of the object's PT_LOAD segments
  uintptr_t bias = 0;        // load bias: link-time address = runtime address - bias
  std::string path;          // file path ("/proc/self/exe" resolved for the main program)
};

// The loaded object mapping `addr`; refreshes the map once when the address is not found and
// libraries were loaded or unloaded since. Thread-safe.
bool find_module(uintptr_t addr, ModuleInfo* out);

// The object's function symbols, loaded once per path and kept (nullptr if unreadable).
const ElfSymbols* module_symbols(const std::string& path);

}  // namespace dc::native
