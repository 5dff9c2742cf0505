// Function symbols of one ELF object read from its file (.symtab, else .dynsym): names for
// static functions and .cold parts that dladdr (exported .dynsym only) cannot see.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dc::native {

class ElfSymbols {
 public:
  struct Sym {
    uint64_t addr;     // link-time virtual address (runtime address - load bias)
    uint64_t size;
    const char* name;  // points into the mapped file, alive as long as this object
  };

  // nullptr when the file cannot be read or is not a 64-bit ELF of this machine's byte order.
  static std::unique_ptr<ElfSymbols> load(const std::string& path);
  ~ElfSymbols();
  ElfSymbols(const ElfSymbols&) = delete;
  ElfSymbols& operator=(const ElfSymbols&) = delete;

  // The function covering `vaddr` (size-0 symbols cover up to the next symbol), or nullptr.
  const Sym* find(uint64_t vaddr) const;
  // Every symbol whose name is `name` or starts with `name` + "." (GCC's .cold/.part clones).
  std::vector<const Sym*> named(const char* name) const;
  // Every symbol whose name starts with `prefix`.
  std::vector<const Sym*> with_prefix(const char* prefix) const;
  bool from_symtab() const { return from_symtab_; }

 private:
  ElfSymbols() = default;
  void* map_ = nullptr;
  size_t map_len_ = 0;
  bool from_symtab_ = false;
  std::vector<Sym> syms_;  // sorted by addr
};

}  // namespace dc::native
