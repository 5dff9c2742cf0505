// Registers the native-stack test entry points on `_core.testing` (native_bindings.cpp).
#pragma once

namespace nanobind {
class module_;
}

namespace dc::native {
void bind_testing(nanobind::module_& m);
}
