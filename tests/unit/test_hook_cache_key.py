"""The compiled operator hook's cache key covers every input of its build (issue: two installs
with the same torch and Python rebuilt each other's hook forever)."""

import types

from deepcontext.capture import torch_ops


def _fake_sources(tmp_path, source_text, header_text):
    src = tmp_path / "torch_hook.cpp"
    inc = tmp_path / "include"
    inc.mkdir(exist_ok=True)
    src.write_text(source_text)
    (inc / "c_api.h").write_text(header_text)
    return lambda: (src, [inc])


def test_key_changes_with_the_hook_source_and_its_headers(tmp_path, monkeypatch):
    torch = types.SimpleNamespace(__version__="2.13.0+cpu")
    monkeypatch.setattr(torch_ops, "_hook_sources", _fake_sources(tmp_path, "a", "h1"))
    first = torch_ops._hook_name(torch)
    assert torch_ops._hook_name(torch) == first  # stable for the same inputs
    monkeypatch.setattr(torch_ops, "_hook_sources", _fake_sources(tmp_path, "b", "h1"))
    second = torch_ops._hook_name(torch)
    monkeypatch.setattr(torch_ops, "_hook_sources", _fake_sources(tmp_path, "b", "h2"))
    third = torch_ops._hook_name(torch)
    assert len({first, second, third}) == 3
    assert first.startswith("dc_torch_hook_api")


def test_key_of_the_installed_hook_is_the_key_of_its_files():
    source, includes = torch_ops._hook_sources()
    assert source.is_file() and all(p.is_dir() for p in includes)
    torch = types.SimpleNamespace(__version__="2.13.0+cpu")
    assert torch_ops._hook_name(torch).endswith(torch_ops._sources_digest())
