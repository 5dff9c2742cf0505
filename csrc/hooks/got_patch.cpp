// GOT slots of loaded objects, found through each object's dynamic section (the tables the
// dynamic linker itself used to fill them).
#include "got_patch.h"

#include <elf.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace dc::hooks {
namespace {

#if defined(__x86_64__)
constexpr unsigned kJumpSlot = R_X86_64_JUMP_SLOT, kGlobDat = R_X86_64_GLOB_DAT,
                   kAbs64 = R_X86_64_64;
#elif defined(__aarch64__)
constexpr unsigned kJumpSlot = R_AARCH64_JUMP_SLOT, kGlobDat = R_AARCH64_GLOB_DAT,
                   kAbs64 = R_AARCH64_ABS64;
#else
constexpr unsigned kJumpSlot = ~0u, kGlobDat = ~0u, kAbs64 = ~0u;
#endif

// glibc relocates most d_ptr entries in place; where the dynamic section is read-only they
// stay file-relative. A pointer below the load base is the latter.
uintptr_t dyn_addr(const dl_phdr_info* obj, ElfW(Addr) p) {
  return p < obj->dlpi_addr ? obj->dlpi_addr + p : p;
}

struct Tables {
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const ElfW(Rela)* jmprel = nullptr;
  size_t jmprel_size = 0;
  bool jmprel_is_rela = true;
  const ElfW(Rela)* rela = nullptr;
  size_t rela_size = 0;
};

bool read_tables(const dl_phdr_info* obj, Tables* t) {
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < obj->dlpi_phnum; ++i)
    if (obj->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = reinterpret_cast<const ElfW(Dyn)*>(obj->dlpi_addr + obj->dlpi_phdr[i].p_vaddr);
  if (dyn == nullptr) return false;
  for (; dyn->d_tag != DT_NULL; ++dyn) {
    switch (dyn->d_tag) {
      case DT_SYMTAB: t->symtab = reinterpret_cast<const ElfW(Sym)*>(dyn_addr(obj, dyn->d_un.d_ptr)); break;
      case DT_STRTAB: t->strtab = reinterpret_cast<const char*>(dyn_addr(obj, dyn->d_un.d_ptr)); break;
      case DT_JMPREL: t->jmprel = reinterpret_cast<const ElfW(Rela)*>(dyn_addr(obj, dyn->d_un.d_ptr)); break;
      case DT_PLTRELSZ: t->jmprel_size = dyn->d_un.d_val; break;
      case DT_PLTREL: t->jmprel_is_rela = dyn->d_un.d_val == DT_RELA; break;
      case DT_RELA: t->rela = reinterpret_cast<const ElfW(Rela)*>(dyn_addr(obj, dyn->d_un.d_ptr)); break;
      case DT_RELASZ: t->rela_size = dyn->d_un.d_val; break;
      default: break;
    }
  }
  return t->symtab != nullptr && t->strtab != nullptr;
}

void visit_table(const dl_phdr_info* obj, const Tables& t, const ElfW(Rela)* rel, size_t bytes,
                 BindingVisitor visit, void* ctx) {
  if (rel == nullptr) return;
  for (size_t i = 0; i < bytes / sizeof(ElfW(Rela)); ++i) {
    const unsigned type = ELF64_R_TYPE(rel[i].r_info);
    const bool lazy = type == kJumpSlot;
    if (!lazy && type != kGlobDat && !(type == kAbs64 && rel[i].r_addend == 0)) continue;
    const unsigned sym = ELF64_R_SYM(rel[i].r_info);
    if (sym == 0) continue;
    const ElfW(Sym)& s = t.symtab[sym];
    if (ELF64_ST_TYPE(s.st_info) != STT_FUNC && ELF64_ST_TYPE(s.st_info) != STT_GNU_IFUNC &&
        ELF64_ST_TYPE(s.st_info) != STT_NOTYPE)
      continue;
    void** slot = reinterpret_cast<void**>(obj->dlpi_addr + rel[i].r_offset);
    visit(ctx, obj, t.strtab + s.st_name, slot, lazy ? Binding::Lazy : Binding::Eager);
  }
}

}  // namespace

void for_each_binding(const dl_phdr_info* obj, BindingVisitor visit, void* ctx) {
  Tables t;
  if (!read_tables(obj, &t)) return;
  // Only RELA tables: the psABIs of x86-64 and aarch64 use them for the GOT.
  if (t.jmprel_is_rela) visit_table(obj, t, t.jmprel, t.jmprel_size, visit, ctx);
  visit_table(obj, t, t.rela, t.rela_size, visit, ctx);
}

bool in_object(const dl_phdr_info* obj, const void* addr) {
  auto a = reinterpret_cast<uintptr_t>(addr);
  for (int i = 0; i < obj->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = obj->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t lo = obj->dlpi_addr + ph.p_vaddr;
    if (a >= lo && a < lo + ph.p_memsz) return true;
  }
  return false;
}

bool write_slot(const dl_phdr_info* obj, void** slot, void* value) {
  auto a = reinterpret_cast<uintptr_t>(slot);
  bool relro = false;
  for (int i = 0; i < obj->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = obj->dlpi_phdr[i];
    uintptr_t lo = obj->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_GNU_RELRO && a >= lo && a < lo + ph.p_memsz) relro = true;
  }
  if (!relro) {
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);  // callers on other threads see old or new
    return true;
  }
  // RELRO: made read-only after relocation, and read-only again once written.
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* start = reinterpret_cast<void*>(a & ~(page - 1));
  if (mprotect(start, page, PROT_READ | PROT_WRITE) != 0) return false;
  __atomic_store_n(slot, value, __ATOMIC_RELEASE);
  mprotect(start, page, PROT_READ);
  return true;
}

namespace {
struct Rebind {
  const char* symbol;
  void* replacement;
  const void* keep_in;
  bool write;  // false: only count the slots that point at `replacement`
  int slots;
};

void rebind_slot(void* ctx, const dl_phdr_info* obj, const char* symbol, void** slot, Binding) {
  auto* r = static_cast<Rebind*>(ctx);
  if (std::strcmp(symbol, r->symbol) != 0) return;
  if (*slot == r->replacement || (r->write && write_slot(obj, slot, r->replacement))) ++r->slots;
}

int visit_bindings(Rebind r) {
  dl_iterate_phdr(
      [](dl_phdr_info* obj, size_t, void* ctx) {
        auto* rb = static_cast<Rebind*>(ctx);
        if (!in_object(obj, rb->keep_in)) for_each_binding(obj, rebind_slot, rb);
        return 0;
      },
      &r);
  return r.slots;
}
}  // namespace

int rebind_everywhere(const char* symbol, void* replacement, const void* keep_in) {
  return visit_bindings(Rebind{symbol, replacement, keep_in, true, 0});
}

int count_bindings(const char* symbol, const void* value, const void* keep_in) {
  return visit_bindings(Rebind{symbol, const_cast<void*>(value), keep_in, false, 0});
}

}  // namespace dc::hooks
