"""The hooks file parser (deepcontext.capture.hooks): shapes accepted and one-line errors."""

import pytest

from deepcontext.capture.hooks import HookSpec, hooks_from_config, load_hooks
from deepcontext.errors import DeepContextError


def write(tmp_path, text):
    p = tmp_path / "hooks.toml"
    p.write_text(text)
    return p


def test_entries_in_order_with_optional_bytes_arg(tmp_path):
    p = write(tmp_path, '[[hook]]\nlibrary = "liba.so"\nfunction = "a_launch"\nkind = "launch"\n'
                        'bytes_arg = 1\n[[hook]]\nlibrary = "/x/libb.so.2"\nfunction = "b_sync"\n'
                        'kind = "sync"\n')
    assert load_hooks(p) == (HookSpec("liba.so", "a_launch", "launch", 1),
                             HookSpec("/x/libb.so.2", "b_sync", "sync", None))
    assert load_hooks(p)[0].native() == ("liba.so", "a_launch", 0, 1)
    assert load_hooks(p)[1].native() == ("/x/libb.so.2", "b_sync", 2, -1)


@pytest.mark.parametrize("text,message", [
    ("", "no [[hook]] entries"),
    ("[[hooks]]\n", "unknown table 'hooks'"),
    ("[[hook]]\nlibrary = 'l.so'\n", "function must be a non-empty string"),
    ("[[hook]]\nlibrary = 'l.so'\nfunction = 'f'\nkind = 'gpu'\n", "unknown kind 'gpu'"),
    ("[[hook]]\nlibrary = 'l.so'\nfunction = 'f'\nkind = 'call'\nbytes_arg = -1\n", "bytes_arg"),
    ("[[hook]]\nlibrary = 'l.so'\nfunction = 'f'\nkind = 'call'\nbytes_arg = true\n", "bytes_arg"),
    ("[[hook]]\nlibrary = 'l.so'\nfunction = 'f'\nkind = 'call'\nargs = 2\n", "unknown key 'args'"),
    ("[[hook]]\nlibrary = 'l.so'\nfunction = 'f()'\nkind = 'call'\n", "not a C function name"),
    ("[[hook]]\nlibrary = 'l.so'\nfunction = 'f'\nkind = 'call'\n" * 2, "declared twice"),
    ("[[hook]\n", "not valid TOML"),
])
def test_bad_files(tmp_path, text, message):
    with pytest.raises(DeepContextError, match=".*") as e:
        load_hooks(write(tmp_path, text))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(DeepContextError, match="cannot read hooks file"):
        load_hooks(tmp_path / "none.toml")


def test_config_dicts_from_record_are_rechecked():
    assert hooks_from_config([{"library": "l.so", "function": "f", "kind": "free"}]) == (
        HookSpec("l.so", "f", "free", None),)
    with pytest.raises(DeepContextError, match="unknown kind"):
        hooks_from_config([{"library": "l.so", "function": "f", "kind": "x"}])
