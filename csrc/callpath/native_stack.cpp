// The splice: one path from a native stack and a Python stack (stack_splicing.md §1).
//
// Every native address is classified by plain range checks against tables built once in
// init(): the eval loop's hot and .cold parts, the interpreter's objects, a small whitelist of
// interpreter functions worth keeping (waiting for the GIL or a lock, sleeping, collecting
// garbage), and DeepContext's own objects. No symbol lookup happens per splice.
#include "native_stack.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "native_modules.h"

namespace dc::native {
namespace {

struct Range {
  uintptr_t lo, hi;
  bool has(uintptr_t a) const { return a >= lo && a < hi; }
};

constexpr int kMaxEval = 8, kMaxInterp = 2, kMaxKeep = 64, kMaxSelf = 8;
Range g_eval[kMaxEval];
int g_n_eval = 0;
Range g_interp[kMaxInterp];
int g_n_interp = 0;
Range g_keep[kMaxKeep];
int g_n_keep = 0;
Range g_self[kMaxSelf];
std::atomic<int> g_n_self{0};
std::mutex g_self_mu;

// Interpreter functions kept as native frames: they say why a thread is not running bytecode.
const char* const kKeepNames[] = {"take_gil", "PyThread_acquire_lock_timed", "acquire_timed",
                                  "lock_PyThread_acquire_lock", "rlock_acquire", "time_sleep",
                                  "pysleep", "gc_collect_main", "gc_collect_region",
                                  "PyGILState_Ensure"};

enum Cls : uint8_t { kOther, kEval, kInterp, kKeep, kSelf };

bool in(const Range* r, int n, uintptr_t a) {
  for (int i = 0; i < n; ++i)
    if (r[i].has(a)) return true;
  return false;
}

Cls classify(uintptr_t ip) {
  uintptr_t a = ip - 1;  // a return address: the call instruction is just before it
  if (in(g_eval, g_n_eval, a)) return kEval;
  if (in(g_self, g_n_self.load(std::memory_order_acquire), a)) return kSelf;
  if (in(g_interp, g_n_interp, a)) return in(g_keep, g_n_keep, a) ? kKeep : kInterp;
  return kOther;
}

void add_range(Range* table, int* n, int cap, uintptr_t lo, uintptr_t hi) {
  if (*n < cap && hi > lo) table[(*n)++] = {lo, hi};
}

std::string base_name(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void find_eval_loop() {
  void* eval = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
  ModuleInfo m;
  if (eval == nullptr || !find_module(reinterpret_cast<uintptr_t>(eval), &m)) return;
  add_range(g_interp, &g_n_interp, kMaxInterp, m.lo, m.hi);
  if (const ElfSymbols* syms = module_symbols(m.path)) {
    for (const auto* s : syms->named("_PyEval_EvalFrameDefault"))
      add_range(g_eval, &g_n_eval, kMaxEval, m.bias + s->addr, m.bias + s->addr + s->size);
    for (const char* name : kKeepNames)
      for (const auto* s : syms->named(name))
        add_range(g_keep, &g_n_keep, kMaxKeep, m.bias + s->addr, m.bias + s->addr + s->size);
  }
  if (g_n_eval == 0) {  // unreadable file: the exported symbol's size from the loader
    Dl_info info;
    void* extra = nullptr;  // the loader's ElfW(Sym) of the symbol
    if (dladdr1(eval, &info, &extra, RTLD_DL_SYMENT) && extra != nullptr) {
      const auto* sym = static_cast<const ElfW(Sym)*>(extra);
      add_range(g_eval, &g_n_eval, kMaxEval, reinterpret_cast<uintptr_t>(eval),
                reinterpret_cast<uintptr_t>(eval) + sym->st_size);
    }
  }
}

int main_program(struct dl_phdr_info* info, size_t, void* arg) {
  auto* r = static_cast<Range*>(arg);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
    if (r->hi == 0 || lo < r->lo) r->lo = lo;
    if (hi > r->hi) r->hi = hi;
  }
  return 1;  // the first entry is the main program
}

// A shared-libpython build's `python` executable only holds main(): interpreter too.
void find_python_executable() {
  Range exe{0, 0};
  dl_iterate_phdr(main_program, &exe);
  ModuleInfo m;
  if (exe.hi == 0 || !find_module(exe.lo, &m)) return;
  if (in(g_interp, g_n_interp, exe.lo)) return;  // a static interpreter: already covered
  if (base_name(m.path).compare(0, 6, "python") == 0)
    add_range(g_interp, &g_n_interp, kMaxInterp, exe.lo, exe.hi);
}

}  // namespace

void init_symbols_and_ranges() {
  find_eval_loop();
  find_python_executable();
  add_self_object(reinterpret_cast<uintptr_t>(&init_symbols_and_ranges));
}

bool is_eval_frame(uintptr_t ip) {
  init();
  return in(g_eval, g_n_eval, ip - 1);
}

void add_self_object(uintptr_t any_address) {
  ModuleInfo m;
  if (!find_module(any_address, &m)) return;
  std::lock_guard<std::mutex> g(g_self_mu);
  int n = g_n_self.load(std::memory_order_relaxed);
  if (in(g_self, n, any_address) || n >= kMaxSelf) return;
  g_self[n] = {m.lo, m.hi};
  g_n_self.store(n + 1, std::memory_order_release);
}

const char* splice_status_name(SpliceStatus s) {
  switch (s) {
    case SpliceStatus::kExact: return "exact";
    case SpliceStatus::kOffByOne: return "off_by_one";
    case SpliceStatus::kTruncated: return "truncated";
    case SpliceStatus::kNoPython: return "no_python";
    case SpliceStatus::kMismatch: return "mismatch";
  }
  return "?";
}

namespace {

struct Block {
  int inner, outer;  // py indices, innermost first: py[inner..outer], py[outer] the entry frame
};

void emit_block(std::vector<SpliceItem>* out, const Block& b) {
  for (int i = b.outer; i >= b.inner; --i) out->push_back({true, i, 0});
}

}  // namespace

std::vector<SpliceItem> splice(const uintptr_t* ips, int n_ips, const dc_raw_frame* py, int n_py,
                               SpliceStatus* status, const SpliceOptions& opts) {
  init();
  std::vector<SpliceItem> out;
  out.reserve(static_cast<size_t>(std::max(0, n_ips)) + static_cast<size_t>(std::max(0, n_py)));
  SpliceStatus st = SpliceStatus::kExact;
  auto finish = [&](SpliceStatus s) {
    if (status != nullptr) *status = s;
    return std::move(out);
  };
  auto python_only = [&] {
    out.clear();
    for (int i = n_py - 1; i >= 0; --i) out.push_back({true, i, 0});
    return finish(SpliceStatus::kMismatch);
  };

  // Scratch on the stack (about 5 KB): no thread_local object, which a thread's exit destroys
  // while later TLS destructors (torch's) may still run operators that splice.
  n_ips = std::min(n_ips, kMaxFrames);
  n_py = std::min(n_py, kMaxFrames);
  uint8_t cls[kMaxFrames];
  int evals[kMaxFrames];  // positions in ips of eval frames, innermost first
  Block blocks[kMaxFrames];  // innermost first
  int block_of[kMaxFrames];  // block_of[e]: the block eval frame e runs, -1 for none
  int m = 0;
  for (int i = 0; i < n_ips; ++i) {
    cls[i] = classify(ips[i]);
    if (cls[i] == kEval) evals[m++] = i;
  }
  if (n_py <= 0) {
    // Eval frames without any Python frame: the walk was cut by a half-linked chain (a sample
    // during a frame push). One eval frame may be the thread's first call being entered.
    if (m > 1) return python_only();
    for (int i = n_ips - 1; i >= 0; --i)
      if (cls[i] == kOther || cls[i] == kKeep) out.push_back({false, 0, ips[i]});
    return finish(SpliceStatus::kNoPython);
  }

  int k = 0;
  for (int i = 0, start = 0; i < n_py; ++i)
    if (py[i].entry || i == n_py - 1) {
      blocks[k++] = {start, i};
      start = i + 1;
    }
  if (m == 0) return python_only();

  for (int e = 0; e < m; ++e) block_of[e] = -1;
  int outer_blocks_from = k;  // blocks [from, k) precede every native frame (native cut short)
  if (opts.native_truncated || opts.python_truncated) {
    // The missing frames are at the outer end, so pair from the innermost.
    if ((k > m && !opts.native_truncated) || (m > k && !opts.python_truncated)) return python_only();
    for (int i = 0; i < std::min(m, k); ++i) block_of[i] = i;
    if (k > m) outer_blocks_from = m;
    st = SpliceStatus::kTruncated;
  } else {
    // Whole stacks: the only tolerated difference is one eval frame more, at the innermost end
    // (a call entered before its frame is linked, or left after it was unlinked), so pair from
    // the outermost (memray's order, bloomberg/memray#205). A run without its eval frame cannot
    // come from such a race (3.10-3.13 link a frame inside the eval function); it means the
    // unwind stopped early, where any pairing would be a guess.
    int d = m - k;
    if (d != 0 && d != 1) return python_only();
    for (int i = 0; i < k; ++i) block_of[m - 1 - i] = k - 1 - i;
    st = d == 0 ? SpliceStatus::kExact : SpliceStatus::kOffByOne;
  }

  for (int b = k - 1; b >= outer_blocks_from; --b) emit_block(&out, blocks[b]);
  const bool drop_outer = !opts.keep_outer && !opts.native_truncated;
  int e = m - 1;
  for (int i = n_ips - 1; i >= 0; --i) {
    switch (cls[i]) {
      case kEval:
        if (block_of[e] >= 0) emit_block(&out, blocks[block_of[e]]);
        --e;
        break;
      case kOther:
      case kKeep:
        if (!(drop_outer && i > evals[m - 1])) out.push_back({false, 0, ips[i]});
        break;
      default:  // other interpreter code and DeepContext's own frames
        break;
    }
  }
  return finish(st);
}

}  // namespace dc::native
