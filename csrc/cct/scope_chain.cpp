// Events inside an open scope whose Python runs newer than the scope's frame (the optimizer's
// per-parameter loop inside its step's `record_function`): their frames checked by address
// against the last such event's, as the top-level chain's are (context.cpp: chain_nodes), where
// walk_to_op_frame and cached_under_op described and compared 8 frames an event
// (cpu-2026-12-06-placed-frames-a4bc795.md, section 3).
#include <algorithm>
#include <climits>

#include "capture_internal.h"
#include "lookup.h"

namespace dc::detail {
namespace {

struct ScopeMatch {
  int at = -1;    // chain index of the matched frame (-1: none)
  int kind = -1;  // 0: the scope's own frame; j + 1: anchor frame j
};

// frames_above_op_found's search over the chain's frames [lo, n) that have code, innermost
// first: the scope's own frame (by address and code) anywhere, else each anchor in turn, up to
// kind `max_kind`.
ScopeMatch search(const dc_chain& c, int lo, const OpEntry& top, int max_kind) {
  const ScopeAnchor& a = top.anchor;
  for (int i = c.n - 1; i >= lo; --i)
    if (c.code[i] != nullptr && c.link[i].frame == top.py_frame && c.code[i] == a.code) return {i, 0};
  for (int j = 0; j < a.n && j + 1 <= max_kind; ++j)
    for (int i = c.n - 1; i >= lo; --i)
      if (c.code[i] != nullptr && c.link[i].frame == a.frame[j] && c.code[i] == a.frame_code[j])
        return {i, j + 1};
  return {};
}

}  // namespace

bool scope_chain_context(Lookup& lk, ThreadState* s, void* py_state, const OpEntry& top,
                         uint32_t* node, uint32_t* py_node) {
  dc_chain& c = s->scope_chain;
  ThreadState::ScopePlace& p = s->scope_place;
  int kept;
  if (dc_walk_python_since(py_state, &c, kMaxPyDepth, &kept) < 0) {
    p.valid = false;
    return false;
  }
  // Under the scope the last event was under, with its match among the frames kept since: only
  // the new frames can change the answer, to a match that comes before it in the search's order.
  const bool same = p.valid && p.handle == top.handle && p.node == top.node &&
                    p.epoch == top.epoch && p.at <= kept;
  ScopeMatch m;
  if (same) {
    m = search(c, kept + 1, top, p.at < 0 ? INT_MAX : p.kind);
    if (m.at < 0) m = ScopeMatch{p.at, p.kind};
  } else {
    m = search(c, 0, top, INT_MAX);
  }
  // The scope's own frame stays outside; an anchor goes below it at its line now.
  const int first = m.at < 0 ? c.n : m.kind == 0 ? m.at + 1 : m.at;
  if (first < c.n) {
    // Nodes kept from the last event hold where it placed the same frames under the same scope.
    const int from = same && p.first == first ? std::max(first, kept + 1) : first;
    const int upto = chain_nodes(nullptr, s, c, from, first, top.node);
    if (upto < c.n) chain_nodes(&lk.writer(), s, c, upto, first, top.node);
  }
  p = ThreadState::ScopePlace{true, top.handle, top.node, top.epoch, m.at, m.kind, first};
  const int below = first > 0 ? c.described[first - 1] : 0;
  if (first >= c.n || c.described[c.n - 1] == below) {  // no frame with code newer than the match
    *node = top.node;
    *py_node = top.py_node;
  } else {
    *node = *py_node = c.node[c.n - 1];
  }
  return true;
}

}  // namespace dc::detail
