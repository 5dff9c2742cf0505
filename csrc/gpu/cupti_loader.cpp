// Finds and dlopen()s libcupti and libcuda at run time, so a build with CUPTI headers still
// imports on machines without CUDA and says plainly what is missing.
#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cupti_compat.h"
#include "gpu_internal.h"

namespace dc {
namespace gpu {

// Never destroyed: CUPTI calls back (through these pointers) from its own exit handler.
CuptiApi& cupti() {
  static CuptiApi* api = new CuptiApi();
  return *api;
}

DriverApi& driver() {
  static DriverApi* api = new DriverApi();
  return *api;
}

std::string load_driver() {
  DriverApi& d = driver();
  if (d.handle != nullptr) return "";
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) h = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return "no CUDA driver (libcuda.so.1 not found)";
  d.cuDriverGetVersion = reinterpret_cast<decltype(d.cuDriverGetVersion)>(
      dlsym(h, "cuDriverGetVersion"));
  d.cuDeviceGet = reinterpret_cast<decltype(d.cuDeviceGet)>(dlsym(h, "cuDeviceGet"));
  d.cuDeviceGetName = reinterpret_cast<decltype(d.cuDeviceGetName)>(dlsym(h, "cuDeviceGetName"));
  d.cuDeviceGetAttribute = reinterpret_cast<decltype(d.cuDeviceGetAttribute)>(
      dlsym(h, "cuDeviceGetAttribute"));
  d.cuDeviceTotalMem = reinterpret_cast<decltype(d.cuDeviceTotalMem)>(
      dlsym(h, "cuDeviceTotalMem_v2"));
  int version = 0;
  if (d.cuDriverGetVersion == nullptr || d.cuDriverGetVersion(&version) != CUDA_SUCCESS ||
      version == 0) {
    dlclose(h);
    return "no usable CUDA driver (libcuda.so.1 loads but reports no version)";
  }
  d.handle = h;
  return "";
}

namespace {

// Binds every entry point; on failure returns the first missing one.
std::string bind(void* h, CuptiApi& api) {
#define DC_BIND_REQUIRED(name)                                                     \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(h, #name));               \
  if (api.name == nullptr) return "lacks " #name;
#define DC_BIND_OPTIONAL(name) api.name = reinterpret_cast<decltype(api.name)>(dlsym(h, #name));
  DC_CUPTI_REQUIRED(DC_BIND_REQUIRED)
  DC_CUPTI_OPTIONAL(DC_BIND_OPTIONAL)
#undef DC_BIND_REQUIRED
#undef DC_BIND_OPTIONAL
  return "";
}

// libcupti.so* in a directory, unversioned name last (newest version first).
std::vector<std::string> in_dir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, "libcupti.so", 11) == 0) out.push_back(dir + "/" + e->d_name);
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() > b.size() : a > b;
  });
  return out;
}

}  // namespace

std::string load_cupti(const std::vector<std::string>& dirs) {
  CuptiApi& api = cupti();
  if (api.handle != nullptr) return "";
  std::vector<std::string> candidates;
  if (const char* forced = std::getenv("DEEPCONTEXT_CUPTI_LIB")) candidates.push_back(forced);
  // A libcupti already in the process (e.g. linked by torch) must be the one we use: a second
  // copy would be a second, conflicting CUPTI.
  size_t in_process_end = candidates.size();
  for (const char* soname : {"libcupti.so.13", "libcupti.so.12", "libcupti.so.11.8", "libcupti.so"}) {
    if (void* h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD)) {
      dlclose(h);
      candidates.push_back(soname);
      in_process_end = candidates.size();
    }
  }
  std::vector<std::string> search = dirs;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"}) {
    if (const char* root = std::getenv(var)) {
      for (const char* sub : {"/extras/CUPTI/lib64", "/lib64", "/lib", "/targets/x86_64-linux/lib"})
        search.push_back(std::string(root) + sub);
    }
  }
  for (const char* sub : {"/extras/CUPTI/lib64", "/lib64", "/lib"}) search.push_back(std::string("/usr/local/cuda") + sub);
  for (const auto& dir : search)
    for (auto& p : in_dir(dir)) candidates.push_back(p);
  for (const char* soname : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"})
    candidates.push_back(soname);  // the loader's own path (ldconfig, LD_LIBRARY_PATH)

  std::string why, refused;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string& c = candidates[i];
    void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) continue;
    CuptiApi trial;
    std::string missing = bind(h, trial);
    if (!missing.empty()) {
      why = c + " " + missing;
      dlclose(h);
      continue;
    }
    trial.handle = h;
    char resolved[4096];
    trial.path = c;
    if (dlinfo(h, RTLD_DI_ORIGIN, resolved) == 0) {
      const char* base = std::strrchr(c.c_str(), '/');
      trial.path = std::string(resolved) + "/" + (base ? base + 1 : c.c_str());
    }
    // The records' layouts come from this build's headers; the library must write those.
    uint32_t version = 0;
    std::string mismatch =
        trial.cuptiGetVersion(&version) == CUPTI_SUCCESS
            ? cupti_version_mismatch(CUPTI_API_VERSION, version, trial.path)
            : "GPU capture off: " + trial.path + " reports no CUPTI version";
    if (!mismatch.empty()) {
      if (i < in_process_end) return mismatch;  // the process's own CUPTI: no second copy
      refused = mismatch;
      dlclose(h);
      continue;
    }
    api = trial;
    return "";
  }
  if (!refused.empty()) return refused;
  if (!why.empty()) return "no usable libcupti (" + why + ")";
  return "libcupti not found (install the nvidia-cuda-cupti wheel matching your CUDA, or set "
         "CUDA_HOME)";
}

std::string result_name(CUptiResult r) {
  const char* s = nullptr;
  if (cupti().cuptiGetResultString && cupti().cuptiGetResultString(r, &s) == CUPTI_SUCCESS && s)
    return s;
  return "CUPTI error " + std::to_string(static_cast<int>(r));
}

}  // namespace gpu
}  // namespace dc
