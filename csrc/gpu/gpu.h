// GPU activity capture through CUPTI (see gpu/README in docs/design.md).
#pragma once
#include <string>

namespace dc {
// Whether this build has CUPTI support compiled in.
bool gpu_compiled();
// Subscribes to CUPTI; returns "" on success, else one line saying why GPU capture is off.
std::string gpu_start();
// Flushes outstanding activity records into the tree (bounded wait).
void gpu_flush();
}  // namespace dc
