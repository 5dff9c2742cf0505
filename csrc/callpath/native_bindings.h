// Registers the native-stack functions on the _core module (native_bindings.cpp).
#pragma once

namespace nanobind {
class module_;
}

namespace dc::native {
void bind(nanobind::module_& m);
}
