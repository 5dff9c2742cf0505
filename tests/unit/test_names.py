from deepcontext.render._names import short_symbol


def test_templates_and_parameters_are_elided():
    assert short_symbol("at::Tensor c10::Dispatcher::callWithDispatchKeySlowPath<at::Tensor, "
                        "at::Tensor const&>(c10::TypedOperatorHandle<at::Tensor (at::Tensor const&)>"
                        " const&, at::StepCallbacks&)") == \
        "at::Tensor c10::Dispatcher::callWithDispatchKeySlowPath<>()"
    assert short_symbol("at::native::linear(at::Tensor const&, std::optional<at::Tensor> const&)") \
        == "at::native::linear()"


def test_operators_and_plain_names_survive():
    assert short_symbol("std::vector<int, std::allocator<int> >::operator<<(int)") == \
        "std::vector<>::operator<<()"
    assert short_symbol("Foo::operator->() const") == "Foo::operator->() const"
    assert short_symbol("fstatat") == "fstatat"
    assert short_symbol("") == ""
