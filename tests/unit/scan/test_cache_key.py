"""The cache key holds a path's extension, not the path: that is all of a path any scanner
reads. These tests fail if detect-secrets starts reading more of it (then the key must too)."""

from __future__ import annotations

import inspect

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import BasePlugin
from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin
from detect_secrets.plugins.keyword import KeywordDetector
from detect_secrets.util.filetype import determine_file_type

from gatekeeper.scan import ScanItem
from gatekeeper.scan.detect_secrets import KEPT_FILTERS


def test_only_the_keyword_plugin_reads_the_file_name_and_only_its_type() -> None:
    readers = set()
    for cls in get_mapping_from_secret_type_to_class().values():
        own = cls.analyze_line
        if own in (BasePlugin.analyze_line, HighEntropyStringsPlugin.analyze_line):
            continue  # these pass the name on into the finding only
        readers.add(cls)
    assert readers == {KeywordDetector}
    source = inspect.getsource(KeywordDetector.analyze_line)
    # the parameter, the file type, and passing it on (into the finding only)
    assert source.count("filename") == 4 and "determine_file_type(filename)" in source
    assert source.count("filename=filename") == 1


def test_the_file_type_is_the_extension_alone() -> None:
    source = inspect.getsource(determine_file_type)
    assert "os.path.splitext(filename)" in source and source.count("filename") == 2
    assert determine_file_type("a/b/c.py") == determine_file_type("other/dir/x.py")


def test_no_filter_oms_keeps_takes_the_file_name() -> None:
    import importlib

    for path in KEPT_FILTERS:
        module, _, name = path.rpartition(".")
        fn = getattr(importlib.import_module(module), name)
        assert "filename" not in inspect.signature(fn).parameters, path


def test_same_bytes_same_extension_same_key_and_not_otherwise() -> None:
    a = ScanItem.of_bytes("src/a.py", b"x = 1\n")
    assert a.key == ScanItem.of_bytes("elsewhere/b.py", b"x = 1\n").key
    assert a.key != ScanItem.of_bytes("src/a.yaml", b"x = 1\n").key
    assert a.key != ScanItem.of_bytes("src/a.py", b"x = 2\n").key
    assert a.key != ScanItem.of_bytes("src/a.py", b"x = 1\n", "replace").key
    assert a.key != ScanItem.whole("src/a.py", "x = 1\n").key  # another way to the text
    lines = ScanItem("src/a.py", [(1, "x = 1")])
    assert lines.key != ScanItem("src/a.py", [(2, "x = 1")]).key  # numbers count
    assert lines.key == ScanItem("b/c.py", [(1, "x = 1")]).key
