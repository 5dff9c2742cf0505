// A minimal reader of ELF function symbols: mmap the file, take .symtab (or .dynsym when the
// object is stripped), keep the defined FUNC/IFUNC symbols sorted by address. Every offset is
// bounds-checked against the file size, so a truncated or foreign file yields nullptr, never a
// crash.
#include "native_elf.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace dc::native {
namespace {

bool in_file(uint64_t off, uint64_t len, size_t file_len) {
  return off <= file_len && len <= file_len - off;
}

}  // namespace

ElfSymbols::~ElfSymbols() {
  if (map_ != nullptr) munmap(map_, map_len_);
}

std::unique_ptr<ElfSymbols> ElfSymbols::load(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    close(fd);
    return nullptr;
  }
  size_t len = static_cast<size_t>(st.st_size);
  void* map = mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return nullptr;
  std::unique_ptr<ElfSymbols> out(new ElfSymbols());
  out->map_ = map;
  out->map_len_ = len;

  const auto* base = static_cast<const unsigned char*>(map);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_ident[EI_DATA] != (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB) ||
      eh->e_shentsize != sizeof(Elf64_Shdr) ||
      !in_file(eh->e_shoff, uint64_t(eh->e_shnum) * sizeof(Elf64_Shdr), len))
    return nullptr;
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
  const Elf64_Shdr* table = nullptr;
  for (int want : {SHT_SYMTAB, SHT_DYNSYM}) {
    for (unsigned i = 0; i < eh->e_shnum && table == nullptr; ++i)
      if (sh[i].sh_type == static_cast<Elf64_Word>(want) && sh[i].sh_size > 0) table = &sh[i];
    if (table != nullptr) {
      out->from_symtab_ = want == SHT_SYMTAB;
      break;
    }
  }
  if (table == nullptr || table->sh_link >= eh->e_shnum ||
      table->sh_entsize != sizeof(Elf64_Sym) || !in_file(table->sh_offset, table->sh_size, len))
    return out;  // a valid object without symbols: every lookup misses
  const Elf64_Shdr& strs = sh[table->sh_link];
  if (!in_file(strs.sh_offset, strs.sh_size, len) || strs.sh_size == 0) return out;
  if (base[strs.sh_offset + strs.sh_size - 1] != '\0') return out;  // names must end inside
  const char* strtab = reinterpret_cast<const char*>(base + strs.sh_offset);
  const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + table->sh_offset);
  size_t n = table->sh_size / sizeof(Elf64_Sym);
  out->syms_.reserve(n / 2);
  for (size_t i = 0; i < n; ++i) {
    const Elf64_Sym& s = syms[i];
    int type = ELF64_ST_TYPE(s.st_info);
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || s.st_shndx == SHN_UNDEF || s.st_value == 0)
      continue;
    if (s.st_name >= strs.sh_size) continue;
    out->syms_.push_back({s.st_value, s.st_size, strtab + s.st_name});
  }
  // Sorted by address; among aliases the longer (sized) one first, so find() prefers it.
  std::sort(out->syms_.begin(), out->syms_.end(), [](const Sym& a, const Sym& b) {
    return a.addr != b.addr ? a.addr < b.addr : a.size > b.size;
  });
  return out;
}

const ElfSymbols::Sym* ElfSymbols::find(uint64_t vaddr) const {
  auto it = std::upper_bound(syms_.begin(), syms_.end(), vaddr,
                             [](uint64_t v, const Sym& s) { return v < s.addr; });
  if (it == syms_.begin()) return nullptr;
  auto nearest = it - 1;
  // Look back over a few neighbours: a small symbol may start inside a larger one.
  for (auto p = nearest; ; --p) {
    if (p->size > 0 && vaddr < p->addr + p->size) return &*p;
    if (p == syms_.begin() || nearest - p >= 8) break;
  }
  if (nearest->size == 0) return &*nearest;
  return nullptr;
}

std::vector<const ElfSymbols::Sym*> ElfSymbols::named(const char* name) const {
  std::vector<const Sym*> out;
  size_t n = std::strlen(name);
  for (const Sym& s : syms_)
    if (std::strncmp(s.name, name, n) == 0 && (s.name[n] == '\0' || s.name[n] == '.'))
      out.push_back(&s);
  return out;
}

std::vector<const ElfSymbols::Sym*> ElfSymbols::with_prefix(const char* prefix) const {
  std::vector<const Sym*> out;
  size_t n = std::strlen(prefix);
  for (const Sym& s : syms_)
    if (std::strncmp(s.name, prefix, n) == 0) out.push_back(&s);
  return out;
}

}  // namespace dc::native
