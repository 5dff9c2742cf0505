// Lazy symbolization, once per unique address: the object from dl_iterate_phdr, the function
// from the object's ELF symbols (demangled), file:line from DWARF through libdw when
// libdw.so.1 can be dlopen'ed. No libdw headers are needed: the handful of libdwfl entry points
// are declared here with elfutils' stable ABI (ELFUTILS_0.122 symbol versions).
#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "native_modules.h"
#include "native_stack.h"

namespace dc::native {
namespace {

// ---- loaded objects ------------------------------------------------------------------------

// Every cache here is process-lifetime and never destroyed: exit() runs static destructors
// while other threads (CUPTI's, the program's) may still symbolize, and a destroyed map there
// is a double free.
std::mutex& g_mod_mu = *new std::mutex();
std::vector<ModuleInfo>& g_modules = *new std::vector<ModuleInfo>();
unsigned long long g_mod_generation = ~0ULL;  // dlpi_adds + dlpi_subs when g_modules was built
// By path; nullptr: unreadable.
auto& g_elf = *new std::map<std::string, std::unique_ptr<ElfSymbols>>();

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

int collect(struct dl_phdr_info* info, size_t, void* arg) {
  auto* out = static_cast<std::vector<ModuleInfo>*>(arg);
  ModuleInfo m;
  m.bias = info->dlpi_addr;
  bool any = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
    if (!any || lo < m.lo) m.lo = lo;
    if (!any || hi > m.hi) m.hi = hi;
    any = true;
  }
  if (!any) return 0;
  const char* name = info->dlpi_name;
  m.path = (name == nullptr || name[0] == '\0') ? (out->empty() ? self_exe() : std::string())
                                                : std::string(name);
  out->push_back(std::move(m));
  return 0;
}

int read_generation(struct dl_phdr_info* info, size_t size, void* arg) {
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
    *static_cast<unsigned long long*>(arg) = info->dlpi_adds + info->dlpi_subs;
  return 1;  // the counters are the same in every entry: stop after the first
}

unsigned long long generation() {
  unsigned long long g = 0;
  dl_iterate_phdr(read_generation, &g);
  return g;
}

void rebuild_locked() {
  std::vector<ModuleInfo> mods;
  g_mod_generation = generation();
  dl_iterate_phdr(collect, &mods);
  g_modules.swap(mods);
}

const ModuleInfo* lookup_locked(uintptr_t addr) {
  for (const auto& m : g_modules)
    if (addr >= m.lo && addr < m.hi) return &m;
  return nullptr;
}

// ---- source lines through libdw ------------------------------------------------------------

struct DwflCallbacks {  // Dwfl_Callbacks
  void* find_elf;
  void* find_debuginfo;
  void* section_address;
  char** debuginfo_path;
};

struct Libdw {
  void* (*begin)(const DwflCallbacks*) = nullptr;
  int (*report_begin_add)(void*) = nullptr;
  void* (*report_elf)(void*, const char*, const char*, int, uint64_t, bool) = nullptr;
  int (*report_end)(void*, void*, void*) = nullptr;
  void* (*getsrc)(void*, uint64_t) = nullptr;
  const char* (*addrname)(void*, uint64_t) = nullptr;
  const char* (*lineinfo)(void*, uint64_t*, int*, int*, uint64_t*, uint64_t*) = nullptr;
  DwflCallbacks callbacks{};
  char* debuginfo_path = nullptr;
  void* dwfl = nullptr;
  // Dwfl_Module per (path, load bias), reported from our own module map: libdw's
  // dwfl_linux_proc_report guessed a wrong start for small objects next to a gap (0.188).
  std::map<std::pair<std::string, uintptr_t>, void*> modules;
  bool tried = false;
};

Libdw& g_dw = *new Libdw();  // guarded by g_sym_mu

template <typename F>
bool bind(void* h, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(h, name));
  return *out != nullptr;
}

bool load_libdw() {
  if (g_dw.tried) return g_dw.dwfl != nullptr;
  g_dw.tried = true;
  const char* off = std::getenv("DEEPCONTEXT_NATIVE_LINES");
  if (off != nullptr && std::strcmp(off, "0") == 0) return false;
  void* h = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return false;
  Libdw& d = g_dw;
  bool ok = bind(h, "dwfl_begin", &d.begin) &&
            bind(h, "dwfl_report_begin_add", &d.report_begin_add) &&
            bind(h, "dwfl_report_elf", &d.report_elf) &&
            bind(h, "dwfl_report_end", &d.report_end) &&
            bind(h, "dwfl_module_getsrc", &d.getsrc) && bind(h, "dwfl_lineinfo", &d.lineinfo) &&
            bind(h, "dwfl_module_addrname", &d.addrname);
  d.callbacks.find_elf = dlsym(h, "dwfl_build_id_find_elf");
  d.callbacks.find_debuginfo = dlsym(h, "dwfl_standard_find_debuginfo");
  d.callbacks.section_address = dlsym(h, "dwfl_offline_section_address");
  d.callbacks.debuginfo_path = &d.debuginfo_path;
  if (!ok || d.callbacks.find_elf == nullptr || d.callbacks.find_debuginfo == nullptr) return false;
  d.dwfl = d.begin(&d.callbacks);
  return d.dwfl != nullptr;
}

void* dw_module(const ModuleInfo& m) {
  auto key = std::make_pair(m.path, m.bias);
  auto it = g_dw.modules.find(key);
  if (it != g_dw.modules.end()) return it->second;
  void* mod = nullptr;
  if (!m.path.empty() && m.path[0] == '/') {
    g_dw.report_begin_add(g_dw.dwfl);
    mod = g_dw.report_elf(g_dw.dwfl, m.path.c_str(), m.path.c_str(), -1, m.bias, false);
    g_dw.report_end(g_dw.dwfl, nullptr, nullptr);
  }
  g_dw.modules.emplace(key, mod);
  return mod;
}

// File and line of `addr`; also a name when the object's own symbols had none (libdw also reads
// separate debug files, e.g. /usr/lib/debug/.build-id/..).
void source_line(const ModuleInfo& m, uintptr_t addr, std::string* file, int* line,
                 std::string* name) {
  if (!load_libdw()) return;
  void* mod = dw_module(m);
  if (mod == nullptr) return;
  if (name != nullptr) {
    const char* n = g_dw.addrname(mod, addr);
    if (n != nullptr && n[0] != '\0') *name = n;
  }
  void* l = g_dw.getsrc(mod, addr);
  if (l == nullptr) return;
  uint64_t a = 0;
  int ln = 0;
  const char* f = g_dw.lineinfo(l, &a, &ln, nullptr, nullptr, nullptr);
  if (f != nullptr && ln > 0) {
    *file = f;
    *line = ln;
  }
}

// ---- names ---------------------------------------------------------------------------------

std::string demangle(const char* raw) {
  int status = 0;
  char* d = abi::__cxa_demangle(raw, nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) return raw;
  std::string out(d);
  std::free(d);
  return out;
}

std::string base_name(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::mutex& g_sym_mu = *new std::mutex();
auto& g_symbols = *new std::unordered_map<uintptr_t, Symbol>();  // by lookup address

Symbol resolve(uintptr_t lookup, uintptr_t raw) {
  Symbol s;
  ModuleInfo m;
  char hex[32];
  if (!find_module(lookup, &m)) {
    std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(raw));
    s.name = hex;
    return s;
  }
  s.library = m.path;
  s.offset = raw - m.bias;
  if (const ElfSymbols* syms = module_symbols(m.path)) {
    if (const ElfSymbols::Sym* sym = syms->find(lookup - m.bias)) {
      s.name = demangle(sym->name);
      s.resolved = true;
    }
  }
  std::string dw_name;
  source_line(m, lookup, &s.file, &s.line, s.resolved ? nullptr : &dw_name);
  if (!s.resolved && !dw_name.empty()) {
    s.name = demangle(dw_name.c_str());
    s.resolved = true;
  }
  if (!s.resolved) {
    std::snprintf(hex, sizeof(hex), "+0x%llx", static_cast<unsigned long long>(s.offset));
    s.name = (m.path.empty() ? std::string("?") : base_name(m.path)) + hex;
  }
  return s;
}

}  // namespace

bool find_module(uintptr_t addr, ModuleInfo* out) {
  std::lock_guard<std::mutex> g(g_mod_mu);
  if (g_mod_generation == ~0ULL) rebuild_locked();
  const ModuleInfo* m = lookup_locked(addr);
  if (m == nullptr && g_mod_generation != generation()) {
    rebuild_locked();
    m = lookup_locked(addr);
  }
  if (m == nullptr) return false;
  *out = *m;
  return true;
}

const ElfSymbols* module_symbols(const std::string& path) {
  if (path.empty()) return nullptr;
  std::lock_guard<std::mutex> g(g_mod_mu);
  auto it = g_elf.find(path);
  if (it == g_elf.end()) it = g_elf.emplace(path, ElfSymbols::load(path)).first;
  return it->second.get();
}

void flush_caches_of_modules() {
  {
    std::lock_guard<std::mutex> g(g_mod_mu);
    g_mod_generation = ~0ULL;
    g_modules.clear();
  }
  std::lock_guard<std::mutex> g(g_sym_mu);
  g_symbols.clear();
}

Symbol symbolize(uintptr_t ip, bool return_address) {
  uintptr_t lookup = return_address && ip > 0 ? ip - 1 : ip;
  std::lock_guard<std::mutex> g(g_sym_mu);
  auto it = g_symbols.find(lookup);
  if (it != g_symbols.end()) return it->second;
  Symbol s = resolve(lookup, ip);
  g_symbols.emplace(lookup, s);
  return s;
}

const char* line_reader_name() {
  std::lock_guard<std::mutex> g(g_sym_mu);
  return load_libdw() ? "libdw" : "";
}

bool op_call_frame(const Symbol& sym, std::string* op_name) {
  static const char kPrefix[] = "at::_ops::";
  static const char kCall[] = "::call(";
  const std::string& n = sym.name;
  if (n.compare(0, sizeof(kPrefix) - 1, kPrefix) != 0) return false;
  size_t start = sizeof(kPrefix) - 1, end = start;
  while (end < n.size() && (std::isalnum(static_cast<unsigned char>(n[end])) || n[end] == '_'))
    ++end;
  if (end == start || n.compare(end, sizeof(kCall) - 1, kCall) != 0) return false;
  if (op_name != nullptr) *op_name = n.substr(start, end - start);
  return true;
}

bool op_name_matches(const std::string& op_struct, const std::string& recorded) {
  size_t colons = recorded.rfind("::");
  std::string base = colons == std::string::npos ? recorded : recorded.substr(colons + 2);
  size_t dot = base.find('.');
  if (dot != std::string::npos) base[dot] = '_';  // "add.Tensor" names the struct add_Tensor
  if (op_struct == base) return true;
  if (dot != std::string::npos) return false;
  // "<op>_<Overload>": overload names never start with "_", which keeps aten::add off add__Tensor.
  return op_struct.size() > base.size() + 1 && op_struct.compare(0, base.size(), base) == 0 &&
         op_struct[base.size()] == '_' && op_struct[base.size() + 1] != '_';
}

}  // namespace dc::native
