// Installing declared hooks: stubs bound to (library, function), every loaded object's GOT slots
// for those functions pointed at the stubs, and dlopen / dlsym interposed in those same GOTs so
// that libraries loaded later are patched as they load and dlsym hands out the stubs.
#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../callpath/native_stack.h"
#include "../cct/capture.h"
#include "got_patch.h"
#include "hooks_internal.h"

namespace dc::hooks {
namespace {

using namespace detail;

std::mutex g_mu;  // installation state below; never taken on a hooked call's path
bool g_installed = false;
std::unordered_map<std::string, std::vector<int>> g_by_name;  // active slots by function name
std::set<std::pair<uintptr_t, std::string>> g_scanned;  // objects patched already
unsigned long long g_unloads_seen = 0;

// The real entry points, as bound in this library's own GOT (which is never patched).
void* real_dlopen(const char* file, int flags) { return ::dlopen(file, flags); }
void* real_dlsym(void* handle, const char* name) { return ::dlsym(handle, name); }

extern "C" void* dc_dlopen(const char* file, int flags);
extern "C" void* dc_dlsym(void* handle, const char* name);

uintptr_t self_base() {
  Dl_info info;
  return dladdr(reinterpret_cast<void*>(&self_base), &info) ? reinterpret_cast<uintptr_t>(info.dli_fbase) : 0;
}

// The address of `function` in `library` if that library is loaded now, else null.
void* resolve_loaded(const std::string& library, const std::string& function, bool* loaded) {
  void* h = real_dlopen(library.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  *loaded = h != nullptr;
  if (h == nullptr) return nullptr;
  void* f = real_dlsym(h, function.c_str());
  dlclose(h);
  return f;
}

// The slot bound to (library, function), binding a fresh one if none is; -1 when all are used.
int slot_for(const std::string& library, const std::string& function) {
  int n = g_n_slots.load();
  for (int i = 0; i < n; ++i)
    if (g_slots[i].library == library && g_slots[i].function == function) return i;
  if (n >= kMaxStubs) return -1;
  g_slots[n].library = library;
  g_slots[n].function = function;
  g_n_slots.store(n + 1);
  return n;
}

// Gives active slots whose library has loaded their function's address; true if any is new.
bool resolve_slots() {
  bool fresh = false;
  for (int i = 0; i < g_n_slots.load(); ++i) {
    Slot& s = g_slots[i];
    if (!s.active.load()) continue;
    bool loaded;
    void* f = resolve_loaded(s.library, s.function, &loaded);
    if (f != nullptr && f != s.real.load()) {
      s.real.store(f, std::memory_order_release);
      fresh = true;
    }
  }
  return fresh;
}

struct PatchPass {
  uintptr_t self;
  bool restore;
};

// One binding of one object: point it at our stub / wrapper, or (restore) back at the target.
void patch_binding(void* ctx, const dl_phdr_info* obj, const char* symbol, void** slot,
                   Binding binding) {
  const auto* pass = static_cast<const PatchPass*>(ctx);
  void* cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (pass->restore) {
    int i;
    if (is_stub(cur, &i)) write_slot(obj, slot, g_slots[i].real.load());
    else if (cur == reinterpret_cast<void*>(&dc_dlopen)) write_slot(obj, slot, reinterpret_cast<void*>(&::dlopen));
    else if (cur == reinterpret_cast<void*>(&dc_dlsym)) write_slot(obj, slot, reinterpret_cast<void*>(&::dlsym));
    return;
  }
  if (symbol[0] == 'd' && std::strcmp(symbol, "dlopen") == 0) {
    if (cur != reinterpret_cast<void*>(&dc_dlopen)) write_slot(obj, slot, reinterpret_cast<void*>(&dc_dlopen));
    return;
  }
  if (symbol[0] == 'd' && std::strcmp(symbol, "dlsym") == 0) {
    if (cur != reinterpret_cast<void*>(&dc_dlsym)) write_slot(obj, slot, reinterpret_cast<void*>(&dc_dlsym));
    return;
  }
  auto it = g_by_name.find(symbol);
  if (it == g_by_name.end()) return;
  int lazy_pick = -1;
  for (int i : it->second) {
    Slot& s = g_slots[i];
    void* real = s.real.load();
    if (real == nullptr) continue;
    if (cur == stub_address(i)) return;
    if (cur == real) {
      if (write_slot(obj, slot, stub_address(i))) s.bindings.fetch_add(1);
      return;
    }
    if (lazy_pick < 0) lazy_pick = i;
  }
  // A slot bound elsewhere (a same-named function of an undeclared library) is left alone; a
  // lazy slot still pointing into its own PLT has not chosen yet and is taken by name (the
  // first declaring library whose function is loaded).
  if (lazy_pick >= 0 && binding == Binding::Lazy && in_object(obj, cur) &&
      write_slot(obj, slot, stub_address(lazy_pick)))
    g_slots[lazy_pick].bindings.fetch_add(1);
}

int visit_object(dl_phdr_info* obj, size_t, void* ctx) {
  const auto* pass = static_cast<const PatchPass*>(ctx);
  const char* name = obj->dlpi_name ? obj->dlpi_name : "";
  // Our own calls stay direct (recursion guard), and the loader and vDSO bind nothing of ours.
  if (obj->dlpi_addr == pass->self || std::strstr(name, "linux-vdso") ||
      std::strstr(name, "/ld-linux") || std::strstr(name, "ld-linux-x86-64.so"))
    return 0;
  if (!pass->restore) {
    if (!g_scanned.insert({obj->dlpi_addr, name}).second) return 0;
  }
  for_each_binding(obj, patch_binding, const_cast<PatchPass*>(pass));
  return 0;
}

unsigned long long unloads() {
  unsigned long long subs = 0;
  dl_iterate_phdr([](dl_phdr_info* obj, size_t size, void* out) {
        if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(obj->dlpi_subs))
          *static_cast<unsigned long long*>(out) = obj->dlpi_subs;
        return 1;
      }, &subs);
  return subs;
}

// Patches objects not seen yet (all of them after a library with hooked functions loads, or
// after an unload, which may have let a new object take an old one's address).
void patch_new_objects_locked(bool everything) {
  unsigned long long subs = unloads();
  if (everything || subs != g_unloads_seen) g_scanned.clear();
  g_unloads_seen = subs;
  PatchPass pass{self_base(), false};
  dl_iterate_phdr(visit_object, &pass);
}

// dlopen of a bare name searches the caller's RPATH/RUNPATH; through this wrapper the caller
// would be us. So an object loaded already is returned as is, then the caller's own search
// path is tried, then the plain search (LD_LIBRARY_PATH, ld.so.cache, system directories).
void* open_as_caller(const char* file, int flags, void* caller) {
  if (file == nullptr || file[0] == '\0' || std::strchr(file, '/') != nullptr)
    return real_dlopen(file, flags);
  if (void* h = real_dlopen(file, flags | RTLD_NOLOAD)) return h;
  Dl_info info;
  link_map* lm = nullptr;
  if (dladdr1(caller, &info, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) && lm != nullptr) {
    Dl_serinfo size;
    if (dlinfo(lm, RTLD_DI_SERINFOSIZE, &size) == 0) {
      std::vector<char> buf(size.dls_size);
      auto* paths = reinterpret_cast<Dl_serinfo*>(buf.data());
      *paths = size;
      if (dlinfo(lm, RTLD_DI_SERINFO, paths) == 0) {
        for (unsigned i = 0; i < paths->dls_cnt; ++i) {
          const char* dir = paths->dls_serpath[i].dls_name;
          if (dir == nullptr || dir[0] == '\0') continue;
          std::string path = std::string(dir) + "/" + file;
          struct stat st;
          if (stat(path.c_str(), &st) != 0) continue;
          if (void* h = real_dlopen(path.c_str(), flags)) return h;
        }
      }
    }
  }
  return real_dlopen(file, flags);
}

// Objects loaded since the last pass. Never waits for g_mu: a library constructor on another
// thread may be inside dlopen (holding the loader's lock, which a pass needs) and call dlopen
// itself; the thread holding g_mu picks the work up before it lets go.
std::atomic<bool> g_dirty{false};

void patch_pending() {
  g_dirty.store(true);
  while (g_dirty.load() && g_mu.try_lock()) {
    g_dirty.store(false);
    if (g_installed) patch_new_objects_locked(resolve_slots());
    g_mu.unlock();
  }
}

extern "C" __attribute__((visibility("hidden"))) void* dc_dlopen(const char* file, int flags) {
  void* caller = __builtin_extract_return_addr(__builtin_return_address(0));
  void* h = open_as_caller(file, flags, caller);
  if (h != nullptr && !(flags & RTLD_NOLOAD)) patch_pending();
  return h;
}

// RTLD_NEXT means "after the caller", and the caller here would be us: walk the objects after
// the caller's in load order and take the first that defines the name itself.
void* next_after(void* caller, const char* name) {
  Dl_info info;
  link_map* lm = nullptr;
  if (!dladdr1(caller, &info, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) || lm == nullptr)
    return nullptr;
  for (link_map* o = lm->l_next; o != nullptr; o = o->l_next) {
    void* f = real_dlsym(o, name);
    Dl_info where;
    if (f != nullptr && dladdr(f, &where) && reinterpret_cast<uintptr_t>(where.dli_fbase) == o->l_addr)
      return f;
  }
  return nullptr;
}

extern "C" __attribute__((visibility("hidden"))) void* dc_dlsym(void* handle, const char* name) {
  void* caller = __builtin_extract_return_addr(__builtin_return_address(0));
  void* f = handle == RTLD_NEXT ? next_after(caller, name) : real_dlsym(handle, name);
  if (f == nullptr || name == nullptr) return f;
  for (int i = 0; i < g_n_slots.load(std::memory_order_acquire); ++i) {
    const Slot& s = g_slots[i];
    if (s.active.load(std::memory_order_relaxed) && s.real.load(std::memory_order_acquire) == f)
      return stub_address(i);
  }
  return f;
}

}  // namespace

static std::string install_locked(const std::vector<HookSpec>& specs);

std::string install(const std::vector<HookSpec>& specs) {
  std::string error = install_locked(specs);
  if (error.empty()) patch_pending();  // objects dlopen'ed on other threads meanwhile
  return error;
}

static std::string install_locked(const std::vector<HookSpec>& specs) {
  if (const char* why = trampolines_unavailable(); why[0] != '\0') return why;
  std::lock_guard<std::mutex> g(g_mu);
  // Check everything before touching anything: nothing is hooked half-way.
  std::vector<int> chosen;
  for (const auto& spec : specs) {
    bool loaded;
    void* f = resolve_loaded(spec.library, spec.function, &loaded);
    if (loaded && f == nullptr)
      return spec.library + " has no function " + spec.function;
    int i = slot_for(spec.library, spec.function);
    if (i < 0) return "too many hooks (at most " + std::to_string(kMaxStubs) + " functions)";
    chosen.push_back(i);
  }
  detail::init_metrics();
  for (int i = 0; i < g_n_slots.load(); ++i) g_slots[i].active.store(false);
  g_by_name.clear();
  for (size_t k = 0; k < specs.size(); ++k) {
    Slot& s = g_slots[chosen[k]];
    s.kind.store(specs[k].kind);
    s.bytes_arg.store(specs[k].bytes_arg);
    s.bindings.store(0);
    s.active.store(true);
    g_by_name[s.function].push_back(chosen[k]);
  }
  resolve_slots();
  // The stubs' code is ours: native frames must not show it.
  native::add_self_object(reinterpret_cast<uintptr_t>(stub_address(0)));
  g_installed = true;
  patch_new_objects_locked(true);
  return "";
}

void uninstall() {
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_installed) return;
  PatchPass pass{self_base(), true};
  dl_iterate_phdr(visit_object, &pass);
  for (int i = 0; i < g_n_slots.load(); ++i) g_slots[i].active.store(false);
  g_by_name.clear();
  g_scanned.clear();
  g_installed = false;
}

std::vector<HookInfo> installed() {
  std::lock_guard<std::mutex> g(g_mu);
  std::vector<HookInfo> out;
  for (int i = 0; i < g_n_slots.load(); ++i) {
    const Slot& s = g_slots[i];
    if (s.active.load())
      out.push_back({s.library, s.function, s.real.load() != nullptr, s.bindings.load()});
  }
  return out;
}

}  // namespace dc::hooks
